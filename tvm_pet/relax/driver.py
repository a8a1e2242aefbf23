"""``tvm-pet optimize`` and ``tvm-pet tune``: PET on an ONNX model, end to end, with TVM.

Strategy (tuning every candidate is unaffordable on a CPU: 1-3 minutes per kernel at 64 trials):

1. **Tune the original.** Its kernels are tuned with MetaSchedule (``--trials`` per task) into
   ``tuning_logs/<target>/``; records are reused with zero new trials afterwards.
2. **Screen cheaply, tune the promising few.** The generator lists verified mutants per subset.
   Each is put in place in the whole model and costed with *untuned* TVM kernels, comparing only
   the kernels it changes; only the ``promising`` best per subset whose changed kernels take at
   most ``screen_ratio`` times the replaced ones get tuned, with the same trials per task as the
   original. They are tuned in the whole model, as TVM fuses them there (a mutant's last kernel
   takes the bias and ReLU after it), so that their records match the final build. Then the
   tuned mutants that beat the original by themselves are applied together, one per subset,
   and post-optimized (layouts between neighbouring layers cancel): that combination, which
   the search's combine step will cost, is tuned as well.
3. **Search with measured costs.** The optimizer (Algorithm 2) uses
   :class:`~tvm_pet.cost.measured.MeasuredCost` on whole candidate programs, in their fused
   form: tuned record times where they exist, untuned
   times elsewhere, so an untuned mutant never wins against a tuned original.
4. **Confirm end to end.** Baseline and optimized modules are built by the same pipeline with the
   same records and timed interleaved (A B A B ...) over several rounds. When the search's best
   program loses there, its runners-up are timed in turn (``confirm`` candidates in all, the
   rank test's threshold divided among them), since kernel times summed do not always predict
   the whole module. The optimized module is
   kept only when it is faster beyond the noise (:func:`_decide`: at least 5 % by the medians,
   and told apart from the baseline by a rank test at p < 0.01); otherwise the original is
   kept, and the report says so.
5. **Look again at close calls.** When the optimized module measures faster but not surely so,
   the decision is close: with a tuning budget, both modules are tuned again with a second
   seed and twice the trials per task (equal budgets: MetaSchedule keeps the best record of both
   seeds for each side), rebuilt, and timed again over twice the rounds; without one, they are
   timed again over three times the rounds. The second look decides, by the same rule. Every
   look is in the report (``looks``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import sys
import time

import numpy as np

from tvm_pet.errors import PetError
from tvm_pet.io import atomic_write
from tvm_pet.ir.node import Program
from tvm_pet.search.config import SearchConfig


@dataclasses.dataclass
class DriverOptions:
    """Options of :func:`optimize_model` and :func:`tune_model` (see the module docstring)."""

    target: str = "llvm"
    trials: int = 0
    records_dir: str | None = None
    rpc: str | None = None
    cost: str = "measured"
    promising: int = 2
    screen_ratio: float = 2.0
    timing_rounds: int = 5
    timing_number: int = 3
    timing_repeat: int = 3
    seed: int = 0
    second_look: bool = True
    confirm: int = 3


@contextlib.contextmanager
def _quiet_native_stderr():
    """Silence C-level stderr (TVM logs one "Scope Saving" warning per function on export)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _inputs(program: Program, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in program.inputs}


def _records(target, options: DriverOptions) -> str:
    from tvm_pet.tune.records import default_records_dir
    return options.records_dir or default_records_dir(target)


