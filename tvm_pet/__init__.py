"""tvm_pet: PET's partially equivalent transformations with automated corrections, for TVM.

The engine (``tvm_pet.ir``, ``tvm_pet.ops``, ``tvm_pet.verify``, ``tvm_pet.onnx``) is pure
Python and NumPy and does not import TVM; neither does ``tvm_pet.testing``, the helpers that only
the tests and benchmarks use (oracles: brute force, exact whole-program evaluation mod p; real
model definitions). ``tvm_pet.PETPass`` is loaded on first use (it imports TVM and registers the
``"pet"`` Relax pipeline); ``tvm_pet.tuning_pipeline``, PET inside TVM's tuning pipeline, too
(``relax.get_pipeline("pet_tuning", ...)``).
"""
from tvm_pet.errors import (ModelError, PetError, ProgramError, ShapeError, UnsupportedOperator,
                            VerificationError)

__version__ = "0.1.0"

__all__ = ["PetError", "ShapeError", "UnsupportedOperator", "VerificationError", "ProgramError",
           "ModelError", "verify", "correct", "PETPass", "tuning_pipeline"]


def __getattr__(name):
    if name == "verify":
        from tvm_pet.verify.verifier import verify
        return verify
    if name == "correct":
        from tvm_pet.verify.corrector import correct
        return correct
    if name == "PETPass":
        from tvm_pet.relax.pet_pass import PETPass
        import tvm_pet.relax  # noqa: F401  (registers the "pet" pipeline)
        return PETPass
    if name == "tuning_pipeline":
        from tvm_pet.relax.tuning_pipeline import tuning_pipeline
        import tvm_pet.relax  # noqa: F401  (registers "pet" and "pet_tuning")
        return tuning_pipeline
    raise AttributeError(f"module 'tvm_pet' has no attribute {name!r}")
