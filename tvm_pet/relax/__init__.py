"""The Relax adapter: lift Relax functions into tvm_pet programs and emit programs as Relax.

Only this package (with the measurement code and the pass) imports :mod:`tvm`.
"""
from tvm_pet.relax.adapter import Lifted, OpaqueBinding, from_relax, program_to_module, to_relax

__all__ = ["Lifted", "OpaqueBinding", "from_relax", "to_relax", "program_to_module"]
from tvm_pet.relax.pet_pass import PETPass, register_pipeline  # noqa: E402

__all__ = [*__all__, "PETPass", "register_pipeline"]
