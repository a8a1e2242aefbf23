"""Tuning records: one MetaSchedule ``JSONDatabase`` per target, under ``<records_dir>/<target key>/``.

Layout::

    tuning_logs/                      the records root
      llvm-skylake-avx512-c2/         target_dir(target) = default_records_dir(target)
        database_workload.json        one line per task: [structural hash, task IRModule]
        database_tuning_record.json   one line per measured candidate: [workload index, record]
        untuned_times.json            measured times of untuned kernels (measure.kernel_times)
        logs/                         MetaSchedule's per-task logs

Functions taking ``records_dir`` accept the root or the target's directory (see ``db_dir``).
Why one directory per target: the database lookup ignores the target stored in a record
(shared/TVM_NOTES.md, section 5), so a shared database would apply CPU schedules to CUDA kernels.

Module equality is ``"structural"``: a task is found again only when its PrimFunc is structurally
identical, attributes included. That is exact, and it is safe because tuning (``measure.tune``)
and application (``measure.build``) both take their tasks from ``measure.prepare``, the one
canonical fused form; extraction and ``MetaScheduleApplyDatabase`` both rename the PrimFunc to
``main``, so the kernel's name in the Relax module does not matter. ``"anchor-block"`` would also
survive a change of pipeline stage, but it keys on the conv or matmul alone and would apply a
conv+add+relu schedule to a conv+relu kernel of the same shape, and measure the wrong thing.

Writes: MetaSchedule appends one JSON line per commit. Two processes tuning the same target at
the same time may interleave lines; do not do that (issue 6 hardens this).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_pet.errors import PetError
from tvm_pet.tune.targets import target_dir

#: How MetaSchedule compares a task with the database's workloads (see the module docstring).
MODULE_EQUALITY = "structural"
#: The file names MetaSchedule's JSONDatabase uses inside a work_dir.
WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
#: The file of measured untuned kernel times (``UntunedTimes``) inside a target's directory.
UNTUNED_FILE = "untuned_times.json"
#: The default records root, relative to the working directory.
DEFAULT_RECORDS_DIR = "tuning_logs"


def db_dir(records_dir: str | Path, target: tvm.target.Target) -> Path:
    """Return the directory of the target's database: ``<records_dir>/<target_dir(target)>``.

    ``records_dir`` may be the root (``tuning_logs``) or already the target's own directory
    (``tuning_logs/llvm-skylake-avx512-c2``, as ``default_records_dir`` returns); a directory named
    after the target is used as it is, so both spellings reach the same database.
    """
    path, key = Path(records_dir), target_dir(target)
    return path if path.name == key else path / key


def default_records_dir(target: tvm.target.Target) -> str:
    """Return ``tuning_logs/<target_dir(target)>``, relative to the working directory."""
    return str(Path(DEFAULT_RECORDS_DIR) / target_dir(target))


def has_records(records_dir: str | Path | None, target: tvm.target.Target) -> bool:
    """Return whether the target has at least one tuning record under ``records_dir``."""
    return records_dir is not None and count_records(records_dir, target) > 0


def count_records(records_dir: str | Path, target: tvm.target.Target) -> int:
    """Return how many tuning records (measured candidates, failed ones included) the target has.

    Counts the lines of the record file without loading the database, so it is cheap.
    """
    path = db_dir(records_dir, target) / RECORD_FILE
    if not path.exists():
        return 0
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def open_database(records_dir: str | Path, target: tvm.target.Target,
                  create: bool = True) -> ms.database.JSONDatabase:
    """Open (and by default create) the target's database.

    Args:
        records_dir: the records root, e.g. ``"tuning_logs"``.
        target: the target whose database to open.
        create: create the directory and empty files when they are missing; when ``False`` a
            missing database raises.

    Returns:
        The ``JSONDatabase``, with ``MODULE_EQUALITY``.

    Raises:
        PetError: when the database is missing and ``create`` is false, when the path is not a
            directory, or when a file in it cannot be parsed.
    """
    work_dir = db_dir(records_dir, target)
    if work_dir.exists() and not work_dir.is_dir():
        raise PetError(f"{work_dir} is not a directory; remove it or pass another records_dir")
    if not create and not (work_dir / WORKLOAD_FILE).exists():
        raise PetError(f"no tuning records for target {target_dir(target)} under {records_dir}: "
                       "run tvm_pet.tune.tune(...) first")
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        return ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=create,
                                        module_equality=MODULE_EQUALITY)
    except tvm.error.TVMError as err:
        raise PetError(f"cannot read the tuning database in {work_dir}: {err}; "
                       "move the directory away to start afresh") from err


def workload_records(db: ms.database.Database, task_mod: tvm.IRModule) -> list[ms.database.TuningRecord]:
    """Return every record of one task (failed candidates included), without adding the task."""
    if not db.has_workload(task_mod):
        return []
    workload = db.commit_workload(task_mod)  # returns the existing workload; writes nothing
    return [rec for rec in db.get_all_tuning_records() if rec.workload.same_as(workload)]


def best_record(db: ms.database.Database, task_mod: tvm.IRModule) -> ms.database.TuningRecord | None:
    """Return the task's fastest valid record, or ``None`` when it has none."""
    if not db.has_workload(task_mod):
        return None
    top = db.get_top_k(db.commit_workload(task_mod), 1)
    return top[0] if top else None


def mean_run_secs(record: ms.database.TuningRecord) -> float | None:
    """Return the mean of a record's measured times in seconds, ``None`` for a failed candidate."""
    if record.run_secs is None or len(record.run_secs) == 0:
        return None
    secs = [float(s) for s in record.run_secs]
    mean = sum(secs) / len(secs)
    return None if mean >= 1e9 else mean  # MetaSchedule records failures as 1e10 s


class UntunedTimes:
    """A cache of measured untuned kernel times, keyed by (target key, task structural hash).

    With a ``path`` it is also a JSON file, rewritten atomically after each new measurement, so
    later processes reuse it; without one it lives as long as the object.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._times: dict[str, float] = {}
        if self.path is not None and self.path.exists():
            try:
                stored = json.loads(self.path.read_text())
                self._times = {str(k): float(v) for k, v in stored.items()}
            except (ValueError, AttributeError) as err:
                raise PetError(f"cannot read the untuned-time cache {self.path}: {err}; "
                               "delete it to measure again") from err

    @staticmethod
    def key(target: tvm.target.Target, shash: int) -> str:
        """Return the cache key of a task: ``<target_dir(target)>/<structural hash>``."""
        return f"{target_dir(target)}/{shash}"

    def get(self, target: tvm.target.Target, shash: int) -> float | None:
        """Return the cached time in seconds, or ``None`` when the task was never measured."""
        return self._times.get(self.key(target, shash))

    def put(self, target: tvm.target.Target, shash: int, seconds: float) -> None:
        """Cache a measured time, and write the file when the cache has one."""
        self._times[self.key(target, shash)] = seconds
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as handle:
                json.dump(self._times, handle, indent=0, sort_keys=True)
            os.replace(tmp, self.path)
