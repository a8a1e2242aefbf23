"""Kernel costing: the time of each fused kernel of a Relax module, tuned or untuned.

A kernel with a tuning record is built with its best record's schedule that computes what the
kernel does (:mod:`tvm_pet.tune.record_check`: a wrong schedule is often the fastest, since it
skips work) and timed here, in this process, on TVM's thread pool as it is now: the time a
record holds was measured by the tuner's runner, one candidate at a time beside the builder's
compiling, possibly with another thread count, and for a borrowed record
(:class:`tvm_pet.tune.records.RecordSources`) on another CPU. Those times do not even rank two
kernels as a model runs them here: on BERT's feed-forward kernels, the records said 17.0 against
10.1 ms and the kernels run 6.6 against 8.0 ms in the model. Any other kernel is built as it is
(the naive loop nest) and timed. Times measured here are cached per
target, structural hash, schedule and thread count (:class:`tvm_pet.tune.records.UntunedTimes`),
so each is measured once. The measured cost model (:mod:`tvm_pet.tune.measured_cost`) sums them.

A time measured while other processes used the CPU (:mod:`tvm_pet.tune.contention`), or a tuned
kernel's time far over its record's (:func:`suspect`), is measured again, since one cached for
good would steer every later search. A time shared in every try is used by this process and
measured again by the next.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from tvm_pet.errors import KernelBuildError, PetError
from tvm_pet.tune import records
from tvm_pet.tune.builder import fast_build
from tvm_pet.tune.compile import Task, extract_tasks
from tvm_pet.tune.contention import CpuWatch
from tvm_pet.tune.prepack import has_layout_free, plain_twin
from tvm_pet.tune.record_check import random_args, scheduled
from tvm_pet.tune.targets import require_runs_here, resolve_target


#: The shortest sample of a kernel measurement, in milliseconds.
MIN_SAMPLE_MS = 20

#: A tuned kernel measured here over ``SUSPECT_RATIO`` times its record's own time (and
#: :data:`SUSPECT_MARGIN_S` more: a call's overhead on a microsecond kernel) was most likely
#: measured while something else held a core, TVM's two threads then waiting for each other. In a
#: benchmark run that overlapped a test run, 12 of 315 cached times were 2.9 to 530
#: times their records' (ResNet-18's stride-2 conv: 6.67 ms cached, 0.93 ms its record, 0.68 ms
#: measured again, 0.69 ms in the model), and the search chose the rewrite that replaced it for
#: a saving of 5.9 ms that was 0.6 ms end to end. Such a time is measured again, up to
#: ``RETRIES`` times more, the fastest kept; one cached earlier is measured again when used.
SUSPECT_RATIO = 2.0
SUSPECT_MARGIN_S = 50e-6
RETRIES = 2
#: The cache key's suffix of a time still suspect after its retries: kept, not measured again.
CHECKED = "#checked"
#: A measurement while other processes used the CPU (:mod:`tvm_pet.tune.contention`) is made
#: again, up to ``SHARED_RETRIES`` times more. A time shared in every try is used by the cache
#: object that measured it (``UntunedTimes.hold``), never written to its file: the next
#: process that needs it measures it again.
SHARED_RETRIES = 1


@dataclass(frozen=True, slots=True)
class KernelTime:
    """Estimated time of one task, per call, measured here; ``source`` is ``"tuned"`` (the
    target's own record's schedule), ``"borrowed"`` (a compatible target's) or ``"untuned"``."""
    name: str
    weight: int
    seconds: float
    source: str
    shash: int


def kernel_times(mod: tvm.IRModule, target=None, records_dir: str | Path | None = None, *,
                 cache: records.UntunedTimes | None = None, repeat: int = 3,
                 database: records.OpenRecords | ms.database.Database | None = None,
                 measure_untuned: Callable[..., float] | None = None,
                 prepack: bool | None = None) -> list[KernelTime]:
    """Estimate the time of each task of a module, measured here: tuned, borrowed or untuned.

    A task with a valid record (the target's own, else a compatible target's) is built with the
    best record's schedule and timed; any other task's PrimFunc is built as it is (the naive loop
    nest) and timed, on random inputs. Times are cached per (target, structural hash of the task,
    the schedule's record, TVM's thread count) in ``cache``, by default the file
    ``untuned_times.json`` in the target's records directory (in memory without ``records_dir``).

    Args:
        mod: a Relax module.
        target: a target or spec.
        records_dir: the records root, or ``None``.
        cache: where measured times are kept.
        repeat: samples (median taken) of a measurement.
        database: the records, already open (a caller costing many modules opens them once;
            loading them takes seconds); default: opened from ``records_dir``.
        measure_untuned: times one task module, as :func:`measure_primfunc` (the default) does.
        prepack: the form of the module's kernels (``compile.prepare``).

    Returns:
        One ``KernelTime`` per task; the module's estimate is ``sum(k.weight * k.seconds)``.
    """
    target = resolve_target(target)
    return task_times(extract_tasks(mod, target, prepack), target, records_dir, cache=cache,
                      repeat=repeat, database=database, measure_untuned=measure_untuned)


def task_times(tasks: Sequence[Task], target, records_dir: str | Path | None = None, *,
               cache: records.UntunedTimes | None = None, repeat: int = 3,
               database: records.OpenRecords | ms.database.Database | None = None,
               measure_untuned: Callable[..., float] | None = None) -> list[KernelTime]:
    """:func:`kernel_times` of tasks already extracted (``tune.compile.extract_tasks``), so that a
    caller can time only some of a module's tasks; same arguments otherwise."""
    target = resolve_target(target)
    measure = measure_untuned or measure_primfunc
    if cache is None or database is None:
        opened_db, opened_cache = records.costing_sources(records_dir, target)
        database = opened_db if database is None else database
        cache = opened_cache if cache is None else cache
    opened = records.OpenRecords.of(database)
    times = []
    for task in tasks:
        timed, lender, record = _chosen(opened, task, target, cache, measure, repeat)
        source = "untuned" if record is None else "borrowed" if lender else "tuned"
        seconds = _time(timed, record, lender, target, cache, measure, repeat)
        times.append(KernelTime(task.name, task.weight, seconds, source, task.shash))
    return times


def chosen_record(opened: records.OpenRecords, task: Task, target,
                  cache: records.UntunedTimes, *, repeat: int = 3,
                  measure_untuned: Callable[..., float] | None = None
                  ) -> tuple[ms.database.TuningRecord | None, str | None]:
    """Return the record a task's kernel is built with, and the key of the target it is
    borrowed from (``None`` where it is the target's own, or where there is none): of the
    task's records that compute what the kernel does, the fastest of each source
    (:meth:`records.OpenRecords.checked_by_source`: the target's own, each lender's; for a
    prepacked task, each of its plain twin's too, :mod:`tvm_pet.tune.prepack`); where
    there are two or more, whichever runs fastest here, each timed once and cached as
    :func:`kernel_times` caches it (a tie keeps the first read: the own, then the lenders in
    order, the task's form before its twin's).

    The build (``compile.checked_database``) and the costing (:func:`task_times`) both ask
    this, so a kernel is costed with the schedule it is built with. An own record is not always
    the faster: Haswell records tuned at 32 trials per kernel ran ×0.75 of the Skylake-AVX512
    ones tuned at 192, under the Haswell target, on conv5x5, and ×3.78 on the CSRNet back end
    (benchmarks/results/compatible_records_haswell_own32*.md); nor is one lender's for a target
    that borrows from two (a 4-core AVX2 target reads the Skylake and the Haswell records); nor
    a prepacked record beside its plain twin's tuned with more trials."""
    _, source, record = _chosen(opened, task, target, cache,
                                measure_untuned or measure_primfunc, repeat)
    return record, source


def _chosen(opened: records.OpenRecords, task: Task, target, cache: records.UntunedTimes,
            measure: Callable[..., float], repeat: int
            ) -> tuple[Task, str | None, ms.database.TuningRecord | None]:
    """:func:`chosen_record` as ``(the task its kernel is timed as, source, record)``: the
    record's form, or for an untuned kernel the plain twin (:func:`timed_as`)."""
    found = _checked_records(opened, task, target)
    if not found:
        return timed_as(task), None, None
    if len(found) == 1:
        return found[0]
    seconds = [_time(timed, record, source, target, cache, measure, repeat)
               for timed, source, record in found]
    return found[seconds.index(min(seconds))]  # the first of equals


def _checked_records(opened: records.OpenRecords, task: Task, target
                     ) -> list[tuple[Task, str | None, ms.database.TuningRecord]]:
    """The task's records that compute what its kernel does, the fastest of each source:
    ``(the task they are timed and checked as, source, record)``, the task's own form's first,
    then a prepacked task's plain twin's (checked and timed as the twin: the plain form's
    verdicts and times hold for it)."""
    found = []
    for form in (task, _plain_twin(task)):
        if form is not None:
            found += [(form, source, record) for source, record
                      in opened.checked_by_source(form.mod, form.shash, target).items()]
    return found


def _plain_twin(task: Task) -> Task | None:
    """A prepacked task's plain twin as a task (``prepack.plain_twin``); None for another."""
    twin = plain_twin(task.mod)
    if twin is None:
        return None
    return Task(task.name, task.weight, twin, int(tvm_ffi.structural_hash(twin)))


def timed_as(task: Task, record: ms.database.TuningRecord | None = None) -> Task:
    """The task whose kernel time (and its cache entry) a task built with ``record`` has: a
    prepacked task's plain twin where the kernel is the plain one (untuned, ``record`` None, or
    built with a twin's record: the layout-free mark alone changes no code), else the task."""
    if record is not None and has_layout_free(record.workload.mod["main"]):
        return task
    return _plain_twin(task) or task


def _time(task: Task, record: ms.database.TuningRecord | None, lender: str | None,
          target, cache: records.UntunedTimes, measure: Callable[..., float],
          repeat: int) -> float:
    """The time of a task's kernel built with ``record``'s schedule (untuned where it is
    ``None``; borrowed from the target ``lender`` where that is not ``None``), measured here
    once and cached."""
    tuned_s = records.mean_run_secs(record) if record is not None else None
    # the record's own time names its schedule: a better record found later is timed anew
    key = (task.shash if tuned_s is None else
           f"{task.shash}@{lender or 'tuned'}:{tuned_s:.9g}")
    own_s = None if lender else tuned_s  # a borrowed time is another CPU's
    seconds = _cached(cache, target, key, own_s)
    if seconds is None:
        task_mod = task.mod if tuned_s is None else scheduled(record)
        try:
            seconds, shared = _measure_checked(measure, task_mod, target, repeat, own_s)
        except KernelBuildError as e:
            raise KernelBuildError(f"kernel `{task.name}`: {e}") from None
        _store(cache, target, key, seconds, shared, own_s)
    return seconds


def suspect(seconds: float, record_s: float | None) -> bool:
    """Whether a tuned kernel's time measured here is too slow to trust beside its record's own
    time ``record_s`` (None: no record of this CPU to compare with): over
    :data:`SUSPECT_RATIO` times it, and :data:`SUSPECT_MARGIN_S` more.

    >>> suspect(6.67e-3, 0.93e-3), suspect(0.68e-3, 0.93e-3), suspect(13e-6, 4.7e-6)
    (True, False, False)
    >>> suspect(5.3e-3, None)
    False
    """
    return record_s is not None and seconds > SUSPECT_RATIO * record_s + SUSPECT_MARGIN_S


def _cached(cache: records.UntunedTimes, target, key: str, record_s: float | None
            ) -> float | None:
    """The time cached for ``key``; None where there is none, where it is :func:`suspect` and
    was not measured again already, or where it was measured on a shared CPU by another
    process (then it is measured again)."""
    checked = cache.get(target, f"{key}{CHECKED}")
    if checked is not None:
        return checked
    seconds = cache.get(target, key)
    if seconds is not None and not suspect(seconds, record_s):
        return seconds
    return cache.held(target, key)


def _store(cache: records.UntunedTimes, target, key: str, seconds: float, shared: bool,
           record_s: float | None) -> None:
    """Cache a time just measured: under ``key``; still suspect after its retries, under
    ``key#checked`` too (so be it: no more tries); shared in every try, in this cache object's
    memory only (a later process measures it again)."""
    if shared:
        cache.hold(target, key, seconds)
        return
    cache.put(target, key, seconds)
    if suspect(seconds, record_s):
        cache.put(target, f"{key}{CHECKED}", seconds)


def _measure_checked(measure: Callable[..., float], task_mod: tvm.IRModule, target,
                     repeat: int, record_s: float | None) -> tuple[float, bool]:
    """``measure``, watching the CPU, and again while the fastest time so far is
    :func:`suspect` beside the record's own (up to :data:`RETRIES` times more) or every try
    was shared (up to :data:`SHARED_RETRIES` more). Returns the fastest time, and whether every
    try was shared."""
    tries: list[tuple[float, bool]] = []
    while True:
        with CpuWatch() as watch:
            seconds = measure(task_mod, target, repeat=repeat)
        tries.append((seconds, watch.shared))
        fastest, shared = min(t for t, _ in tries), all(s for _, s in tries)
        if not ((suspect(fastest, record_s) and len(tries) <= RETRIES)
                or (shared and len(tries) <= SHARED_RETRIES)):
            return fastest, shared


def measure_primfunc(task_mod: tvm.IRModule, target=None, *, repeat: int = 3,
                     seed: int = 0) -> float:
    """Build a task's PrimFunc (as it is, or scheduled) and return its median time in seconds on
    random inputs. A prepacked schedule is built and timed without its packing block, on
    weights already packed (the build packs them once, into constants)."""
    target = resolve_target(target)
    if target.kind.name == "cuda":  # dlight's default schedule, timed on GPU 0 (tune/cuda.py)
        from tvm_pet.tune.cuda import measure_primfunc_cuda
        return measure_primfunc_cuda(task_mod, target, repeat=repeat, seed=seed)
    if target.kind.name != "llvm":
        raise PetError(f"measuring untuned kernels needs a local device; target {target} is not "
                       "llvm (tune the task, or measure it on the GPU machine)")
    require_runs_here(target)
    try:  # scheduled ones may hold layout-rewrite blocks, which fast_build takes out
        rt_mod = fast_build(task_mod, target, None)
    except Exception as e:  # TVM raises its own error types (InternalError, TVMError, ...)
        raise KernelBuildError.compiling(target.kind.name, e) from None
    device = tvm.cpu()
    args = random_args(task_mod, device, seed, packed=True)  # as fast_build built it
    # one untimed call first; each sample lasts at least MIN_SAMPLE_MS (a fast kernel is averaged
    # over several calls), so that one cold or interrupted call does not become the cached cost
    timer = rt_mod.time_evaluator("main", device, number=1, repeat=repeat,
                                  min_repeat_ms=MIN_SAMPLE_MS)
    rt_mod["main"](*args)
    return float(statistics.median(timer(*args).results))
