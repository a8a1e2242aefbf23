"""Tuning records: one MetaSchedule ``JSONDatabase`` per target, under ``<records_dir>/<target key>/``.

Layout::

    tuning_logs/                      the records root
      llvm-skylake-avx512-c2/         target_dir(target) = default_records_dir(target)
        database_workload.json        one line per task: [structural hash, task IRModule]
        database_tuning_record.json   one line per measured candidate: [workload index, record]
        database_*.json.xz            their packed copies: what the package ships (dbfile.pack);
                                      the plain files are made from them on first use
        untuned_times.json            kernel times measured here (kernels.kernel_times)
        record_checks.json            which records compute what their kernel does (record_check)
        logs/                         MetaSchedule's per-task logs
        pending/<pid>-<id>/           private database of a task being tuned (or of a killed run)
        database_*.json.corrupt       the original of a damaged file, kept when it was repaired

Functions taking ``records_dir`` accept the root or the target's directory (see ``db_dir``).
The records tvm_pet ships are such a root too: package data in ``tvm_pet/tuning_logs/``, used
in place, or from a copy in the user's cache where the package is read-only
(:mod:`tvm_pet.tune.shipped`).
Why one directory per target: MetaSchedule's database lookup ignores the target stored in a
record, so a shared database would apply CPU schedules to CUDA kernels.

Module equality is ``"structural"``: a task is found again only when its PrimFunc is structurally
identical, attributes included. That is exact, and it is safe because tuning (``tuner.tune``) and
application (``compile.build_with_records``) both take their tasks from ``compile.prepare``, the
one canonical fused form; extraction and ``MetaScheduleApplyDatabase`` both rename the PrimFunc to
``main``, so the kernel's name in the Relax module does not matter. ``"anchor-block"`` would also
survive a change of pipeline stage, but it keys on the conv or matmul alone and would apply a
conv+add+relu schedule to a conv+relu kernel of the same shape, and measure the wrong thing.
The prepacked form's tasks (:mod:`tvm_pet.tune.prepack`) are other workloads than the plain
form's, in the same directory; :class:`OpenRecords` counts a prepacked task's plain twin's
records as the task's (``best``, ``sources_of``).

Faults (``dbfile`` has the details). MetaSchedule never writes the shared database: each task
is tuned into a private database under ``pending/`` (``pending_database``), seeded with the task's
earlier records, and its new records are merged into the shared files under an exclusive lock
with atomic replacement when the task ends, fails or is interrupted; a run that was killed leaves
its pending database behind, and the next ``tune`` merges it (``recover_pending``). Readers take
a shared lock. A damaged database (truncated or garbage lines, as a crash or a foreign writer
leaves) opens anyway: the damaged lines are skipped with a ``CorruptDatabaseWarning``, the
original is kept as ``<file>.corrupt``. So concurrent runs on one target are safe; they may
measure overlapping candidates, but never lose or mix up records. ``untuned_times.json`` is
merged and replaced the same way.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import warnings
from pathlib import Path
from typing import Iterator, Sequence

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from tvm_pet.errors import PetError
from tvm_pet.io import dir_lock
from tvm_pet.tune import dbfile
from tvm_pet.tune.prepack import plain_twin
from tvm_pet.tune.record_check import CHECKS_FILE, RecordChecks
from tvm_pet.tune.shipped import shipped_records_dir
from tvm_pet.tune.targets import compatible_dirs, target_dir
from tvm_pet.tune.threads import pool_setting

#: How MetaSchedule compares a task with the database's workloads (see the module docstring).
MODULE_EQUALITY = "structural"
#: The file names MetaSchedule's JSONDatabase uses inside a work_dir.
WORKLOAD_FILE = dbfile.WORKLOAD_FILE
RECORD_FILE = dbfile.RECORD_FILE
#: The file of measured untuned kernel times (``UntunedTimes``) inside a target's directory.
UNTUNED_FILE = "untuned_times.json"
#: The most records of a task looked at for one that computes what its kernel does.
RANKED_RECORDS = 16
#: The default records root, relative to the working directory.
DEFAULT_RECORDS_DIR = "tuning_logs"


def db_dir(records_dir: str | Path, target: tvm.target.Target) -> Path:
    """Return the directory of the target's database: ``<records_dir>/<target_dir(target)>``.

    ``records_dir`` may be the root (``tuning_logs``) or already the target's own directory
    (``tuning_logs/llvm-skylake-avx512-c2``, as ``default_records_dir`` returns); a directory named
    after the target is used as it is, so both spellings reach the same database. A directory
    that holds a database itself but is named otherwise (a copy of a target's directory under
    another name) is an error: read as a root, it would hold no records, and a run would tune
    every kernel again without a word.
    """
    path, key = Path(records_dir), target_dir(target)
    if path.name == key:
        return path
    if dbfile.has_database(path):
        raise PetError(f"records folder {path} holds a tuning database itself, but records "
                       f"are kept in a folder named for their target: pass its parent folder "
                       f"with the database in {key}/, or name the folder {key}")
    return path / key


def default_records_dir(target: tvm.target.Target,
                        shipped_root: str | Path | None = None) -> str:
    """Return the target's records directory: ``tuning_logs/<target_dir(target)>`` in the
    working directory when it holds a database there, else the shipped one (package data, see
    :mod:`tvm_pet.tune.shipped`) when that holds one, else the working directory's (created
    when tuning writes).

    So ``tvm-pet optimize`` finds the shipped records from any directory, and a project that
    tunes in its own ``tuning_logs/`` keeps them there.

    Args:
        target: the target whose records are looked for.
        shipped_root: the shipped records root (default: ``shipped.shipped_records_dir()``, the
            package's ``tvm_pet/tuning_logs/``, or the user's copy of it where that is
            read-only).

    Returns:
        The records directory, as a string.
    """
    key = target_dir(target)
    here = Path(DEFAULT_RECORDS_DIR) / key
    if dbfile.has_database(here):
        return str(here)
    shipped = Path(shipped_root if shipped_root is not None else shipped_records_dir()) / key
    return str(shipped) if dbfile.has_database(shipped) else str(here)


def count_records(records_dir: str | Path, target: tvm.target.Target) -> int:
    """Return how many tuning records (measured candidates, failed ones included) the target has.

    Counts the lines of the record file without loading the database, so it is cheap.
    """
    return _count_lines(_unpacked(db_dir(records_dir, target)) / RECORD_FILE)


def _unpacked(work_dir: Path) -> Path:
    """Return ``work_dir``, its plain database files made from their packed copies first when
    those are new here (``dbfile.unpack``: the shipped records are packed)."""
    if work_dir.is_dir():
        dbfile.unpack(work_dir)
    return work_dir


def _count_lines(path: Path) -> int:
    """Return the number of non-blank lines of a file, 0 when it is missing."""
    if not path.exists():
        return 0
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def open_database(records_dir: str | Path, target: tvm.target.Target,
                  create: bool = True, lazy: bool = False
                  ) -> "ms.database.JSONDatabase | LazyDatabase":
    """Open (and by default create) the target's database, repairing it when it is damaged.

    The files are checked line by line under the directory's shared lock before MetaSchedule loads
    them; damaged lines are dropped (``dbfile.repair``: a ``CorruptDatabaseWarning``, the original
    kept as ``<file>.corrupt``) instead of failing or crashing the process. Treat the result as
    read-only: new records go through ``pending_database``, never through its ``commit_*``.

    Args:
        records_dir: the records root, e.g. ``"tuning_logs"``.
        target: the target whose database to open.
        create: create the directory and empty files when they are missing; when ``False`` a
            missing database raises.
        lazy: read the lines now and load each task with TVM when it is first asked for (a
            :class:`LazyDatabase`: what tvm_pet's counting and costing read); a line that is
            valid JSON but that TVM rejects is then skipped with a warning, not repaired.

    Returns:
        The ``JSONDatabase`` (a ``LazyDatabase`` with ``lazy``), with ``MODULE_EQUALITY``.

    Raises:
        PetError: when the database is missing and ``create`` is false, when the path is not a
            directory, or when it cannot be loaded even after the repair.
    """
    work_dir = db_dir(records_dir, target)
    if work_dir.exists() and not work_dir.is_dir():
        raise PetError(f"{work_dir} is not a directory; remove it or pass another records_dir")
    if not create and not dbfile.has_database(work_dir):
        raise PetError(f"no tuning records for target {target_dir(target)} under {records_dir}: "
                       "run tvm_pet.tune.tune(...) first")
    return _open_dir(work_dir, lazy)


def _open_dir(work_dir: Path, lazy: bool = False) -> "ms.database.JSONDatabase | LazyDatabase":
    """Open the database in ``work_dir`` (created when missing), repairing damaged lines;
    ``lazy``: as a :class:`LazyDatabase` (its lines checked as JSON now, loaded with TVM when a
    task asks for them)."""
    _unpacked(work_dir)
    dbfile.ensure_files(work_dir)
    with dir_lock(work_dir, shared=True):
        tables = dbfile.read_tables(work_dir)
        if not tables.dirty:
            if lazy:
                return LazyDatabase(tables, work_dir)
            try:
                return _load(work_dir)
            except (RuntimeError, ValueError, TypeError):
                pass  # valid JSON that TVM rejects: repair below, checking each line with TVM
            deep = True
        else:
            deep = False
    with dir_lock(work_dir):
        dbfile.repair(work_dir, deep=deep)
        if lazy:
            return LazyDatabase(dbfile.read_tables(work_dir), work_dir)
        try:
            return _load(work_dir)
        except (RuntimeError, ValueError, TypeError) as err:
            raise PetError(f"cannot read the tuning database in {work_dir} even after skipping "
                           f"its damaged lines: {err}; move the directory away to start afresh"
                           ) from err


def _load(work_dir: Path) -> ms.database.JSONDatabase:
    """Load a checked database directory with MetaSchedule (the caller holds its lock)."""
    return ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False,
                                    module_equality=MODULE_EQUALITY)


class LazyDatabase:
    """A target's records read as text, each task's workload and records loaded with TVM when
    that task is first asked for.

    MetaSchedule's ``JSONDatabase`` loads every workload and record when it opens (about 20 ms a
    record): 8 s for the shipped CPU records, 34 s for the CUDA ones, where costing and building
    a model reads its own few dozen kernels. This answers the read-only questions tvm_pet asks of
    the records it costs and builds with (:class:`RecordSources`, :func:`workload_records`,
    :func:`best_record`) from an ``ms.database.MemoryDatabase`` it fills task by task: the same
    records, ranked by the same ``get_top_k``. MetaSchedule itself never gets it: builds take a
    database of each task's checked best (``compile.checked_database``), tuning a private
    ``JSONDatabase`` (:func:`pending_database`). A line that is valid JSON but that TVM rejects is
    skipped when its task is loaded, with a ``CorruptDatabaseWarning``.
    """

    def __init__(self, tables: dbfile.Tables, where: Path):
        self._where = where
        self._workloads = list(tables.workloads)
        self._by_hash: dict[str, list[int]] = collections.defaultdict(list)
        for i, shash in enumerate(tables.shashes):
            if shash is not None:
                self._by_hash[shash].append(i)
        self._records: dict[int, list[str]] = collections.defaultdict(list)
        for idx, text in tables.records:
            self._records[idx].append(text)
        self._count = len(tables.records)
        self._memory = ms.database.MemoryDatabase(module_equality=MODULE_EQUALITY)
        self._loaded: set[str] = set()  # the task hashes asked for
        self._done: set[int] = set()  # the workload lines loaded

    def __len__(self) -> int:
        return self._count

    def has_workload(self, mod: tvm.IRModule) -> bool:
        return self._task(mod) is not None

    def commit_workload(self, mod: tvm.IRModule) -> ms.database.Workload:
        """The task's workload (added in memory, never to the files, when it has none)."""
        self._task(mod)
        return self._memory.commit_workload(mod)

    def get_top_k(self, workload: ms.database.Workload, top_k: int
                  ) -> list[ms.database.TuningRecord]:
        self._task(workload.mod)
        return list(self._memory.get_top_k(workload, top_k))

    def workload_records(self, mod: tvm.IRModule) -> list[ms.database.TuningRecord]:
        """Every record of one task, failed candidates included."""
        workload = self._task(mod)
        if workload is None:
            return []
        return [r for r in self._memory.get_all_tuning_records() if r.workload.same_as(workload)]

    def get_all_tuning_records(self) -> list[ms.database.TuningRecord]:
        """Every record (this loads them all)."""
        for i in range(len(self._workloads)):
            self._load_line(i)
        return list(self._memory.get_all_tuning_records())

    def _task(self, mod: tvm.IRModule) -> ms.database.Workload | None:
        """The task's workload, loaded with its records on first use; None when it has none."""
        shash = str(tvm_ffi.structural_hash(mod))
        if shash not in self._loaded:
            self._loaded.add(shash)
            for i in self._by_hash.get(shash, ()):
                self._load_line(i)
        return self._memory.commit_workload(mod) if self._memory.has_workload(mod) else None

    def _load_line(self, i: int) -> None:
        if i in self._done:
            return
        self._done.add(i)
        try:
            loaded = ms.database.Workload.from_json(json.loads(self._workloads[i]))
        except (RuntimeError, ValueError, TypeError) as err:
            self._skipped(f"{WORKLOAD_FILE} line {i + 1}", err)
            self._records.pop(i, None)
            return
        workload = self._memory.commit_workload(loaded.mod)
        for text in self._records.pop(i, ()):
            try:
                record = ms.database.TuningRecord.from_json(json.loads(text), workload)
            except (RuntimeError, ValueError, TypeError) as err:
                self._skipped(f"a record of {WORKLOAD_FILE} line {i + 1}", err)
                continue
            self._memory.commit_tuning_record(record)

    def _skipped(self, what: str, err: Exception) -> None:
        warnings.warn(f"the tuning database in {self._where}: TVM cannot load {what} "
                      f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
                      f"it is skipped", dbfile.CorruptDatabaseWarning, stacklevel=3)


