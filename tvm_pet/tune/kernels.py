"""Kernel costing: the time of each fused kernel of a Relax module, tuned or untuned.

A kernel with a tuning record costs the best record's time; any other is built as it is (the
naive loop nest) and timed once, the time cached per target and structural hash
(:class:`tvm_pet.tune.records.UntunedTimes`). The measured cost model
(:mod:`tvm_pet.tune.measured_cost`) sums these times.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_pet.errors import PetError
from tvm_pet.tune import records
from tvm_pet.tune.compile import extract_tasks
from tvm_pet.tune.targets import resolve_target


@dataclass(frozen=True, slots=True)
class KernelTime:
    """Estimated time of one task, per call; ``source`` is ``"tuned"`` or ``"untuned"``."""
    name: str
    weight: int
    seconds: float
    source: str
    shash: int


def kernel_times(mod: tvm.IRModule, target=None, records_dir: str | Path | None = None, *,
                 cache: records.UntunedTimes | None = None, repeat: int = 3,
                 database: ms.database.Database | None = None,
                 measure_untuned: Callable[..., float] | None = None) -> list[KernelTime]:
    """Estimate the time of each task of a module: tuned from the records, else measured untuned.

    A task with a valid record takes the best record's mean ``run_secs``. Any other task's PrimFunc
    is built as it is (the naive loop nest) and timed on random inputs; those times are cached per
    (target, structural hash of the task) in ``cache``, by default the file
    ``untuned_times.json`` in the target's records directory (in memory without ``records_dir``).

    Args:
        mod: a Relax module.
        target: a target or spec.
        records_dir: the records root, or ``None``.
        cache: where untuned times are kept.
        repeat: samples (median taken) of an untuned measurement.
        database: the records, already open (a caller costing many modules opens them once;
            loading the JSON database takes seconds); default: opened from ``records_dir``.
        measure_untuned: times one untuned task, as :func:`measure_primfunc` (the default) does.

    Returns:
        One ``KernelTime`` per task; the module's estimate is ``sum(k.weight * k.seconds)``.
    """
    target = resolve_target(target)
    measure_untuned = measure_untuned or measure_primfunc
    if cache is None or database is None:
        opened_db, opened_cache = records.costing_sources(records_dir, target)
        database = opened_db if database is None else database
        cache = opened_cache if cache is None else cache
    times = []
    for task in extract_tasks(mod, target):
        best = records.best_record(database, task.mod) if database is not None else None
        seconds = records.mean_run_secs(best) if best is not None else None
        if seconds is not None:
            times.append(KernelTime(task.name, task.weight, seconds, "tuned", task.shash))
            continue
        seconds = cache.get(target, task.shash)
        if seconds is None:
            seconds = measure_untuned(task.mod, target, repeat=repeat)
            cache.put(target, task.shash, seconds)
        times.append(KernelTime(task.name, task.weight, seconds, "untuned", task.shash))
    return times


def measure_primfunc(task_mod: tvm.IRModule, target=None, *, repeat: int = 3,
                     seed: int = 0) -> float:
    """Build a task's PrimFunc as it is and return its median time in seconds on random inputs."""
    target = resolve_target(target)
    if target.kind.name != "llvm":
        raise PetError(f"measuring untuned kernels needs a local device; target {target} is not "
                       "llvm (tune the task, or measure it on the GPU machine)")
    rt_mod = tvm.tirx.build(task_mod, target=target)
    rng = np.random.default_rng(seed)
    device = tvm.cpu()
    args = []
    for info in ms.arg_info.ArgInfo.from_prim_func(task_mod["main"]):
        shape, dtype = [int(d) for d in info.shape], str(info.dtype)
        # integer arguments are indices (take, gather): zeros are always in bounds
        value = (rng.standard_normal(shape) if dtype.startswith(("float", "bfloat"))
                 else np.zeros(shape))
        args.append(tvm.runtime.tensor(value.astype(dtype), device))
    timer = rt_mod.time_evaluator("main", device, number=1, repeat=repeat)
    return float(statistics.median(timer(*args).results))