def tune_model(program: Program, config: SearchConfig, options: DriverOptions) -> dict:
    """Tune the original's kernels and the kernels of the most promising mutants.

    Returns a summary: tasks tuned, new trials, seconds, and the mutants whose kernels were tuned.
    """
    from tvm_pet.cost.measured import MeasuredCost
    from tvm_pet.relax.adapter import program_to_module
    from tvm_pet.search.optimizer import Optimizer, operator_subsets
    from tvm_pet.search.partition import partition, replace_subprogram
    from tvm_pet.tune.measure import tune
    from tvm_pet.tune.records import open_database
    from tvm_pet.tune.targets import resolve_target
    target = resolve_target(options.target)
    records = _records(target, options)
    start = time.perf_counter()
    stats = [tune(program_to_module(program), target, options.trials, records,
                  seed=options.seed, rpc=options.rpc)]
    untuned = MeasuredCost(target, tuned=False)
    opt = Optimizer(config, untuned)
    chosen, db, tuned_singles = [], None, []
    for sub in partition(program):
        for subset in operator_subsets(program, sub, config.max_subset):
            part, mutants = opt.mutants_of(program, subset, sub.name)
            # each mutant in place in the whole model: TVM fuses its kernels with their
            # neighbours, and those fused kernels are what gets tuned and run
            whole = [(m, replace_subprogram(program, part, c), c) for m, c in mutants]
            if not whole:
                continue
            # mutants tuned by an earlier run keep their places: the untuned screen is noisy,
            # and a rerun must not pick (and tune) different ones
            if db is None and pathlib.Path(records).exists():
                db = open_database(records, target)  # reopened only after tuning wrote to it
            done = [e for e in whole if db is not None and _tuned_before(e[1], target, db)]
            done = done[:options.promising]
            chosen += [{"subprogram": sub.name, "mutant": list(m.ops), "untuned_ratio": None}
                       for m, _, _ in done]
            tuned_singles += [(part, w, c) for _, w, c in done]
            slots = options.promising - len(done)
            if slots <= 0:
                continue
            fresh = [e for e in whole if all(e[1] is not d[1] for d in done)]
            ranked = sorted(((untuned.changed_ratio(program, w), m, w, c) for m, w, c in fresh),
                            key=lambda r: r[0])
            for ratio, mutant, candidate, corrected in ranked[:slots]:
                if ratio <= options.screen_ratio:
                    stats.append(tune(program_to_module(candidate), target, options.trials,
                                      records, seed=options.seed, rpc=options.rpc))
                    db = None
                    chosen.append({"subprogram": sub.name, "mutant": list(mutant.ops),
                                   "untuned_ratio": ratio})
                    tuned_singles.append((part, candidate, corrected))
    combined = _combination(program, tuned_singles, target, records)
    if combined is not None:
        stats.append(tune(program_to_module(combined), target, options.trials, records,
                          seed=options.seed, rpc=options.rpc))
        chosen.append({"subprogram": "combined", "mutant": [n.op.value for n in combined.nodes],
                       "untuned_ratio": None})
    return {"records": str(records), "trials_per_task": options.trials,
            "tasks": sum(s.tasks for s in stats), "new_trials": sum(s.new_trials for s in stats),
            "tuning_time_s": time.perf_counter() - start, "tuned_mutants": chosen}


def _combination(program: Program, tuned: list, target, records) -> Program | None:
    """The tuned mutants that beat the original by themselves (tuned costs), the best of each
    subset, applied together and post-optimized (:func:`~tvm_pet.search.optimizer.combine`):
    the program the search's combine step will cost, so its kernels (layouts cancelled between
    neighbours, new fusions) must be tuned too. None when fewer than two subsets improve."""
    from tvm_pet.cost.measured import MeasuredCost
    from tvm_pet.search.optimizer import combine
    if len(tuned) < 2:
        return None
    cost = MeasuredCost(target, records)
    scored = [(cost.cost(whole), part, corrected) for part, whole, corrected in tuned]
    together = combine(program, scored, cost.cost(program))
    return None if together is None else together[0]


def _device(target):
    """The device that runs ``target``'s code, or a clear error when this machine has none."""
    import tvm
    kind = target.kind.name
    if kind == "llvm":
        return tvm.cpu()
    if kind == "cuda":
        if not tvm.runtime.enabled("cuda") or not tvm.cuda(0).exist:
            raise PetError("target cuda needs a CUDA GPU and TVM's CUDA runtime; this machine has "
                           "none (use --target llvm, or --rpc to measure on a GPU machine)")
        return tvm.cuda(0)
    raise PetError(f"tvm-pet optimize runs on llvm or cuda targets, not {kind!r}")