@contextlib.contextmanager
def pending_database(records_dir: str | Path, target: tvm.target.Target,
                     task_mod: tvm.IRModule | Sequence[tvm.IRModule],
                     ) -> Iterator[ms.database.JSONDatabase]:
    """Yield a private database to tune a task (or several) in; merge its new records into the
    target's.

    The private database lives in ``<target dir>/pending/<pid>-<id>/`` (``dbfile.pending``) and
    starts with the tasks' records from the shared database, so that the search starts from the
    best schedules found so far. On exit (also on an exception or ``KeyboardInterrupt``) the
    records measured meanwhile are merged into the shared database under its exclusive lock and
    the directory is removed; a killed process leaves it for ``recover_pending``.

    Args:
        records_dir: the records root or the target's directory.
        target: the target.
        task_mod: the task (MetaSchedule's ``main`` PrimFunc module), or a list of them.

    Yields:
        The private ``JSONDatabase``; pass it to MetaSchedule.
    """
    work_dir = _unpacked(db_dir(records_dir, target))
    dbfile.ensure_files(work_dir)
    with dbfile.pending(work_dir) as path:
        with dir_lock(work_dir, shared=True):
            shared = dbfile.read_tables(work_dir)
        mods = [task_mod] if isinstance(task_mod, tvm.IRModule) else task_mod
        dbfile.seed(shared, [str(tvm_ffi.structural_hash(mod)) for mod in mods], path)
        yield _load(path)


