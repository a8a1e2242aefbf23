"""The MetaSchedule tuner: top every task of a Relax module up to a trial budget, with faults kept.

Tasks come from :func:`tvm_pet.tune.compile.extract_tasks` (the prepared, fused form the final
build compiles), and records go to the target's database in ``tuning_logs/<target>/``
(:mod:`tvm_pet.tune.records`). Nothing here runs unless :func:`tune` is called::

    stats = tune(mod, resolve_target("llvm"), trials=64, records_dir="tuning_logs")  # slow

Faults: each task is tuned into a private database, merged into the target's database when the
task ends, fails or is interrupted (``records.pending_database``); records left by a killed run
are merged first (``records.recover_pending``). An interrupted run (Ctrl-C) therefore keeps every
candidate measured so far and raises ``KeyboardInterrupt``; calling :func:`tune` again measures
only the missing trials.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from tvm_pet.errors import PetError
from tvm_pet.tune import dbfile, intrinsics, records
from tvm_pet.tune.builder import make_builder
from tvm_pet.tune.compile import Task, extract_tasks, prepare, reduces
from tvm_pet.tune.targets import resolve_target, target_dir

#: Trials per task of a :func:`tune_minutes` step; its first round's batches hold half of them.
STEP_PER_TASK = 16


@dataclass(frozen=True, slots=True)
class TaskStats:
    """What ``tune`` did for one task. ``error`` is set when MetaSchedule gave up on the task;
    ``exhausted`` when its search ran out of new candidates short of the budget (now or before)."""
    name: str
    weight: int
    records_before: int
    new_trials: int
    failed_trials: int
    wall_s: float
    best_s: float | None
    error: str | None = None
    exhausted: bool = False
    #: The task's workload (its structural hash), the same in every module that has the kernel.
    workload: str = ""


@dataclass(frozen=True, slots=True)
class TuneStats:
    """What ``tune`` did: per-task statistics and where the records are."""
    target_key: str
    db_dir: str
    per_task: tuple[TaskStats, ...]
    wall_s: float

    @property
    def tasks(self) -> int:
        """The number of distinct tasks of the module."""
        return len(self.per_task)

    @property
    def new_trials(self) -> int:
        """Candidates measured by this call, over all tasks (0 when everything was tuned)."""
        return sum(task.new_trials for task in self.per_task)

    @property
    def records_per_task(self) -> float:
        """Trials each task has had, on average, after this call (0.0 without tasks)."""
        if not self.per_task:
            return 0.0
        return sum(t.records_before + t.new_trials for t in self.per_task) / len(self.per_task)


def tune(mod: tvm.IRModule, target=None, trials: int = 64,
         records_dir: str | Path = records.DEFAULT_RECORDS_DIR, *, seed: int = 0,
         max_workers: int = 2, timeout_s: float = 60.0, rpc: str | None = None,
         trials_per_iter: int = 64, builder: ms.builder.Builder | None = None,
         runner: ms.runner.Runner | None = None, progress: Callable[[str], None] | None = None,
         database: ms.database.Database | None = None, skip: frozenset = frozenset(),
         prepack: bool | None = None) -> TuneStats:
    """Tune every task of a module with MetaSchedule, topping each task up to ``trials`` records.

    A task with ``trials`` records (failed and pruned ones included) is skipped, so a second
    call measures nothing; so is one whose search space ran out (``_top_up``). Records borrowed
    from a compatible target do not count (tuning for the target itself measured 6-24 % faster,
    benchmarks/results/compatible_records_own.md), nor do a prepacked task's plain twin's.
    Failed candidates are recorded as failures; an interrupted run keeps its records.

    Args:
        mod, target, prepack: a Relax module; a target or spec; its form (``compile.prepare``).
        trials: the number of records each task should have (the per-task budget).
        records_dir: the records root or the target's directory (``records.db_dir``).
        seed: the tuning seed; tasks get seeds forked from it.
        max_workers, timeout_s: popen workers building candidates; seconds before one
            candidate's build or run counts as failed.
        rpc: ``"host:port:key"`` of an RPC tracker to measure on instead of this machine.
        trials_per_iter: candidates per search round (records are committed after each round).
        builder, runner: MetaSchedule's, instead of ``make_builder(max_workers, timeout_s)`` and
            the local or RPC runner (the caller shuts a runner it passes down).
        progress: called with one line per task (done/total, time so far, ETA).
        database: the target's own database, opened by the caller (a large one takes half a
            minute to load); opened here when None, or when a killed run's were recovered.
        skip: workloads (``TaskStats.workload``) left as they are: a whole-model budget's.

    Returns: ``TuneStats``; ``new_trials`` counts the candidates measured by this call.
    """
    if trials < 1:
        raise PetError(f"trials={trials}: the tuning budget must be at least 1 per task")
    start = time.perf_counter()
    target = resolve_target(target)
    tasks = extract_tasks(mod, target, prepack)
    if records.recover_pending(records_dir, target) or database is None:
        database = records.open_database(records_dir, target, lazy=True)
    work_dir = records.db_dir(records_dir, target)
    pruned, exhausted = dbfile.pruned_counts(work_dir), dbfile.exhausted(work_dir)
    own_runner, stats = None, []
    plan = [(t, _trials_done(t, database, pruned), 0 if str(t.shash) in skip else trials)
            for t in tasks]  # each task, its trials so far, and the trials it should have
    todo = sum(_needs_trials(t, b, want, exhausted) for t, b, want in plan)
    try:
        with _watch_interrupts() as interrupted:
            for (task, before, want), task_seed in zip(plan, ms.utils.fork_seed(seed, len(tasks))):
                done = _already_tuned(task, before, want, database, exhausted)
                if done is None:
                    if builder is None:
                        builder = make_builder(max_workers=max_workers, timeout_s=timeout_s)
                    if runner is None:
                        runner = own_runner = _make_runner(rpc, timeout_s)
                    search = TuningSearch(target, builder, runner, task_seed, max_workers,
                                          trials_per_iter, interrupted)
                    done = _top_up(task, before, trials, records_dir, work_dir, search)
                stats.append(done)
                if progress is not None:
                    progress(_progress_line(stats, len(tasks), time.perf_counter() - start, todo))
    finally:
        if own_runner is not None:  # its popen worker outlives the process otherwise (pytest)
            own_runner.pool.shutdown()
    return TuneStats(target_dir(target), str(work_dir), tuple(stats), time.perf_counter() - start)


def tune_budget(mod: tvm.IRModule, target=None, budget: int = 1000,
                records_dir: str | Path = records.DEFAULT_RECORDS_DIR, *, seed: int = 0,
                max_workers: int = 2, timeout_s: float = 60.0, rpc: str | None = None,
                trials_per_iter: int = 64,
                progress: Callable[[str], None] | None = None,
                progress_line: Callable[[int, int, float], str] | None = None,
                deadline: float | None = None, first_batch: int | None = None,
                prepack: bool | None = None) -> TuneStats:
    """Tune a whole module within ``budget`` trials in all, allocated across its tasks by
    MetaSchedule's gradient task scheduler (more trials where they save more time), and, given
    a ``deadline`` (a ``time.perf_counter()`` time), no longer than a measured batch past it.

    The budget counts the records the module's tasks already have (their own, pruned ones
    included), so a second call with the same budget measures nothing (borrowed records do not
    count, as in :func:`tune`); tasks whose search ran out before are left out. The tasks are
    tuned in one private database, merged into the target's as a single task's would be
    (``records.pending_database``).

    Args:
        mod: a Relax module.
        target: a target or spec.
        budget: trials for the whole module.
        records_dir: the records root or the target's directory.
        seed: the tuning seed.
        max_workers, timeout_s, rpc, trials_per_iter: as for :func:`tune`.
        progress: called after each measured batch with trials done, time so far and an ETA.
        progress_line: makes that line from (trials done, trials asked, seconds so far) instead
            (:func:`tune_minutes` counts its own).
        deadline: when the search ends (:class:`_WholeModelSearch`), whatever trials are left.
        first_batch: the trials of a kernel's first batch when it has no records, drawn at
            random (:class:`_WholeModelSearch`); None: a whole batch, by the evolutionary
            search.
        prepack: the form of the tasks, as :func:`tune` takes it.

    Returns:
        ``TuneStats`` with one entry per task.
    """
    if budget < 1:
        raise PetError(f"budget={budget}: the tuning budget must be at least 1 trial")
    start = time.perf_counter()
    target = resolve_target(target)
    records.recover_pending(records_dir, target)
    database = records.open_database(records_dir, target, lazy=True)
    work_dir = records.db_dir(records_dir, target)
    pruned, exhausted = dbfile.pruned_counts(work_dir), dbfile.exhausted(work_dir)
    before = {task: _trials_done(task, database, pruned)
              for task in extract_tasks(mod, target, prepack)}
    remaining = budget - sum(before.values())
    searchable = [task for task in before if str(task.shash) not in exhausted]
    if searchable and remaining > 0:
        runner = _make_runner(rpc, timeout_s)
        try:
            with _watch_interrupts() as interrupted:
                search = TuningSearch(target, make_builder(max_workers, timeout_s), runner, seed,
                                      max_workers, trials_per_iter, interrupted)
                say = (None if progress is None else
                       _Progress(remaining, progress, progress_line, kernels=len(searchable)))
                _tune_together(searchable, remaining, records_dir, say, search, deadline,
                               first_batch)
        finally:  # its popen worker outlives the process otherwise
            runner.pool.shutdown()
    database = records.open_database(records_dir, target, lazy=True)
    stats = tuple(_task_stats(t, before[t], database, pruned) for t in before)
    return TuneStats(target_dir(target), str(work_dir), stats, time.perf_counter() - start)


def tune_minutes(mod: tvm.IRModule, target=None, minutes: float = 10.0,
                 records_dir: str | Path = records.DEFAULT_RECORDS_DIR, *, seed: int = 0,
                 step_per_task: int = STEP_PER_TASK, rpc: str | None = None,
                 progress: Callable[[str], None] | None = None,
                 prepack: bool | None = None) -> TuneStats:
    """Tune a whole module for about ``minutes``: :func:`tune_budget` in steps of at most
    ``step_per_task`` trials per task (the gradient scheduler spreads each step), until the time
    is spent or a step measures nothing (every search space exhausted). The task scheduler's
    first round is not cut short; where a whole batch per kernel does not fit in the minutes,
    a kernel with no records gets a first batch sized to them (:func:`first_round`), drawn at
    random (:class:`_WholeModelSearch`), so that the round fits where it can. After the first
    step, a step is sized to the time left at the rate measured so far, so the run ends near
    ``minutes`` rather than a whole step past it (here a step of 16 per task on a 25-kernel BERT
    takes about 10 minutes); a step that could not give each task one trial is not started, and
    a step still running when the minutes are spent ends after its next measured batch
    (:class:`_WholeModelSearch`).

    The minutes count this module's earlier runs on the same records
    (:class:`MinutesSpent`): a second run with the same budget measures nothing, and one with
    a larger budget tunes for the difference. ``prepack``: the form of the tasks, as
    :func:`tune` takes it.

    Returns:
        ``TuneStats`` over all steps: each task's records before the first step, and the new
        trials of every step.
    """
    if minutes <= 0:
        raise PetError(f"minutes={minutes}: the tuning time must be positive")
    start = time.perf_counter()
    target = resolve_target(target)
    mod = prepare(mod, target, prepack)  # each step tunes this form
    tasks = extract_tasks(mod, target)
    work_dir = records.db_dir(records_dir, target)
    # this module's earlier runs on these records count
    opened = records.open_database(records_dir, target, lazy=True)
    total, earlier = earlier_tuning(tasks, opened, work_dir)
    spent, key = MinutesSpent(work_dir / MinutesSpent.FILE), MinutesSpent.key(tasks)
    steps: list[TuneStats] = []
    started = False  # a step that raises (an interrupt) has spent its time too
    try:
        while (size := _step_size(steps, step_per_task * len(tasks), len(tasks),
                                  minutes * 60 - earlier, time.perf_counter() - start)):
            total, started = total + size, True
            line = _minutes_line(sum(s.new_trials for s in steps), minutes, start - earlier)
            first = None if steps else first_round(len(tasks), minutes * 60 - earlier,
                                                   step_per_task // 2)
            steps.append(tune_budget(mod, target, total, records_dir, seed=seed + len(steps),
                                     rpc=rpc, progress=progress, progress_line=line,
                                     deadline=start - earlier + minutes * 60,
                                     first_batch=first))
            if steps[-1].new_trials == 0:
                break
    finally:
        if started:
            spent.put(key, earlier + time.perf_counter() - start)
    if not steps:  # the time was spent before: the records as they are, nothing measured
        return tune_budget(mod, target, max(1, total), records_dir, seed=seed, rpc=rpc)
    # each step extracts the module's tasks again: match them by name (unique in a module)
    by_name = [{t.name: t for t in step.per_task} for step in steps]
    merged = tuple(dataclasses.replace(first, new_trials=sum(step[first.name].new_trials
                                                             for step in by_name),
                                       best_s=by_name[-1][first.name].best_s)
                   for first in steps[0].per_task)
    return TuneStats(steps[0].target_key, steps[0].db_dir, merged, time.perf_counter() - start)


def earlier_tuning(tasks: list[Task], database, work_dir: str | Path) -> tuple[int, float]:
    """What earlier runs left of ``tasks`` in the target's own records, ``database`` as the
    caller opened it from ``work_dir`` (None: no records): the trials they hold, pruned ones
    included, as :func:`tune_budget` counts them; and the seconds :func:`tune_minutes` tuned
    this set of tasks for."""
    work_dir = Path(work_dir)
    pruned = dbfile.pruned_counts(work_dir)
    trials = 0 if database is None else sum(_trials_done(t, database, pruned) for t in tasks)
    return trials, MinutesSpent(work_dir / MinutesSpent.FILE).get(MinutesSpent.key(tasks))


class MinutesSpent(dbfile.SidecarCache):
    """Seconds :func:`tune_minutes` has tuned each module for, in a JSON file beside the
    records, keyed by the module's set of tasks (their structural hashes)."""

    FILE = "minutes_spent.json"
    WHAT = "tuning-time record"
    AFTER = "a minutes budget counts no earlier run"
    _value = staticmethod(float)

    @staticmethod
    def key(tasks: list[Task]) -> str:
        text = ",".join(sorted(str(t.shash) for t in tasks))
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    def get(self, key: str) -> float:
        return self._entries.get(key, 0.0)

    def put(self, key: str, seconds: float) -> None:
        self._store(key, seconds)


