"""The measurement layer: targets, MetaSchedule tuning records, builds and timings.

With ``tvm_pet.relax`` this is the only package that imports TVM. Inputs are Relax IRModules
(``main``, static shapes, weights as constants). See ``measure`` for the workflow::

    from tvm_pet.tune import resolve_target, tune, build, time_interleaved
    target = resolve_target("llvm")
    tune(mod, target, trials=64, records_dir="tuning_logs")   # only when called
    ex = build(mod, target, records_dir="tuning_logs")
"""
from tvm_pet.tune.measure import (KernelTime, Task, TaskStats, Timing, TuneStats,
                                  apply_records, build, extract_tasks, kernel_times,
                                  measure_primfunc, prepare, time_interleaved, tune)
from tvm_pet.tune.dbfile import CorruptDatabaseWarning
from tvm_pet.tune.records import (UntunedTimes, count_records, db_dir, default_records_dir,
                                  open_database, recover_pending)
from tvm_pet.tune.targets import resolve_target, target_dir

__all__ = ["resolve_target", "target_dir", "prepare", "extract_tasks", "tune", "build",
           "apply_records", "time_interleaved", "kernel_times", "measure_primfunc",
           "open_database", "count_records", "db_dir", "default_records_dir", "Task",
           "TaskStats", "TuneStats", "Timing", "KernelTime", "UntunedTimes",
           "CorruptDatabaseWarning", "recover_pending"]
