"""tvm_pet: PET's partially equivalent transformations with automated corrections, for TVM.

The engine (``tvm_pet.ir``, ``tvm_pet.ops``, ``tvm_pet.verify``, ``tvm_pet.onnx``) is pure
Python and NumPy and does not import TVM; neither does ``tvm_pet.testing``, the oracles that only
the tests use (brute force, exact whole-program evaluation mod p).
"""
from tvm_pet.errors import (ModelError, PetError, ProgramError, ShapeError, UnsupportedOperator,
                            VerificationError)

__version__ = "0.1.0"

__all__ = ["PetError", "ShapeError", "UnsupportedOperator", "VerificationError", "ProgramError",
           "ModelError", "verify", "correct"]


def __getattr__(name):
    if name == "verify":
        from tvm_pet.verify.verifier import verify
        return verify
    if name == "correct":
        from tvm_pet.verify.corrector import correct
        return correct
    raise AttributeError(f"module 'tvm_pet' has no attribute {name!r}")
