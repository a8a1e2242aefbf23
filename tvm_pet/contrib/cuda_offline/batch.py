"""CUDA tuning in one batch: candidates sampled and built here, timed on a GPU machine without
TVM's compiler, measured records committed back here.

Where it sits: beside ``tuner.tune``, for a GPU that is only reachable a few minutes at a time,
through a machine with no TVM compiler and no network (scripts/gpu/). MetaSchedule's usual loop
needs a runner that measures each round before the next one is sampled; here the rounds cannot
wait for the GPU, so the search is one round: MetaSchedule's random search (``ReplayTrace``:
every decision of the task's CUDA design spaces sampled at random) draws ``trials`` candidates
per task, all of them are measured, and every measurement is a record. The budget is the same
for every task, originals and mutants alike.

1. ``prepare_batch`` (here, no GPU): for each distinct task, sample the candidates, build them
   into one library (each candidate a function ``c<i>``, plus ``dlight``: TVM's default GPU
   schedule, which a build without records would use; a candidate that TVM or nvcc rejects is
   left out, and recorded as a failed trial), compile the device code with nvcc (SASS for
   the target's arch), and write ``batch.json`` and a staging database holding each
   candidate's trace.
2. ``scripts/gpu/run_batch.py`` (on the GPU, TVM's runtime only) times every function and writes
   ``times.json``.
3. ``commit_batch`` (here) turns each timed candidate into a ``TuningRecord`` with its measured
   seconds (a candidate that failed to run gets MetaSchedule's failure time, 1e10 s) and merges
   them into the target's records (``records.pending_database``). On CUDA the default schedule
   is recorded too, as one more measured trial, so that a task whose sampled candidates are all
   slower than it keeps it: the records never make a kernel slower than a build without them.
"""
from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_pet.errors import PetError
from tvm_pet.io import atomic_write
from tvm_pet.tune import records
from tvm_pet.tune.compile import Task
from tvm_pet.tune.intrinsics import tune_context
from tvm_pet.tune.targets import resolve_target

#: The folder of the staging database inside a batch folder.
STAGING = "staging"
#: The seconds MetaSchedule records for a candidate that failed to build or run.
FAILED_RUN_SECS = 1e10
#: Version of ``batch.json`` (read by ``scripts/gpu/run_batch.py``).
BATCH_VERSION = 1


@dataclass(frozen=True, slots=True)
class BatchTask:
    """One task of a batch: its library and the functions in it, its candidates (``c<i>``, in
    the order of their staging record lines) and those that did not build (name → why)."""
    name: str
    shash: str
    weight: int
    library: str
    functions: tuple[str, ...]
    candidates: tuple[str, ...]
    record_lines: tuple[int, ...]
    unbuilt: dict
    args: tuple[tuple[str, tuple[int, ...]], ...]
    binaries: tuple[str, ...]


def sample_candidates(task: Task, target, trials: int, seed: int = 0) -> list:
    """Return up to ``trials`` MetaSchedule candidates of a task, drawn by ``ReplayTrace``.

    Each is a ``MeasureCandidate`` (a schedule that passed the target's postprocessors, e.g.
    ``VerifyGPUCode``, and its argument shapes).
    """
    target = resolve_target(target)
    context = tune_context(mod=task.mod, target=target, space_generator="post-order-apply",
                           search_strategy=ms.search_strategy.ReplayTrace(),
                           task_name=task.name, rand_state=seed, num_threads=1).clone()
    spaces = context.generate_design_space()
    context.pre_tuning(max_trials=trials, num_trials_per_iter=trials, design_spaces=spaces,
                       database=ms.database.MemoryDatabase(), cost_model=None)
    candidates = context.generate_measure_candidates() or []
    context.post_tuning()
    return list(candidates)[:trials]


def traced_default_schedule(task: Task, target):
    """TVM's default schedule of a task as a traced ``Schedule``: on CUDA, the first dlight rule
    of TVM's pipeline that schedules it (``cuda.schedule_by_rules``; ``None`` when none does);
    on llvm, the kernel as it is.
    """
    from tvm_pet.tune.cuda import schedule_by_rules
    if target.kind.name != "cuda":
        return tvm.s_tir.Schedule(task.mod)
    return schedule_by_rules(task.mod["main"], target, name=task.name)


def _library_functions(candidates: list, default) -> dict:
    """``c<i>`` for candidate i, and ``dlight``: TVM's default schedule."""
    funcs = {f"c{i}": candidate.sch.mod["main"] for i, candidate in enumerate(candidates)}
    if default is not None:
        funcs["dlight"] = default.mod["main"]
    return funcs


