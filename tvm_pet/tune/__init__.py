"""The measurement layer: targets, MetaSchedule tuning records, builds, timings and costs.

With ``tvm_pet.relax`` (and the application's TVM toolchain) this is the only package that
imports TVM. Inputs are Relax IRModules (``main``, static shapes, weights as constants). One
module per concept:

- :mod:`~tvm_pet.tune.compile`: the compile pipeline (``prepare``, ``extract_tasks``,
  ``apply_records``, ``build_with_records``);
- :mod:`~tvm_pet.tune.tuner`: the MetaSchedule tuner (``tune``, ``TuningSearch``);
- :mod:`~tvm_pet.tune.timing`: interleaved timing (``time_interleaved``, ``Timing``);
- :mod:`~tvm_pet.tune.kernels`: kernel costing (``kernel_times``, ``measure_primfunc``);
- :mod:`~tvm_pet.tune.measured_cost`: the measured cost model (``MeasuredCost``);
- :mod:`~tvm_pet.tune.records`, :mod:`~tvm_pet.tune.dbfile`: the records on disk;
  :mod:`~tvm_pet.tune.shipped`: where the records tvm_pet ships are used from.

The application (:mod:`tvm_pet.pipeline`) reaches all of it through one ``Toolchain``
(:mod:`tvm_pet.pipeline.tvm_backend`).

::

    from tvm_pet.tune import resolve_target, tune, build_with_records, time_interleaved
    target = resolve_target("llvm")
    tune(mod, target, trials=64, records_dir="tuning_logs")   # only when called
    ex = build_with_records(mod, target, records_dir="tuning_logs")
"""
from tvm_pet.tune.compile import Task, apply_records, build_with_records, extract_tasks, prepare
from tvm_pet.tune.dbfile import CorruptDatabaseWarning
from tvm_pet.tune.kernels import KernelTime, kernel_times, measure_primfunc
from tvm_pet.tune.records import (UntunedTimes, count_records, db_dir, default_records_dir,
                                  open_database, recover_pending)
from tvm_pet.tune.targets import resolve_target, target_dir
from tvm_pet.tune.timing import Timing, time_interleaved
from tvm_pet.tune.tuner import (TaskStats, TuneStats, TuningSearch, parse_rpc, tune, tune_budget,
                                tune_minutes)

__all__ = ["resolve_target", "target_dir", "prepare", "extract_tasks", "tune", "tune_budget",
           "tune_minutes",
           "build_with_records", "apply_records", "time_interleaved", "kernel_times",
           "measure_primfunc", "open_database", "count_records", "db_dir", "default_records_dir",
           "Task", "TaskStats", "TuneStats", "TuningSearch", "Timing", "KernelTime",
           "UntunedTimes", "CorruptDatabaseWarning", "recover_pending", "parse_rpc"]