def _check_supported(program: Program) -> None:
    """Refuse, before any tuning or search, a program too large to verify or one that cannot be
    emitted in Relax (an operator tvm_pet imports as opaque but cannot lower)."""
    from tvm_pet.errors import UnsupportedOperator
    from tvm_pet.relax.adapter import program_to_module
    from tvm_pet.verify.limits import check_tensor_sizes
    check_tensor_sizes(program)
    try:
        program_to_module(program)
    except UnsupportedOperator as e:
        raise UnsupportedOperator(
            f"{e}. tvm-pet optimize rebuilds the whole model from tvm_pet's own import; to keep "
            f"such operators as they are, run PETPass on TVM's import instead "
            f"(relax.frontend.onnx.from_onnx, then relax_pipeline=\"pet\")") from None


def _relative_iqr(t) -> float:
    q1, q3 = np.percentile(t.samples, [25, 75])
    return float((q3 - q1) / t.median)


def _tuned_before(program: Program, target, db) -> bool:
    """True when every kernel of ``program`` has records in ``db`` (an earlier run tuned it; a
    small search space may hold fewer records than the trial budget)."""
    from tvm_pet.relax.adapter import program_to_module
    from tvm_pet.tune.measure import extract_tasks, prepare
    from tvm_pet.tune.records import workload_records
    tasks = extract_tasks(prepare(program_to_module(program), target), target)
    return bool(tasks) and all(workload_records(db, t.mod) for t in tasks)


#: Smallest advantage worth replacing the original for (a ratio of medians).
MIN_GAIN = 0.05
#: Largest one-sided Mann-Whitney p-value at which the optimized module counts as faster.
ALPHA = 0.01


def _decide(timings: dict, alpha: float = ALPHA) -> tuple[bool, dict]:
    """Keep the optimized module only when it wins beyond the noise of the measurement.

    Two conditions, on the interleaved samples of both modules:

    - the baseline's median over the optimized one's exceeds ``1 + MIN_GAIN``;
    - a one-sided Mann-Whitney U test says the optimized samples are smaller at p < ``alpha``
      (``ALPHA``, divided by the number of candidates when several are tried: Bonferroni).

    The rank test asks whether the two sample sets are told apart, whatever the shape of the
    noise. On this 2-core machine a run is often slowed by a whole scheduling quantum, so
    samples are bimodal and their interquartile range (up to 40 %, reported as ``noise``) says more
    about that interference than about the medians; ``benchmarks/decision_rule.py`` measures the
    rule on identical binaries (how often it keeps a non-change) and on real candidates.

    Returns the decision and its figures: ``ratio``, ``p_value``, ``noise``, ``close`` (faster,
    but not surely) and ``rule`` in words.
    """
    from scipy.stats import mannwhitneyu
    base, opt = timings["baseline"], timings["optimized"]
    noise = max(_relative_iqr(base), _relative_iqr(opt))
    ratio = base.median / opt.median
    p_value = float(mannwhitneyu(base.samples, opt.samples, alternative="greater").pvalue)
    keep = ratio > 1 + MIN_GAIN and p_value < alpha
    rule = (f"keep the optimized module only if baseline median / optimized median "
            f"({ratio:.3f}) exceeds {1 + MIN_GAIN:.2f} and a one-sided Mann-Whitney test on the "
            f"interleaved samples says it is faster at p < {alpha:.2g} (p = {p_value:.2g}; spread: "
            f"relative interquartile range up to {noise:.3f})")
    return keep, {"ratio": ratio, "p_value": p_value, "noise": noise,
                  "close": ratio > 1 and not keep, "kept": "optimized" if keep else "original",
                  "rule": rule}


def _look(built, x, program, device, options: DriverOptions, rounds: int, alpha: float = ALPHA,
          **what):
    """Time baseline and optimized interleaved and decide; returns (keep, timings, look)."""
    from tvm_pet.tune.measure import time_interleaved
    timings = time_interleaved(built, [x[t.name] for t in program.inputs], device,
                               rounds=rounds, number=options.timing_number,
                               repeat=options.timing_repeat)
    keep, look = _decide(timings, alpha)
    return keep, timings, {**what, "rounds": rounds, **look}