def _module(funcs: dict) -> tvm.IRModule:
    return tvm.IRModule({tvm.ir.GlobalVar(name): func.with_attr("global_symbol", name)
                         for name, func in funcs.items()})


def _compiled(funcs: dict, target, kernels: Path) -> tuple:
    """Build ``funcs`` into one library and compile its device code: (runtime module, binaries).
    Raises what TVM or nvcc raises."""
    from tvm_pet.tune.cuda import compile_device_code
    runtime = tvm.tirx.build(_module(funcs), target=target)
    binaries = (compile_device_code(runtime, target, kernels, ptx=False)
                if target.kind.name == "cuda" else [])
    return runtime, binaries


def build_library(funcs: dict, target, kernels: Path) -> tuple:
    """Build the functions into one library, leaving out those that do not build.

    MetaSchedule's builder counts a candidate that TVM's lowering or nvcc rejects as a failed
    trial; here the candidates share one library, so when the whole fails each function is
    built alone, and those that fail are left out.

    Returns:
        (runtime module, its ``DeviceBinary`` list, ``{name: why}`` of the functions left out).
    """
    try:
        runtime, binaries = _compiled(funcs, target, kernels)
        return runtime, binaries, {}
    except Exception:  # noqa: BLE001 - TVM's and nvcc's errors are of several types
        pass
    unbuilt = {}
    with tempfile.TemporaryDirectory() as probe:
        for name, func in funcs.items():
            try:
                _compiled({name: func}, target, Path(probe))
            except Exception as err:  # noqa: BLE001
                lines = [line for line in str(err).strip().splitlines() if line.strip()]
                unbuilt[name] = (lines[-1] if lines else type(err).__name__)[:300]
    kept = {name: func for name, func in funcs.items() if name not in unbuilt}
    runtime, binaries = _compiled(kept, target, kernels)
    return runtime, binaries, unbuilt


def _arg_specs(task: Task) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(dtype, shape) of each parameter of a task's PrimFunc, in order."""
    return tuple((str(p.dtype), tuple(int(d) for d in p.shape))
                 for p in task.mod["main"].params)


def prepare_batch(tasks: list[Task], target, trials: int, out_dir: str | Path, *,
                  seed: int = 0, progress=None) -> list[BatchTask]:
    """Sample, build and compile every task's candidates; write the batch folder.

    Tasks already in ``batch.json`` (same structural hash) are kept as they are, so a batch can be
    grown in several runs. Writes ``libs/<shash>.so``, ``kernels/<sha256>.fatbin``,
    ``staging/`` (the candidates' records, unmeasured) and ``batch.json``.

    Args:
        tasks: the tasks (``compile.extract_tasks``), duplicates by structural hash allowed.
        target: a CUDA target with an explicit ``arch`` (or an llvm one, to check the flow
            on a CPU: no nvcc then).
        trials: candidates per task.
        out_dir: the batch folder (created).
        seed: the seed of the random search.
        progress: a callable taking one line of progress, or ``None``.

    Returns:
        The batch's tasks, in order.

    Raises:
        PetError: when the target is not CUDA, or nvcc is missing.
    """
    target = resolve_target(target)
    if target.kind.name not in ("cuda", "llvm"):
        raise PetError(f"a batch is built for a CUDA (or, to check the flow, an llvm) target, "
                       f"not {target.kind.name!r}")
    say = progress or (lambda line: None)
    out = Path(out_dir)
    for folder in ("libs", STAGING):
        (out / folder).mkdir(parents=True, exist_ok=True)
    batch = _read_batch(out)
    done = {t.shash for t in batch}
    todo = list({str(t.shash): t for t in tasks if str(t.shash) not in done}.values())
    staging = ms.database.JSONDatabase(work_dir=str(out / STAGING),
                                       module_equality=records.MODULE_EQUALITY)
    line = records._count_lines(out / STAGING / records.RECORD_FILE)
    start = time.perf_counter()
    for k, task in enumerate(todo):
        batch.append(_prepare_task(task, target, trials, seed, staging, line, out))
        line += len(batch[-1].record_lines)
        _write_batch(out, batch, target, trials, seed)
        elapsed = time.perf_counter() - start
        built = len([f for f in batch[-1].functions if f != "dlight"])
        say(f"[{k + 1}/{len(todo)}] {task.name}: {built} candidates built, "
            f"{elapsed:.0f} s, about {elapsed / (k + 1) * (len(todo) - k - 1):.0f} s left")
    return batch