def recover_pending(records_dir: str | Path, target: tvm.target.Target) -> int:
    """Merge the private databases of killed tuning runs into the target's; return records added."""
    work_dir = db_dir(records_dir, target)
    return dbfile.recover(work_dir) if work_dir.is_dir() else 0


def costing_sources(records_dir: str | Path | None, target: tvm.target.Target):
    """Return what kernel costing reads: (the records, own then borrowed, as ``OpenRecords``, or
    ``None`` when there are none; the kernel-time cache, in ``records_dir`` or in memory when it
    is ``None``).

    Opening the records reads their lines (a second for the shipped ones; each task is loaded
    with TVM when first asked for: ``LazyDatabase``): a caller costing many modules
    opens these once and passes them on (``kernels.kernel_times``).
    """
    if records_dir is None:
        return None, UntunedTimes(None)
    opened = record_sources(records_dir, target).open()
    cache = UntunedTimes(db_dir(records_dir, target) / UNTUNED_FILE)
    return (opened if opened.any else None), cache


@dataclasses.dataclass(frozen=True)
class RecordSources:
    """Where a target's schedules come from: its own records, then compatible targets'.

    When the target's own directory lacks a task, the records of compatible targets
    (``targets.compatible_dirs``: another x86 level or core count) are *borrowed* for it: the
    schedule is applied under this target, so LLVM compiles it for this CPU's instructions. Their
    recorded times were measured on other CPUs, so costing re-measures borrowed schedules here
    (``borrowed=True`` in ``best``), and a kernel with records of two or more sources is built
    with the one that runs fastest here (``kernels.chosen_record``). Tuning writes only to
    ``own``.

    Attributes:
        own: the target's own directory (it may not exist yet).
        lenders: the compatible directories read after it, the first the one with the most
            records (``record_sources``); empty when there is none.
    """

    own: Path
    lenders: tuple[Path, ...] = ()

    def open(self) -> "OpenRecords":
        """Open the databases that exist, each a :class:`LazyDatabase`."""
        own = (_open_dir(self.own, lazy=True) if _count_lines(_unpacked(self.own) / RECORD_FILE)
               else None)
        checks = RecordChecks(self.own / CHECKS_FILE,
                              also=[lender / CHECKS_FILE for lender in self.lenders])
        return OpenRecords(own, tuple((lender.name, _open_dir(lender, lazy=True))
                                      for lender in self.lenders), checks)


