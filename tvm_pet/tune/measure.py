"""Measure Relax modules: canonical form, MetaSchedule tuning, build with records, and timing.

Inputs are Relax IRModules with a ``main`` function, static shapes and the weights as constants.

The one rule that makes tuning records reusable: tasks are always taken from ``prepare(mod)``, the
fused form the final build compiles, both when tuning (``tune``) and when applying the records
(``build``). MetaSchedule keys a task by the structural hash of its PrimFunc, attributes included,
so tuning one pipeline stage and applying at another silently finds nothing (TVM_NOTES section 5).

Typical use::

    target = resolve_target("llvm")
    stats = tune(mod, target, trials=64, records_dir="tuning_logs")      # explicit, slow
    fast = build(mod, target, records_dir="tuning_logs")                 # applies the records
    slow = build(mod, target)                                            # untuned
    timings = time_interleaved({"tuned": fast, "untuned": slow}, inputs)  # A B A B ...

Nothing here tunes unless ``tune`` is called.
"""
from __future__ import annotations

import contextlib
import importlib
import logging
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from tvm_pet.errors import PetError
from tvm_pet.tune import cuda, records
from tvm_pet.tune.builder import make_builder
from tvm_pet.tune.targets import resolve_target, target_dir

#: Module attribute that marks the output of ``prepare`` (so that ``prepare`` is idempotent).
PREPARED_ATTR = "tvm_pet.prepared"


@dataclass(frozen=True, slots=True)
class Task:
    """One distinct tuning task: a fused PrimFunc (as MetaSchedule's ``main``) and its weight."""
    name: str
    weight: int
    mod: tvm.IRModule = field(repr=False)
    shash: int


@dataclass(frozen=True, slots=True)
class TaskStats:
    """What ``tune`` did for one task. ``error`` is set when MetaSchedule gave up on the task."""
    name: str
    weight: int
    records_before: int
    new_trials: int
    failed_trials: int
    wall_s: float
    best_s: float | None
    error: str | None = None


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


@dataclass(frozen=True, slots=True)
class Timing:
    """Times in seconds of one executable over all rounds (each sample a ``time_evaluator`` mean)."""
    median: float
    min: float
    max: float
    samples: tuple[float, ...]

    @property
    def spread(self) -> float:
        """(max - min) / median: the relative noise band of this measurement."""
        return (self.max - self.min) / self.median if self.median > 0 else float("inf")


@dataclass(frozen=True, slots=True)
class KernelTime:
    """Estimated time of one task, per call; ``source`` is ``"tuned"`` or ``"untuned"``."""
    name: str
    weight: int
    seconds: float
    source: str
    shash: int


def prepare(mod: tvm.IRModule, target=None) -> tvm.IRModule:
    """Return the canonical pre-tuning form of a Relax module: legalised, folded and fused.

    Runs the target's library dispatch, ``DecomposeOpsForInference`` (inference batch-norm),
    ``CanonicalizeBindings``, then the CPU/GPU default pipeline's legalisation stage
    (``LegalizeOps``, ``AnnotateTIROpPattern``, ``FoldConstant``, ``FuseOps``, ``FuseTIR``) and
    ``DeadCodeElimination``. The result is what ``relax.get_default_pipeline(target)`` compiles,
    before any schedule; tune and build both start from it. Already prepared modules are returned
    unchanged.

    Args:
        mod: a Relax module with a ``main`` function.
        target: a target or spec for ``resolve_target`` (legalisation may depend on it).

    Returns:
        The prepared module, marked with the ``PREPARED_ATTR`` module attribute.
    """
    if mod.attrs is not None and PREPARED_ATTR in mod.attrs:
        return mod
    target = resolve_target(target)
    _check_main(mod)
    passes = [
        *relax.pipeline.library_dispatch_passes(target),
        relax.transform.DecomposeOpsForInference(),
        relax.transform.CanonicalizeBindings(),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(),
    ]
    with target, tvm.transform.PassContext(opt_level=3):
        prepared = tvm.transform.Sequential(passes)(mod)
    return prepared.with_attr(PREPARED_ATTR, True)


def extract_tasks(mod: tvm.IRModule, target=None) -> list[Task]:
    """Return the distinct tuning tasks of a module, from its prepared form.

    Args:
        mod: a Relax module (prepared or not).
        target: a target or spec.

    Returns:
        One ``Task`` per structurally distinct kernel; ``weight`` counts its calls. Kernels that are
        already scheduled (``tirx.is_scheduled``) are not tasks.
    """
    target = resolve_target(target)
    extracted = ms.relax_integration.extract_tasks(prepare(mod, target), target,
                                                   module_equality=records.MODULE_EQUALITY)
    tasks = []
    for ext in extracted:
        task_mod = ext.dispatched[0]
        if task_mod["main"].attrs is not None and task_mod["main"].attrs.get("tirx.is_scheduled"):
            continue
        tasks.append(Task(str(ext.task_name), int(ext.weight), task_mod,
                          int(tvm_ffi.structural_hash(task_mod))))
    return tasks


