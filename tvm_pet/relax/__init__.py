"""tvm_pet on TVM Relax: the adapter (Relax <-> Program), ``PETPass`` and the ``"pet"`` pipeline.

Only this package, :mod:`tvm_pet.tune` (with the measured cost model) and the application's TVM
toolchain (:mod:`tvm_pet.pipeline.tvm_toolchain`) import :mod:`tvm`.
"""
from tvm_pet.relax.adapter import Lifted, OpaqueBinding, from_relax, program_to_module, to_relax
from tvm_pet.relax.pet_pass import PETPass, register_pipeline

__all__ = ["Lifted", "OpaqueBinding", "from_relax", "to_relax", "program_to_module", "PETPass",
           "register_pipeline"]