#: Seconds a trial of the task scheduler's first round took here, evolutionary search included
#: (ResNet-18: 152 trials in 262 s; Inception-v3 at 330: 447 in 738 s; 2 cores): what a minutes
#: budget's first round is sized by, before any trial is measured.
PRIOR_TRIAL_S = 1.7


def first_round(kernels: int, seconds: float, batch: int = STEP_PER_TASK // 2) -> int | None:
    """Trials of a new kernel's first batch in :func:`tune_minutes`, ``seconds`` left of the
    budget, drawn at random (:class:`_WholeModelSearch`); None where a whole ``batch`` (the
    step's own) fits, which the evolutionary search draws as before. The task scheduler gives
    every kernel one batch before it chooses, and does not cut that round short, so the round
    gets what the time left holds at :data:`PRIOR_TRIAL_S` a trial, at least 1 per kernel.
    Before, it was always ``batch``: on Inception-v3 at 330 (62 kernels), 12 minutes of tuning
    for a 3-minute budget.

    >>> first_round(62, 3 * 60), first_round(62, 12.3 * 60)  # Inception-v3 at 330
    (1, 7)
    >>> first_round(19, 5 * 60), first_round(124, 30 * 60)  # ResNet-18; swin_t at 224
    (None, None)
    """
    each = max(1, int(seconds / PRIOR_TRIAL_S) // kernels)
    return None if each >= batch else each


def scheduler_batch(trials: int, kernels: int, per_iter: int = 64) -> int:
    """The batch MetaSchedule's task scheduler measures per kernel when :func:`tune_budget`
    shares ``trials`` across ``kernels``: small enough that every kernel gets a first round and
    the scheduler has a choice (half the trials over the kernels), at most ``per_iter``.

    >>> scheduler_batch(2000, 62), scheduler_batch(300, 1), scheduler_batch(10, 62)
    (16, 64, 1)
    """
    return max(1, min(per_iter, trials // (2 * kernels)))


def _step_size(steps: list[TuneStats], full: int, tasks: int, seconds: float,
               elapsed: float) -> int:
    """Trials for :func:`tune_minutes`' next step: ``full`` for the first, then what the time
    left holds at the rate of the steps so far (at most ``full``); 0 when the time is spent or
    holds less than one trial per task.

    >>> _step_size([], 400, 25, 1800.0, 0.0)
    400
    >>> step = TuneStats("key", "dir", (TaskStats("t", 1, 0, 400, 0, 0.0, 1e-3),), 0.0)
    >>> _step_size([step], 400, 25, 1800.0, 1500.0)  # 400 trials took 1500 s: 300 s hold 80
    80
    >>> _step_size([step], 400, 25, 1800.0, 1750.0)  # 50 s hold 13, fewer than one a task
    0
    """
    left = seconds - elapsed
    if left <= 0:
        return 0
    if not steps:
        return full
    done = sum(s.new_trials for s in steps)
    size = min(full, int(done / elapsed * left)) if elapsed > 0 else full
    return size if size >= tasks else 0


def _minutes_line(before: int, minutes: float, start: float) -> Callable[[int, int, float], str]:
    """The progress line of a :func:`tune_minutes` step: trials in all, and the time left of the
    budget (``tuning 512 trials, 12m03s of 30m, ETA 17m57s``)."""
    def line(done: int, total: int, elapsed: float) -> str:
        spent = time.perf_counter() - start
        left = max(0.0, minutes * 60 - spent)
        return (f"tuning {before + min(done, total)} trials, {clock(spent)} of "
                f"{clock(minutes * 60)}" + (f", ETA {clock(left)}" if left else ""))
    return line


def _tune_together(tasks: list[Task], trials: int, records_dir, progress,
                   search: TuningSearch, deadline: float | None = None,
                   first_batch: int | None = None) -> None:
    """Run MetaSchedule's gradient task scheduler over ``tasks`` for ``trials`` in all, ended
    at ``deadline`` if one is given. An interrupt is raised as ``KeyboardInterrupt`` (TVM's FFI
    makes it a bare ``RuntimeError``: :func:`_run_search`), and a failure inside TVM as a
    ``PetError`` that names it, with the records measured so far kept either way."""
    target = search.target
    work_dir = records.db_dir(records_dir, target)
    callbacks = list(ms.measure_callback.MeasureCallback.create("default"))
    builder = search.builder
    if progress is not None:
        callbacks.append(progress)
        builder = _BuildReporter(builder, progress.built)
    # small enough batches that every task gets a first round and the scheduler has a choice
    per_iter = scheduler_batch(trials, len(tasks), search.trials_per_iter)
    with records.pending_database(records_dir, target, [t.mod for t in tasks]) as database, \
            _task_logger(work_dir, "budget") as logger:
        contexts = [search.new_context(mod=t.mod, target=target,
                                       space_generator="post-order-apply",
                                       search_strategy=_WholeModelSearch(deadline,
                                                                         first=first_batch),
                                       task_name=t.name,
                                       logger=logger, rand_state=s,
                                       num_threads=search.num_threads).clone()
                    for t, s in zip(tasks, ms.utils.fork_seed(search.seed, n=len(tasks)))]
        try:
            search.tune_tasks(tasks=contexts, task_weights=[float(t.weight) for t in tasks],
                              work_dir=str(work_dir), max_trials_global=trials,
                              num_trials_per_iter=per_iter,
                              builder=builder, runner=search.runner, database=database,
                              cost_model="xgb", measure_callbacks=callbacks,
                              task_scheduler="gradient")
        except (RuntimeError, ValueError, TypeError) as err:  # TVM's errors are these builtins
            if search.interrupted:
                raise KeyboardInterrupt from err
            raise PetError(f"MetaSchedule's task scheduler failed: {_last_line(err)}. The "
                           "records measured before it are kept, and a second run goes on "
                           "from them") from err


def _last_line(err: Exception) -> str:
    """The last non-blank line of ``err``'s text (TVM's error puts its C++ frames first).

    >>> _last_line(RuntimeError("Traceback:\\n  File x.cc, line 198\\nCheck failed: no\\n"))
    'RuntimeError: Check failed: no'
    """
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1] if lines else 'no message'}"


def _trials_done(task: Task, database, pruned: dict[str, int]) -> int:
    """The task's records in ``database``, and those ``dbfile.prune`` dropped: its trials so far."""
    return len(records.workload_records(database, task.mod)) + pruned.get(str(task.shash), 0)


def _task_stats(task: Task, before: int, database, pruned: dict[str, int]) -> TaskStats:
    """A task's statistics after tuning: records now against ``before``."""
    after = records.workload_records(database, task.mod)
    now = _trials_done(task, database, pruned)
    best = records.best_record(database, task.mod)
    failed = sum(1 for rec in after if records.mean_run_secs(rec) is None)
    return TaskStats(task.name, task.weight, before, now - before, failed, 0.0,
                     records.mean_run_secs(best) if best else None, workload=str(task.shash))


@derived_object
class _Progress(ms.measure_callback.PyMeasureCallback):
    """Reports trials done out of the budget after each measured batch, with an ETA."""

    def __init__(self, total: int, say: Callable[[str], None],
                 line: Callable[[int, int, float], str] | None = None, *, kernels: int,
                 every_s: float = 20.0):
        self.total, self.say, self.done, self.start = total, say, 0, time.perf_counter()
        self.line = line or _trials_line
        self.kernels, self.batches, self.every_s, self.said = kernels, 0, every_s, None
        self.first_built = self.start

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
              runner_results) -> None:
        self.done += len(measure_candidates)
        self.say(self.line(self.done, self.total, time.perf_counter() - self.start))

    def built(self, count: int) -> None:
        """A batch of candidates built. The task scheduler builds every kernel's first batch
        before it measures any, and no measure callback runs until then (17 minutes for
        swin_t's 124 kernels here): say how far that first round is, at most every ``every_s``
        seconds, until the first trials are counted. Its time left is at the round's pace since
        the first kernel's batch, whose time holds the builder's start (swin_t's first kernel
        made it "about 53m13s left", 22 s later "10m33s"; the round took 7m24s in all)."""
        self.batches += 1
        now = time.perf_counter()
        if self.batches == 1:
            self.first_built = now
        if self.done or (self.said is not None and now - self.said < self.every_s):
            return
        self.said = now
        first = f"{min(self.batches, self.kernels)}/{self.kernels} kernels sent to measure"
        if 1 < self.batches < self.kernels:
            pace = (now - self.first_built) / (self.batches - 1)
            first += f", about {clock(pace * (self.kernels - self.batches))} left of it"
        self.say(f"{self.line(0, self.total, now - self.start)} (first round: {first}; the "
                 "trials are counted once every kernel is)")


@derived_object
class _WholeModelSearch(ms.search_strategy.PySearchStrategy):
    """One kernel's search: ``inner`` (MetaSchedule's evolutionary search by default), with
    three changes; the first two only under a whole-model budget (``first``, ``deadline``).

    1. **Given ``first``, a kernel with no records draws a first batch of ``first`` trials at
       random** (``fresh``: MetaSchedule's ``ReplayTrace``; None: the evolutionary search
       draws a whole batch, as before). The evolutionary search ranks 512 samples, evolved
       four times, by the cost model, but the model has no data until the scheduler's first
       round is over (XGBoost's scores are uniform draws below 100 samples): 4-8 s a kernel
       here. On Inception-v3 at 330 (62 kernels, a first batch of 1 trial each) the first round
       took about 9 minutes with the evolutionary search, and 2 min 35 s at random. Where a
       whole batch fits, the evolutionary search keeps it: on ResNet-18 at 5 minutes, a round
       of 7 at random ran x0.90 as fast as the round of 8 it replaced (one draw each). The
       evolutionary search takes over from the second batch, from the records the first left.
    2. **No more candidates once ``deadline`` has passed** (a ``now()`` time,
       ``time.perf_counter`` by default; ``None``: none): the task scheduler then terminates
       the task itself, after measuring and committing the batch it has in flight. A task's
       first batch is never held back, so the scheduler's first round is not cut short. A step
       of :func:`tune_minutes` then ends within a batch of its time; before, the step running
       at the deadline ran to its end (swin_t's first step, 16 trials for each of 124 kernels,
       was longer than its whole 30-minute budget here). Terminating the tasks from a measure
       callback instead broke the scheduler: it could pick a task that the callback had just
       terminated, and failed TVM's check ``!task->is_terminated`` (swin_t, 30 minutes in).
    3. **A batch with no candidate ends the task** (its search space is spent). MetaSchedule's
       task scheduler terminates a task only when its search returns nothing; an empty batch
       measures nothing, and the evolutionary search gives up only after five of them: a fused
       layout kernel of a CSRNet combination with one candidate in its space spent about 2
       minutes a round "generating candidates" with none to send (a small layout kernel here:
       5 empty rounds, 38 s; with this, 1 round, 26 s). The task then stops short of its
       budget, and :func:`_top_up` marks it exhausted.
    """

    def __init__(self, deadline: float | None = None, inner=None,
                 now: Callable[[], float] | None = None, fresh=None, first: int | None = None):
        self.deadline, self.now, self.first = deadline, now or time.perf_counter, first
        self.inner = inner if inner is not None else ms.search_strategy.EvolutionarySearch()
        self.fresh = fresh if fresh is not None else ms.search_strategy.ReplayTrace()
        self.sent, self.new, self.mod = False, False, None

    def _initialize_with_tune_context(self, context) -> None:
        self.mod = context.mod
        self.inner._initialize_with_tune_context(context)
        self.fresh._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None,
                   cost_model=None) -> None:
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database,
                              cost_model)
        self.new = self.first is not None and not _has_records(database, self.mod)
        if self.new:
            self.fresh.pre_tuning(max_trials, min(num_trials_per_iter, self.first),
                                  design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()
        if self.new:
            self.fresh.post_tuning()

    def generate_measure_candidates(self):
        if self.sent and self.deadline is not None and self.now() >= self.deadline:
            return None
        drawn = self.fresh if self.new and not self.sent else self.inner
        candidates = drawn.generate_measure_candidates()
        if candidates is not None and len(candidates) == 0:
            return None  # the space is spent: the scheduler terminates the task
        self.sent = self.sent or candidates is not None
        return candidates

    def notify_runner_results(self, measure_candidates, results) -> None:
        # both count the trials measured (the evolutionary search stops at max_trials)
        self.inner.notify_runner_results(measure_candidates, results)
        if self.new:
            self.fresh.notify_runner_results(measure_candidates, results)

    def clone(self):
        return _WholeModelSearch(self.deadline, self.inner.clone(), self.now, self.fresh.clone(),
                                 self.first)


def _has_records(database, mod) -> bool:
    """Whether ``database`` (None: no database) holds a measured record of the task ``mod``."""
    if database is None or mod is None or not database.has_workload(mod):
        return False
    return len(database.get_top_k(database.commit_workload(mod), 1)) > 0


@derived_object
class _BuildReporter(ms.builder.PyBuilder):
    """``inner``'s builds, each batch then reported to ``built`` (the number of candidates)."""

    def __init__(self, inner: ms.builder.Builder, built: Callable[[int], None]):
        self.inner, self.report = inner, built

    def build(self, build_inputs):
        results = self.inner.build(build_inputs)
        self.report(len(build_inputs))
        return results


def _trials_line(done: int, total: int, elapsed: float) -> str:
    """``tuning 112/400 trials 2m41s, ETA 6m59s``: the ETA at the rate so far."""
    left = elapsed / done * max(0, total - done) if done else 0.0
    return (f"tuning {min(done, total)}/{total} trials {clock(elapsed)}"
            + (f", ETA {clock(left)}" if 0 < done < total else ""))


def _progress_line(stats: list[TaskStats], total: int, elapsed: float,
                   todo: int | None = None) -> str:
    """``tuning task 3/19 (conv2d_add_relu: 32 new trials) 2m10s, ETA 14m`` — the ETA assumes the
    tasks left that need trials (``todo`` in all; None: every task) take as long as the tuned
    ones so far. Before it counted every task left: a mutant whose 2 new kernels of 64 took
    33 s said "ETA 7m51s" after the first.

    >>> stats = [TaskStats("a", 1, 0, 8, 0, 30.0, 1e-3), TaskStats("b", 1, 8, 0, 0, 0.0, 1e-3)]
    >>> _progress_line(stats, 64, 30.0, todo=2)
    'tuning task 2/64 (b: already tuned) 30s, ETA 30s'
    >>> _progress_line(stats, 64, 30.0)
    'tuning task 2/64 (b: already tuned) 30s, ETA 31m00s'
    """
    last, tuned = stats[-1], [s for s in stats if s.new_trials]
    what = f"{last.new_trials} new trials" if last.new_trials else "already tuned"
    if last.exhausted:
        count = last.records_before + last.new_trials
        what += f", search space exhausted at {count} trial{'' if count == 1 else 's'}"
    line = f"tuning task {len(stats)}/{total} ({last.name}: {what}) {clock(elapsed)}"
    left = (total - len(stats)) if todo is None else todo - len(tuned)
    if tuned and len(stats) < total and left > 0:
        line += f", ETA {clock(sum(s.wall_s for s in tuned) / len(tuned) * left)}"
    return line


def clock(seconds: float) -> str:
    """``42s``, ``3m05s`` or ``1h02m``."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def _already_tuned(task: Task, before: int, trials: int, database,
                   exhausted: dict[str, int]) -> TaskStats | None:
    """The statistics of a task that has its ``trials`` already, or whose search ran out of new
    candidates before (``dbfile.exhausted``), with nothing measured; else ``None``."""
    if _needs_trials(task, before, trials, exhausted):
        return None
    best = records.best_record(database, task.mod)
    return TaskStats(task.name, task.weight, before, 0, 0, 0.0,
                     records.mean_run_secs(best) if best else None, exhausted=before < trials,
                     workload=str(task.shash))


def _needs_trials(task: Task, before: int, trials: int, exhausted: dict[str, int]) -> bool:
    """Whether a task with ``before`` records is short of ``trials`` and its search has not run
    out of new candidates before (``dbfile.exhausted``)."""
    return before < trials and str(task.shash) not in exhausted


@dataclass(frozen=True, slots=True)
class TuningSearch:
    """The settings every task's MetaSchedule search shares.

    Args:
        target: the target tuned for.
        builder: the MetaSchedule builder of candidates.
        runner: the MetaSchedule runner that measures them.
        seed: the task's tuning seed.
        num_threads: threads of the search (one per popen worker).
        trials_per_iter: candidates per search round.
        interrupted: filled by :func:`_watch_interrupts` when SIGINT arrives.
        new_context: makes a ``TuneContext`` (MetaSchedule's by default, its tensor
            intrinsics loaded first by :func:`~tvm_pet.tune.intrinsics.tune_context`; a test
            passes a light stand-in).
        tune_tasks: runs the search (``ms.tune.tune_tasks`` by default).
    """
    target: tvm.target.Target
    builder: ms.builder.Builder
    runner: ms.runner.Runner
    seed: int
    num_threads: int
    trials_per_iter: int
    interrupted: list
    new_context: Callable[..., ms.TuneContext] = intrinsics.tune_context
    tune_tasks: Callable[..., None] = ms.tune.tune_tasks


#: The most trials a kernel that does not reduce gets (:func:`_top_up`).
SPATIAL_TRIALS = 4


def _top_up(task: Task, before: int, trials: int, records_dir, work_dir: Path,
            search: TuningSearch) -> TaskStats:
    """Tune a task with ``before`` trials up to ``trials``.

    A search that stops short of that without an error (an interrupt raises instead) found no
    new candidate, and would find none at a larger budget: a layout kernel can have a single
    one. Its task is marked exhausted (``dbfile.mark_exhausted``), and not searched again.

    A kernel that does not reduce (a pad, a slice, a layout copy: :func:`reduces`) gets at most
    :data:`SPATIAL_TRIALS` in all, drawn at random (:func:`_run_search`), and is then marked
    exhausted too: its space is a schedule or few, and MetaSchedule's evolutionary search,
    looking for new candidates where there are none, spent 6 minutes on a single trial of a
    mutant's fused layout kernel (20 reshapes, slices and concatenations) on a 2-core CPU."""
    spatial = not reduces(task)
    todo = trials - before if not spatial else min(trials, SPATIAL_TRIALS) - before
    if todo <= 0:
        dbfile.mark_exhausted(work_dir, str(task.shash), before)
        return TaskStats(task.name, task.weight, before, 0, 0, 0.0, None, None,
                         workload=str(task.shash), exhausted=True)
    stats = _tune_task(task, todo, records_dir, work_dir, search, at_random=spatial)
    if stats.error is None and (spatial or stats.new_trials < trials - before):
        dbfile.mark_exhausted(work_dir, str(task.shash), before + stats.new_trials)
        return dataclasses.replace(stats, exhausted=True)
    return stats


def _tune_task(task: Task, todo: int, records_dir, work_dir: Path,
               search: TuningSearch, at_random: bool = False) -> TaskStats:
    """Run ``todo`` MetaSchedule trials on one task in a private database (``at_random``: its
    candidates drawn at random, :func:`_run_search`); return its statistics.

    The private database starts with the task's records, so its counts are the task's totals.
    """
    start = time.perf_counter()
    with records.pending_database(records_dir, search.target, task.mod) as database:
        existing = records.workload_records(database, task.mod)
        before = len(existing)
        failed_before = sum(1 for rec in existing if records.mean_run_secs(rec) is None)
        with _task_logger(work_dir, task.name) as logger:
            error = _run_search(task, todo, database, work_dir, search, logger, at_random)
        after = records.workload_records(database, task.mod)
        failed = sum(1 for rec in after if records.mean_run_secs(rec) is None) - failed_before
        best = records.best_record(database, task.mod)
    return TaskStats(task.name, task.weight, before, len(after) - before, failed,
                     time.perf_counter() - start, records.mean_run_secs(best) if best else None,
                     error, workload=str(task.shash))


def _run_search(task: Task, todo: int, database, work_dir: Path, search: TuningSearch,
                logger, at_random: bool = False) -> str | None:
    """Run MetaSchedule on one task; return the error when the search itself fails. With
    ``at_random`` its candidates are drawn at random (MetaSchedule's ``ReplayTrace``) instead
    of by the evolutionary search.

    A ``KeyboardInterrupt`` raised inside MetaSchedule's Python callbacks reaches here as a bare
    ``RuntimeError`` (TVM's FFI converts it); ``search.interrupted`` tells the two apart, and an
    interrupt is raised again as ``KeyboardInterrupt``.
    """
    try:
        context = search.new_context(mod=task.mod, target=search.target,
                                     space_generator="post-order-apply",
                                     search_strategy=_WholeModelSearch(
                                         inner=ms.search_strategy.ReplayTrace() if at_random
                                         else None), task_name=task.name,
                                     logger=logger, rand_state=search.seed,
                                     num_threads=search.num_threads).clone()
        search.tune_tasks(tasks=[context], task_weights=[float(task.weight)],
                          work_dir=str(work_dir),
                          max_trials_global=todo, max_trials_per_task=todo,
                          num_trials_per_iter=min(search.trials_per_iter, todo),
                          builder=search.builder, runner=search.runner, database=database,
                          cost_model="xgb", task_scheduler="round-robin")
    except (RuntimeError, ValueError, TypeError) as err:  # TVM's errors are these builtins
        if search.interrupted:
            raise KeyboardInterrupt from err
        return f"{type(err).__name__}: {err}"
    return None


@contextlib.contextmanager
def _watch_interrupts():
    """Yield a list that gets an entry when SIGINT arrives (the usual ``KeyboardInterrupt`` too).

    Only in the main thread, and only when the current handler is a Python one (not ignored).
    """
    fired: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield fired
        return

    def note(signum, frame):
        fired.append(signum)
        previous(signum, frame)

    signal.signal(signal.SIGINT, note)
    try:
        yield fired
    finally:
        signal.signal(signal.SIGINT, previous)


def log_name(task_name: str, longest: int = 120) -> str:
    """A task's log file name: its name, or where that is too long for a file name (a fused
    kernel of a layout mutant on Inception-v3 is named by its 25 operators) the name's start
    and a hash of the whole.

    >>> log_name("fused_conv2d_add_relu")
    'fused_conv2d_add_relu'
    >>> len(log_name("fused_" + "strided_slice_concatenate_" * 20))
    120
    """
    if len(task_name) <= longest:
        return task_name
    digest = hashlib.sha1(task_name.encode()).hexdigest()[:16]
    return f"{task_name[:longest - len(digest) - 1]}_{digest}"


@contextlib.contextmanager
def _task_logger(work_dir: Path, task_name: str):
    """Yield a logger writing to ``<work_dir>/logs/<task>.log``, closed afterwards.

    MetaSchedule's ``get_loggers_from_work_dir`` is not used: it reconfigures logging globally and
    crashes when the meta_schedule logger has an unnamed handler (pytest adds one).
    """
    log_dir = work_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(f"tvm_pet.tune.task.{work_dir.name}.{task_name}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = logging.FileHandler(log_dir / f"{log_name(task_name)}.log")
    handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(message)s"))
    logger.addHandler(handler)
    try:
        yield logger
    finally:
        logger.removeHandler(handler)
        handler.close()


def _make_runner(rpc: str | None, timeout_s: float) -> ms.runner.Runner:
    """Return a LocalRunner (its arguments from :func:`in_bounds_arguments`), or an RPCRunner
    for ``"host:port:key"`` (from :func:`in_bounds_rpc_arguments`)."""
    evaluator = ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=100)
    if rpc is None:
        return ms.runner.LocalRunner(timeout_sec=timeout_s, evaluator_config=evaluator,
                                     f_alloc_argument=in_bounds_arguments)
    host, port, key = parse_rpc(rpc)
    config = ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=key,
                                 session_priority=1, session_timeout_sec=int(timeout_s))
    return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator, max_workers=1,
                               f_alloc_argument=in_bounds_rpc_arguments)