@dataclasses.dataclass(frozen=True)
class OpenRecords:
    """The opened databases of ``RecordSources``: the target's own, then the lenders' (each with
    its directory's target key), and the verdicts of the records checked against their kernels
    (:mod:`tvm_pet.tune.record_check`): a record known to compute something else is never a
    task's best."""

    own: ms.database.Database | None
    lent: tuple[tuple[str, ms.database.Database], ...] = ()  # (target key, database), in order
    checks: RecordChecks = dataclasses.field(default_factory=RecordChecks)

    @classmethod
    def of(cls, records: "OpenRecords | ms.database.Database | None") -> "OpenRecords":
        """``records`` as ``OpenRecords`` (a bare database counts as the target's own)."""
        return records if isinstance(records, OpenRecords) else cls(records)

    @property
    def any(self) -> bool:
        """True when at least one database is open."""
        return self.own is not None or bool(self.lent)

    @property
    def lender_keys(self) -> tuple[str, ...]:
        """The lenders' target keys, in the order they are read."""
        return tuple(key for key, _ in self.lent)

    def without_lenders(self) -> "OpenRecords":
        """The same own records and verdicts, with nothing borrowed."""
        return dataclasses.replace(self, lent=())

    def best(self, task_mod: tvm.IRModule) -> tuple[ms.database.TuningRecord | None, bool]:
        """Return the task's fastest valid record not known to be wrong, own before borrowed,
        and whether it is borrowed: what records a kernel has (the plan, the screen). A
        prepacked task's own form's records come first, then its plain twin's
        (:mod:`tvm_pet.tune.prepack`). The one it is built with is
        :func:`tvm_pet.tune.kernels.chosen_record`'s."""
        for form in _forms(task_mod):
            shash = tvm_ffi.structural_hash(form)
            for record, source in self.ranked(form):
                if not self.checks.known_wrong(shash, record):
                    return record, source is not None
        return None, False

    def sources_of(self, task_mod: tvm.IRModule) -> list[str | None]:
        """The sources with a record of the task not known to be wrong, in the order they are
        read (``None`` for the target's own, else a lender's key; a prepacked task's plain
        twin's records count as the task's); read off the records and their verdicts, nothing
        checked."""
        found: list[str | None] = []
        for form in _forms(task_mod):
            shash = tvm_ffi.structural_hash(form)
            for record, source in self.ranked(form):
                if source not in found and not self.checks.known_wrong(shash, record):
                    found.append(source)
        return found

    def checked_by_source(self, task_mod: tvm.IRModule, shash: int, target: tvm.target.Target
                          ) -> dict[str | None, ms.database.TuningRecord]:
        """Return, per source (``None`` for the target's own, else a lender's key, in the order
        they are read), the task's fastest record there that computes what its kernel does
        (records not yet checked are checked now: :meth:`RecordChecks.agrees`); sources with
        none are left out. Which one a kernel is built with where there are several is
        :func:`tvm_pet.tune.kernels.chosen_record`'s choice, by measuring."""
        first: dict[str | None, ms.database.TuningRecord] = {}
        for record, source in self.ranked(task_mod):
            if source not in first and self.checks.agrees(task_mod, shash, record, target):
                first[source] = record
        return first

    def ranked(self, task_mod: tvm.IRModule
               ) -> Iterator[tuple[ms.database.TuningRecord, str | None]]:
        """The task's valid records, fastest first: the target's own, then each lender's (each
        with its source: ``None`` for the own, else the lender's key); of this form only."""
        for source, database in ((None, self.own), *self.lent):
            if database is not None and database.has_workload(task_mod):
                workload = database.commit_workload(task_mod)  # the existing one; writes nothing
                for record in database.get_top_k(workload, RANKED_RECORDS):
                    yield record, source