def optimize_model(model, out_dir, config: SearchConfig = SearchConfig(),
                   options: DriverOptions = DriverOptions()) -> dict:
    """Optimize an ONNX model with PET for a TVM target, confirm it end to end, write artifacts.

    Writes ``report.json``, ``optimized.so``, ``baseline.so``, ``optimized.onnx`` and
    ``optimized.py`` into ``out_dir`` and returns the report.
    """
    from tvm_pet.cost.analytic import AnalyticCost
    from tvm_pet.cost.measured import MeasuredCost
    from tvm_pet.onnx import export_model, import_model
    from tvm_pet.relax.adapter import program_to_module
    from tvm_pet.search.optimizer import Candidate, optimize
    from tvm_pet.tune.measure import build, tune
    from tvm_pet.tune.targets import resolve_target

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if options.confirm < 1:
        raise PetError(f"confirm={options.confirm}: at least one candidate must be timed")
    program = import_model(model)
    _check_supported(program)
    target = resolve_target(options.target)
    device = _device(target)
    records = _records(target, options)
    tuning = tune_model(program, config, options) if options.trials > 0 else \
        {"tuning_time_s": 0.0, "new_trials": 0, "records": str(records)}
    cost = MeasuredCost(target, records) if options.cost == "measured" else AnalyticCost()
    start = time.perf_counter()
    result = optimize(program, config, cost)
    search_time = time.perf_counter() - start
    x = _inputs(program, options.seed)
    base_module = program_to_module(program)
    base_ex = build(base_module, target, records)
    reference = _run(base_ex, x, program, device)  # the original's outputs, as TVM builds it
    # the best candidate, then the runners-up, until one wins end to end
    candidates = ([Candidate(result.program, result.cost, result.applied)] + result.runners_up
                  if result.applied else [])[:options.confirm]
    alpha = ALPHA / max(1, len(candidates))
    looks, keep, chosen = [], False, None
    budget = {"trials_per_task": options.trials, "seed": options.seed}
    for index, candidate in enumerate(candidates):
        modules = {"baseline": base_module, "optimized": program_to_module(candidate.program)}
        extra = {}
        if budget["trials_per_task"] != options.trials:
            # the baseline was tuned again for an earlier close call: equal budgets for this one
            stats = tune(modules["optimized"], target, budget["trials_per_task"], records,
                         seed=budget["seed"], rpc=options.rpc)
            extra = {"new_trials": stats.new_trials, "tuning_time_s": stats.wall_s}
        built = {"baseline": base_ex, "optimized": build(modules["optimized"], target, records)}
        _check_outputs(reference, built["optimized"], x, program, device, index)
        name = "first look" if index == 0 else f"runner-up {index}"
        keep, timings, look = _look(built, x, program, device, options, options.timing_rounds,
                                    alpha, what=name, candidate=index, **budget, **extra)
        looks.append(look)
        if look["close"] and options.second_look:
            keep, timings, built, look = _second_look(modules, built, x, program, target,
                                                      device, records, options, alpha, index)
            looks.append(look)
            # tuned again: later candidates meet this baseline, with the same budget
            if built["baseline"] is not base_ex:
                base_ex = built["baseline"]
                reference = _run(base_ex, x, program, device)
            budget = {"trials_per_task": look["trials_per_task"], "seed": look["seed"]}
        if keep:
            chosen = candidate
            break
    if not candidates:  # the search applied no mutant: any measured difference is noise
        built = {"baseline": base_ex, "optimized": base_ex}
        _, timings, look = _look(built, x, program, device, options, options.timing_rounds,
                                 what="first look", candidate=None,
                                 trials_per_task=options.trials, seed=options.seed)
        look = {**look, "kept": "original", "close": False,
                "rule": "the search applied no mutant: the original is kept"}
        looks.append(look)
    rule = look["rule"]
    final = chosen.program if keep else program
    final_ex = built["optimized"] if keep else built["baseline"]
    # the executables that are written out are the ones checked (built["baseline"] is base_ex)
    got = reference if final_ex is base_ex else _run(final_ex, x, program, device)
    max_abs_err = max(float(np.abs(a - b).max()) for a, b in zip(reference, got))
    ort_err = _onnxruntime_error(model, x, got)
    with _quiet_native_stderr():
        built["baseline"].export_library(str(out / "baseline.so"))
        final_ex.export_library(str(out / "optimized.so"))
    atomic_write(out / "optimized.onnx", export_model(final).SerializeToString())
    atomic_write(out / "optimized.py", program_to_module(final).script())
    report = {
        "model": str(model), "target": str(target), "cost_model": cost.name,
        "baseline_time_s": timings["baseline"].median,
        "optimized_time_s": timings["optimized"].median if keep else timings["baseline"].median,
        "speedup": timings["baseline"].median / timings["optimized"].median if keep else 1.0,
        "measured_speedup_of_candidate": timings["baseline"].median / timings["optimized"].median,
        "timings": {k: dataclasses.asdict(v) for k, v in timings.items()},
        "decision_rule": rule, "kept": "optimized" if keep else "original", "looks": looks,
        "search_time_s": search_time,
        "tuning_time_s": tuning["tuning_time_s"] + sum(k.get("tuning_time_s", 0.0) for k in looks),
        "new_trials": tuning["new_trials"] + sum(k.get("new_trials", 0) for k in looks),
        "tuning": tuning,
        "max_abs_err": max_abs_err, "max_abs_err_vs_onnxruntime": ort_err,
        "applied": [{"mutant": " -> ".join(a.mutant_ops), "subprogram": a.subprogram,
                     "partially_equivalent": a.partially_equivalent,
                     "corrected_boxes": a.corrected_boxes, "cost_before_s": a.cost_before,
                     "cost_after_s": a.cost_after} for a in (chosen.applied if keep else [])],
        "candidates_confirmed": len({k["candidate"] for k in looks} - {None}),
        "search": result.to_json(),
    }
    atomic_write(out / "report.json", json.dumps(report, indent=2, default=str) + "\n")
    return report