def in_bounds_arguments(device, args_info, alloc_repeat: int) -> list[list]:
    """The arguments MetaSchedule's local runner times a candidate on: random floats, as its
    default makes them, but integer and bool tensors zero (as :func:`record_check.random_args`).
    Its default fills those at random too, and a gather of a table by them (an embedding's
    ``take`` in ``"fast"`` mode, ``index_tensor``) reads out of bounds and kills the runner: every
    trial failed, and BERT's three gather kernels kept no record after a 30-minute budget.

    Args:
        device: where to allocate.
        args_info: ``("TENSOR", dtype, shape)`` per argument (``ArgInfo.as_json``).
        alloc_repeat: how many sets of arguments.
    """
    fill = ms.utils.get_global_func_with_default_on_worker(
        "tvm.contrib.random.random_fill_for_measure", None)
    return _in_bounds(fill, device, args_info, alloc_repeat)


def in_bounds_rpc_arguments(session, device, args_info, alloc_repeat: int) -> list[list]:
    """:func:`in_bounds_arguments` for the RPC runner: allocated on the server's ``device``,
    the floats filled by the server's own random fill."""
    fill = ms.utils.get_global_func_on_rpc_session(
        session, "tvm.contrib.random.random_fill_for_measure",
        "the RPC server's TVM has no random fill (USE_RANDOM)")
    return _in_bounds(fill, device, args_info, alloc_repeat)


def _in_bounds(fill, device, args_info, alloc_repeat: int) -> list[list]:
    repeated = []
    for _ in range(alloc_repeat):
        args = []
        for kind, dtype, shape in args_info:
            if kind != "TENSOR":
                raise NotImplementedError(f"argument of kind {kind!r}")
            arg = tvm.runtime.empty(shape=shape, dtype=dtype, device=device)
            if dtype.startswith(("int", "uint", "bool")):
                arg.copyfrom(np.zeros([int(d) for d in shape], dtype=dtype))
            else:
                fill(arg)
            args.append(arg)
        repeated.append(args)
    return repeated


def parse_rpc(rpc: str) -> tuple[str, int, str]:
    """Split ``"host:port:key"`` into its parts; raise ``PetError`` when it is malformed."""
    parts = rpc.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[0] or not parts[2]:
        raise PetError(f"rpc={rpc!r}: expected 'host:port:key', e.g. '127.0.0.1:9190:cpu'")
    return parts[0], int(parts[1]), parts[2]
