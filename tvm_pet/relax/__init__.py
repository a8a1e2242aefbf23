"""tvm_pet on TVM Relax: the adapter (Relax <-> Program), ``PETPass`` and the ``"pet"`` pipeline.

Importing this package registers the ``"pet"`` and ``"pet_tuning"`` Relax pipelines, as TVM's
own modules register theirs, so that ``tvm.compile(mod, target, relax_pipeline="pet")`` and
``relax.get_pipeline("pet_tuning", ...)`` work after ``import tvm_pet.relax`` (or
``from tvm_pet import PETPass``).

Only this package, :mod:`tvm_pet.tune` (with the measured cost model) and the application's TVM
toolchain (:mod:`tvm_pet.pipeline.tvm_backend`) import :mod:`tvm`.
"""
from tvm_pet.relax.adapter import Lifted, OpaqueBinding, from_relax, program_to_module, to_relax
from tvm_pet.relax.coverage import Coverage
from tvm_pet.relax.pet_pass import PETPass, register_pipeline
from tvm_pet.relax.tuning_pipeline import register as _register_tuning_pipeline
from tvm_pet.relax.tuning_pipeline import tuning_pipeline

register_pipeline()
_register_tuning_pipeline()

__all__ = ["Lifted", "OpaqueBinding", "from_relax", "to_relax", "program_to_module", "PETPass",
           "register_pipeline", "Coverage", "tuning_pipeline"]