def _second_look(modules, built, x, program, target, device, records, options: DriverOptions,
                 alpha: float = ALPHA, candidate: int = 0):
    """A close call looked at again (module docstring, step 5); returns (keep, timings, built,
    look)."""
    from tvm_pet.tune.measure import build, tune
    if options.trials > 0:
        trials, seed = 2 * options.trials, options.seed + 1
        stats = [tune(m, target, trials, records, seed=seed, rpc=options.rpc)
                 for m in modules.values()]
        built = {k: build(m, target, records) for k, m in modules.items()}
        keep, timings, look = _look(
            built, x, program, device, options, 2 * options.timing_rounds, alpha,
            what="second look: both sides tuned again with a second seed", candidate=candidate,
            trials_per_task=trials, seed=seed, new_trials=sum(s.new_trials for s in stats),
            tuning_time_s=sum(s.wall_s for s in stats))
    else:
        keep, timings, look = _look(
            built, x, program, device, options, 3 * options.timing_rounds, alpha,
            what="second look: timed again over more rounds (no tuning budget)",
            candidate=candidate, trials_per_task=0, seed=options.seed)
    return keep, timings, built, look


def _check_outputs(reference, executable, x, program, device, index) -> None:
    """Refuse a candidate whose compiled module computes something else than the original's
    outputs ``reference`` (the verifier proved the rewrite; this guards the lowering and TVM's
    build)."""
    for a, b in zip(reference, _run(executable, x, program, device)):
        scale = max(1.0, float(np.abs(a).max()))
        if not np.allclose(a, b, rtol=1e-4, atol=1e-4 * scale):
            raise PetError(f"internal error: candidate {index}'s compiled module differs from the "
                           f"original's by {float(np.abs(a - b).max()):.3g}; please report it")


def _run(executable, x, program, device) -> list[np.ndarray]:
    """The outputs of a compiled module's ``main`` on the inputs ``x``."""
    import tvm
    from tvm import relax
    vm = relax.VirtualMachine(executable, device)
    res = vm["main"](*[tvm.runtime.tensor(x[t.name], device) for t in program.inputs])
    return [res.numpy()] if hasattr(res, "numpy") else [r.numpy() for r in res]


def _onnxruntime_error(model, x, outputs) -> float | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    path = str(model) if not hasattr(model, "SerializeToString") else None
    session = ort.InferenceSession(path or model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, {i.name: x[i.name] for i in session.get_inputs()})
    return max(float(np.abs(a - b).max()) for a, b in zip(want, outputs))


__all__ = ["DriverOptions", "optimize_model", "tune_model", "PetError"]