def tune(mod: tvm.IRModule, target=None, trials: int = 64,
         records_dir: str | Path = records.DEFAULT_RECORDS_DIR, *, seed: int = 0,
         max_workers: int = 2, timeout_s: float = 60.0, rpc: str | None = None,
         trials_per_iter: int = 64, builder: ms.builder.Builder | None = None,
         runner: ms.runner.Runner | None = None) -> TuneStats:
    """Tune every task of a module with MetaSchedule, topping each task up to ``trials`` records.

    A task that already has ``trials`` records (measured candidates, failed ones included) in the
    target's database is skipped, so a second call measures nothing. Candidates that fail to build
    or run, time out, or kill their worker process are recorded as failures and the search goes
    on. The search uses the evolutionary strategy with the XGBoost cost model and
    ``builder.fast_build``.

    Faults: each task is tuned into a private database, merged into the target's database when the
    task ends, fails or is interrupted (``records.pending_database``); records left by a killed
    run are merged first (``records.recover_pending``). An interrupted run (Ctrl-C) therefore keeps
    every candidate measured so far and raises ``KeyboardInterrupt``; calling ``tune`` again
    measures only the missing trials.

    Args:
        mod: a Relax module.
        target: a target or spec.
        trials: the number of records each task should have (the per-task budget).
        records_dir: the records root or the target's directory (``records.db_dir``).
        seed: the tuning seed; tasks get seeds forked from it.
        max_workers: popen workers building candidates.
        timeout_s: seconds before one candidate's build or run counts as failed.
        rpc: ``"host:port:key"`` of an RPC tracker to measure on instead of this machine.
        trials_per_iter: candidates per search round (records are committed after each round).
        builder: a MetaSchedule builder to use instead of ``make_builder(max_workers, timeout_s)``.
        runner: a MetaSchedule runner to use instead of the local or RPC one (the caller shuts
            it down).

    Returns:
        ``TuneStats``; ``new_trials`` is the number of candidates measured by this call.
    """
    if trials < 1:
        raise PetError(f"trials={trials}: the tuning budget must be at least 1 per task")
    start = time.perf_counter()
    target = resolve_target(target)
    tasks = extract_tasks(mod, target)
    records.recover_pending(records_dir, target)
    database = records.open_database(records_dir, target)
    work_dir = records.db_dir(records_dir, target)
    own_runner = None
    stats = []
    seeds = ms.utils.fork_seed(seed, n=len(tasks))
    try:
        with _watch_interrupts() as interrupted:
            for task, task_seed in zip(tasks, seeds):
                before = len(records.workload_records(database, task.mod))
                todo = trials - before
                if todo <= 0:
                    best = records.best_record(database, task.mod)
                    stats.append(TaskStats(task.name, task.weight, before, 0, 0, 0.0,
                                           records.mean_run_secs(best) if best else None))
                    continue
                if builder is None:
                    builder = make_builder(max_workers=max_workers, timeout_s=timeout_s)
                if runner is None:
                    runner = own_runner = _make_runner(rpc, timeout_s)
                search = _Search(target, builder, runner, task_seed, max_workers, trials_per_iter,
                                 interrupted)
                stats.append(_tune_task(task, todo, records_dir, work_dir, search))
    finally:
        if own_runner is not None:  # its popen worker outlives the process otherwise (pytest)
            own_runner.pool.shutdown()
    return TuneStats(target_dir(target), str(work_dir), tuple(stats), time.perf_counter() - start)


@dataclass(frozen=True, slots=True)
class _Search:
    """What every task's search shares: target, builder, runner and settings."""
    target: tvm.target.Target
    builder: ms.builder.Builder
    runner: ms.runner.Runner
    seed: int
    num_threads: int
    trials_per_iter: int
    interrupted: list