def _forms(task_mod: tvm.IRModule) -> list[tvm.IRModule]:
    """The task, and a prepacked task's plain twin after it (``prepack.plain_twin``)."""
    twin = plain_twin(task_mod)
    return [task_mod] if twin is None else [task_mod, twin]


def record_sources(records_dir: str | Path, target: tvm.target.Target) -> RecordSources:
    """Return where the target's schedules come from (see ``RecordSources``).

    The compatible directories are looked for beside the target's own (under the same records
    root) and in the shipped records. All of them are lenders, the one with the most records
    first, then by match (``targets.compatible_dirs``): a kernel that several of them hold is
    built with the record that runs fastest here, so the order settles only ties and what the
    plan names first.

    Args:
        records_dir: the records root or the target's directory.
        target: the target.
    """
    own = db_dir(records_dir, target)
    found: dict[str, Path] = {}
    for root in (shipped_records_dir(), own.parent):  # the records root's entry wins a tie
        if root.is_dir():
            found.update({p.name: p for p in root.iterdir() if dbfile.has_database(p)})
    ranked = compatible_dirs(target, found)
    # The folder with the most records first: the shipped Haswell records (69 workloads) rank
    # first by match for a 4-core AVX2 or a generic x86 target, where the Skylake ones hold the
    # paper's whole models (an untuned kernel ran x5-x49 slower than a borrowed one,
    # benchmarks/results/compatible_records*.md); the Haswell ones are still read after them.
    sizes = {key: _count_lines(_unpacked(found[key]) / RECORD_FILE) for key in ranked}
    order = sorted(ranked, key=lambda k: (-sizes[k], ranked.index(k)))
    return RecordSources(own, tuple(found[key] for key in order))