def _prepare_task(task: Task, target, trials: int, seed: int, staging, line: int,
                  out: Path) -> BatchTask:
    """Sample one task's candidates, stage their records from line ``line`` on, build them."""
    candidates = sample_candidates(task, target, trials, seed)
    default = traced_default_schedule(task, target)
    workload = staging.commit_workload(task.mod)
    traced = [(f"c{i}", c.sch.trace) for i, c in enumerate(candidates)]
    if default is not None and target.kind.name == "cuda":  # llvm's is the empty trace,
        traced.append(("dlight", default.trace))             # which top-k passes over
    args_info = ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])
    for _, trace in traced:
        staging.commit_tuning_record(ms.database.TuningRecord(
            trace, workload, run_secs=None, target=target, args_info=args_info))
    library = f"libs/{task.shash}.so"
    funcs = _library_functions(candidates, default)
    runtime, binaries, unbuilt = build_library(funcs, target, out / "kernels")
    runtime.export_library(str(out / library))
    return BatchTask(task.name, str(task.shash), task.weight, library,
                     tuple(name for name in funcs if name not in unbuilt),
                     tuple(name for name, _ in traced),
                     tuple(range(line, line + len(traced))),
                     unbuilt, _arg_specs(task), tuple(b.sha256 for b in binaries))


def commit_batch(batch_dir: str | Path, times_path: str | Path, records_dir, target) -> dict:
    """Commit the measured candidates of a batch into the target's records.

    Args:
        batch_dir: the folder ``prepare_batch`` wrote.
        times_path: ``times.json`` from ``scripts/gpu/run_batch.py``: ``{"tasks": {shash:
            {"c0": seconds or null, ..., "dlight": seconds or null}}}``.
        records_dir: the records root (``tuning_logs``) or the target's directory.
        target: the CUDA target the batch was built for.

    Returns:
        ``{shash: {"records": n, "failed": k, "best_s": s, "dlight_s": s}}`` for each task timed.
    """
    target = resolve_target(target)
    out = Path(batch_dir)
    times = json.loads(Path(times_path).read_text())["tasks"]
    workloads = (out / STAGING / records.WORKLOAD_FILE).read_text().splitlines()
    lines = (out / STAGING / records.RECORD_FILE).read_text().splitlines()
    summary = {}
    timed = [t for t in _read_batch(out) if t.shash in times]
    mods = {t.shash: _workload_mod(workloads, lines, t) for t in timed}
    with records.pending_database(records_dir, target, list(mods.values())) as database:
        for task in timed:
            measured = times[task.shash]
            workload = database.commit_workload(mods[task.shash])
            secs = []
            for name, index in zip(task.candidates, task.record_lines):
                record = json.loads(lines[index])[1]
                seconds = measured.get(name)
                record[1] = [float(seconds) if seconds is not None else FAILED_RUN_SECS]
                database.commit_tuning_record(
                    ms.database.TuningRecord.from_json(record, workload))
                secs.append(seconds)
            ok = [s for s in secs if s is not None]
            summary[task.shash] = {"name": task.name, "records": len(secs),
                                   "failed": len(secs) - len(ok),
                                   "best_s": min(ok) if ok else None,
                                   "dlight_s": measured.get("dlight")}
    return summary


def _workload_mod(workloads: list[str], lines: list[str], task: BatchTask) -> tvm.IRModule:
    index = json.loads(lines[task.record_lines[0]])[0] if task.record_lines else None
    if index is None:
        raise PetError(f"task {task.name} of the batch has no candidates")
    return ms.database.Workload.from_json(json.loads(workloads[index])).mod


def _read_batch(out: Path) -> list[BatchTask]:
    path = out / "batch.json"
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    return [BatchTask(t["name"], t["shash"], t["weight"], t["library"], tuple(t["functions"]),
                      tuple(t["candidates"]), tuple(t["record_lines"]), dict(t["unbuilt"]),
                      tuple((d, tuple(s)) for d, s in t["args"]), tuple(t["binaries"]))
            for t in data["tasks"]]


def _write_batch(out: Path, batch: list[BatchTask], target, trials: int, seed: int) -> None:
    data = {"version": BATCH_VERSION, "target": str(target),
            "arch": str(target.attrs.get("arch", "")),
            "trials": trials, "seed": seed, "search": "MetaSchedule ReplayTrace, one round",
            "tasks": [{"name": t.name, "shash": t.shash, "weight": t.weight,
                       "library": t.library, "functions": list(t.functions),
                       "candidates": list(t.candidates), "record_lines": list(t.record_lines),
                       "unbuilt": t.unbuilt,
                       "args": [[d, list(s)] for d, s in t.args],
                       "binaries": list(t.binaries)} for t in batch]}
    atomic_write(out / "batch.json", json.dumps(data, indent=1) + "\n")


__all__ = ["BatchTask", "sample_candidates", "prepare_batch", "commit_batch", "FAILED_RUN_SECS"]