def _tune_task(task: Task, todo: int, records_dir, work_dir: Path, search: _Search) -> TaskStats:
    """Run ``todo`` MetaSchedule trials on one task in a private database; return its statistics.

    The private database starts with the task's records, so its counts are the task's totals.
    """
    start = time.perf_counter()
    with records.pending_database(records_dir, search.target, task.mod) as database:
        existing = records.workload_records(database, task.mod)
        before = len(existing)
        failed_before = sum(1 for rec in existing if records.mean_run_secs(rec) is None)
        with _task_logger(work_dir, task.name) as logger:
            error = _run_search(task, todo, database, work_dir, search, logger)
        after = records.workload_records(database, task.mod)
        failed = sum(1 for rec in after if records.mean_run_secs(rec) is None) - failed_before
        best = records.best_record(database, task.mod)
    return TaskStats(task.name, task.weight, before, len(after) - before, failed,
                     time.perf_counter() - start, records.mean_run_secs(best) if best else None,
                     error)


def _run_search(task: Task, todo: int, database, work_dir: Path, search: _Search,
                logger) -> str | None:
    """Run MetaSchedule on one task; return the error when the search itself fails.

    A ``KeyboardInterrupt`` raised inside MetaSchedule's Python callbacks reaches here as a bare
    ``RuntimeError`` (TVM's FFI converts it); ``search.interrupted`` tells the two apart, and an
    interrupt is raised again as ``KeyboardInterrupt``.
    """
    try:
        context = ms.TuneContext(mod=task.mod, target=search.target,
                                 space_generator="post-order-apply",
                                 search_strategy="evolutionary", task_name=task.name,
                                 logger=logger, rand_state=search.seed,
                                 num_threads=search.num_threads).clone()
        ms.tune.tune_tasks(tasks=[context], task_weights=[float(task.weight)],
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
    handler = logging.FileHandler(log_dir / f"{task_name}.log")
    handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(message)s"))
    logger.addHandler(handler)
    try:
        yield logger
    finally:
        logger.removeHandler(handler)
        handler.close()


def _make_runner(rpc: str | None, timeout_s: float) -> ms.runner.Runner:
    """Return a LocalRunner, or an RPCRunner for ``"host:port:key"``."""
    evaluator = ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=100)
    if rpc is None:
        return ms.runner.LocalRunner(timeout_sec=timeout_s, evaluator_config=evaluator)
    host, port, key = parse_rpc(rpc)
    config = ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=key,
                                 session_priority=1, session_timeout_sec=int(timeout_s))
    return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator, max_workers=1)


def parse_rpc(rpc: str) -> tuple[str, int, str]:
    """Split ``"host:port:key"`` into its parts; raise ``PetError`` when it is malformed."""
    parts = rpc.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[0] or not parts[2]:
        raise PetError(f"rpc={rpc!r}: expected 'host:port:key', e.g. '127.0.0.1:9190:cpu'")
    return parts[0], int(parts[1]), parts[2]


def apply_records(mod: tvm.IRModule, target=None,
                  records_dir: str | Path | None = None) -> tuple[tvm.IRModule, int]:
    """Return the prepared module with the database's schedules applied, and how many applied.

    Args:
        mod: a Relax module.
        target: a target or spec.
        records_dir: the records root, or ``None`` for no records.

    Returns:
        (module, number of PrimFuncs scheduled from the database).
    """
    target = resolve_target(target)
    prepared = prepare(mod, target)
    if not records.has_records(records_dir, target):
        return prepared, 0
    database = records.open_database(records_dir, target, create=False)
    before = _scheduled_count(prepared)
    with target, database, tvm.transform.PassContext(opt_level=3):
        applied = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(prepared)
    return applied, _scheduled_count(applied) - before


def build(mod: tvm.IRModule, target=None, records_dir: str | Path | None = None):
    """Compile a Relax module for the target, with the tuned schedules when records exist.

    The module is prepared, the records applied (``apply_records``), and the rest of the target's
    default pipeline runs: on GPUs dlight's default schedules for untuned kernels, then dataflow
    lowering and finalisation. Untuned CPU kernels stay naive loop nests.

    Args:
        mod: a Relax module.
        target: a target or spec.
        records_dir: the records root, or ``None`` to build untuned.

    Returns:
        A ``relax.VMExecutable``; run it with ``relax.VirtualMachine(ex, device)``.
    """
    target = resolve_target(target)
    applied, _ = apply_records(mod, target, records_dir)
    backend = _backend_pipeline(target)
    already_run = {"LegalizeOps", "AnnotateTIROpPattern", "FoldConstant", "FuseOps", "FuseTIR"}
    rest = [p for p in backend.legalize_passes(target) if p.info.name not in already_run]
    rest += backend.dataflow_lower_passes(target) + backend.finalize_passes(target)
    rest = cuda.with_default_schedule(rest, target)  # dlight, surviving a rule that raises
    with tvm.transform.PassContext(opt_level=3):
        return tvm.compile(applied, target=target, relax_pipeline=tvm.transform.Sequential(rest))


