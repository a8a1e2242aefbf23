"""The MetaSchedule builder that works where importing TVM's tensor intrinsics is slow.

MetaSchedule's default ``LocalBuilder`` runs ``import tvm.s_tir.tensor_intrin`` in every fresh popen
worker. That import takes 16-20 s on a 2-core machine, the pool is recreated on every
``build()`` call and the build timeout is 30 s, so every candidate fails. ``fast_build`` does
what the default build does minus that import. It is safe for schedules that do not
tensorize, which is every fp32 schedule; an int8 schedule that uses VNNI/AMX intrinsics would need
the import back.

The popen workers unpickle ``fast_build``. A function of an importable module is pickled by
reference, and the worker (``python -m tvm.exec.popen_worker``) may not be able to import
``tvm_pet`` when it is not installed; ``make_builder`` therefore asks cloudpickle to pickle this
module's functions by value, so they reach the worker whatever its ``sys.path``.
"""
from __future__ import annotations

import sys

import tvm
from tvm.s_tir import meta_schedule as ms


def fast_build(mod: tvm.IRModule, target: tvm.target.Target, _params: dict | None) -> tvm.runtime.Module:
    """Build one MetaSchedule candidate; ``ms.builder.default_build`` without the intrinsics import.

    Args:
        mod: the scheduled TIR module of the candidate.
        target: the target to compile for.
        _params: unused (always ``None`` for TIR candidates), kept for the ``f_build`` signature.

    Returns:
        The compiled runtime module.
    """
    # Imports inside the body: the function travels by value to a fresh worker process.
    import tvm as tvm_in_worker
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_in_worker.tirx.build(mod, target=target)


def make_builder(max_workers: int = 2, timeout_s: float = 60.0) -> ms.builder.LocalBuilder:
    """Return a ``LocalBuilder`` that builds candidates with ``fast_build``.

    Args:
        max_workers: popen workers building candidates in parallel.
        timeout_s: seconds after which one candidate's build counts as failed.

    Returns:
        The builder; candidates that fail or time out become failed results, not exceptions.
    """
    import cloudpickle  # a dependency of TVM's popen pool

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ms.builder.LocalBuilder(f_build=fast_build, max_workers=max_workers, timeout_sec=timeout_s)