def workload_records(db: ms.database.Database, task_mod: tvm.IRModule) -> list[ms.database.TuningRecord]:
    """Return every record of one task (failed candidates included), without adding the task."""
    if isinstance(db, LazyDatabase):
        return db.workload_records(task_mod)
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


class UntunedTimes(dbfile.SidecarCache):
    """A cache of kernel times measured here, keyed by (target key, task structural hash, TVM's
    thread count): untuned kernels, and kernels scheduled from records
    (``<hash>@tuned:<record's time>``, ``<hash>@<borrowed directory>:<record's time>``).

    With a ``path`` it is also a JSON file, so later processes reuse it; without one it lives as
    long as the object. Concurrent processes lose no entry, and a damaged file is set aside as
    ``<file>.corrupt`` with a ``CorruptDatabaseWarning`` (its times are measured again):
    :class:`tvm_pet.tune.dbfile.SidecarCache`.
    """

    WHAT = "untuned-time cache"
    AFTER = "its kernels will be measured again"
    _value = staticmethod(float)

    def __init__(self, path: str | Path | None = None) -> None:
        super().__init__(path)
        self._held: dict[str, float] = {}

    @staticmethod
    def key(target: tvm.target.Target, shash: int | str) -> str:
        """Return the cache key of a task: ``<target_dir(target)>/<structural hash>@<n>t``, where
        n is the size of TVM's CPU thread pool (``tune.threads.pool_setting``, ``default`` when
        unset): a kernel timed on one core is not timed on two (a CPU kernel's time, and which of
        two kernels is faster, depend on it)."""
        return f"{target_dir(target)}/{shash}@{pool_setting() or 'default'}t"

    def get(self, target: tvm.target.Target, shash: int | str) -> float | None:
        """Return the cached time in seconds, or ``None`` when the task was never measured."""
        return self._entries.get(self.key(target, shash))

    def put(self, target: tvm.target.Target, shash: int | str, seconds: float) -> None:
        """Cache a measured time, and merge it into the file when the cache has one."""
        self._store(self.key(target, shash), seconds)

    def hold(self, target: tvm.target.Target, shash: int | str, seconds: float) -> None:
        """Keep a time measured on a shared CPU (``kernels.SHARED_RETRIES``) for this object's
        use only, never in its file: a later process measures it again."""
        self._held[self.key(target, shash)] = seconds

    def held(self, target: tvm.target.Target, shash: int | str) -> float | None:
        """The time :meth:`hold` kept, or ``None``."""
        return self._held.get(self.key(target, shash))