def _backend_pipeline(target):
    """Return the module of the target's default Relax pipeline stages.

    ``relax.pipeline.dataflow_lower_passes`` cannot be used: it calls
    ``backend.<name>.dataflow_lower_passes``, which the backends' ``__init__`` do not export in
    TVM 0.27 (AttributeError), so the stage functions are taken from the pipeline module itself.
    """
    name = {"llvm": "cpu_generic", "cuda": "cuda"}.get(target.kind.name, "gpu_generic")
    return importlib.import_module(f"tvm.relax.backend.{name}.pipeline")


def time_interleaved(executables: Mapping[str, object], inputs: Sequence[np.ndarray],
                     device=None, *, rounds: int = 5, number: int = 3, repeat: int = 3,
                     min_repeat_ms: int = 0) -> dict[str, Timing]:
    """Time executables interleaved, A B C A B C ..., with the Relax VM's ``time_evaluator``.

    Each executable runs once untimed first. Every round then times each executable in turn with
    ``repeat`` samples, each the mean of ``number`` calls; interleaving spreads slow drifts of the
    machine evenly over the executables. Compare medians, and read ``spread`` before believing a
    difference (shared/CALIBRATION.md: ±20-30 % between rounds here).

    Args:
        executables: name -> ``relax.VMExecutable`` (all taking the same inputs).
        inputs: the arguments of ``main``, as NumPy arrays.
        device: the device to run on (``tvm.cpu()`` when omitted).
        rounds: interleaved rounds.
        number: calls averaged into one sample.
        repeat: samples per executable per round.
        min_repeat_ms: when above 0, ``number`` grows until one sample lasts this long (use it
            for microsecond kernels).

    Returns:
        name -> ``Timing`` with ``rounds * repeat`` samples, in seconds.
    """
    if rounds < 1 or number < 1 or repeat < 1:
        raise PetError(f"rounds={rounds}, number={number}, repeat={repeat}: each must be >= 1")
    device = tvm.cpu() if device is None else device
    args = [tvm.runtime.tensor(np.ascontiguousarray(a), device) for a in inputs]
    timers = {}
    for name, executable in executables.items():
        vm = relax.VirtualMachine(executable, device)
        vm["main"](*args)  # warm up: first-call allocation and page faults are not timed
        timers[name] = vm.time_evaluator("main", device, number=number, repeat=repeat,
                                         min_repeat_ms=min_repeat_ms)
    samples: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            samples[name].extend(float(s) for s in timer(*args).results)
    return {name: _timing(values) for name, values in samples.items()}


def _timing(values: list[float]) -> Timing:
    """Summarise samples in seconds."""
    return Timing(statistics.median(values), min(values), max(values), tuple(values))


def kernel_times(mod: tvm.IRModule, target=None, records_dir: str | Path | None = None, *,
                 cache: records.UntunedTimes | None = None, repeat: int = 3,
                 database: ms.database.Database | None = None) -> list[KernelTime]:
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

    Returns:
        One ``KernelTime`` per task; the module's estimate is ``sum(k.weight * k.seconds)``.
    """
    target = resolve_target(target)
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
            seconds = measure_primfunc(task.mod, target, repeat=repeat)
            cache.put(target, task.shash, seconds)
        times.append(KernelTime(task.name, task.weight, seconds, "untuned", task.shash))
    return times


def measure_primfunc(task_mod: tvm.IRModule, target=None, *, repeat: int = 3,
                     seed: int = 0) -> float:
    """Build a task's PrimFunc as it is and return its median time in seconds on random inputs."""
    target = resolve_target(target)
    if target.kind.name == "cuda":  # dlight's default schedule, timed on GPU 0 (tune/cuda.py)
        from tvm_pet.tune.cuda import measure_primfunc_cuda
        return measure_primfunc_cuda(task_mod, target, repeat=repeat, seed=seed)
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


def _scheduled_count(mod: tvm.IRModule) -> int:
    """Return how many PrimFuncs in ``mod`` are marked ``tirx.is_scheduled``."""
    return sum(1 for _, func in mod.functions.items()
               if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None
               and bool(func.attrs.get("tirx.is_scheduled", False)))


def _check_main(mod: tvm.IRModule) -> None:
    """Raise ``PetError`` unless ``mod`` has a Relax ``main`` function."""
    names = [gv.name_hint for gv in mod.functions]
    if "main" not in names or not isinstance(mod["main"], relax.Function):
        raise PetError(f"the module has no Relax 'main' function (it has {names}); "
                       "build it with relax.BlockBuilder and bb.function('main', ...)")
