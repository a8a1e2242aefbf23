"""Benchmarks of record: TVM alone, PET + TVM and onnxruntime, side by side, per model.

    python benchmarks/run.py --quick              # shipped records, no tuning, < 10 min
    python benchmarks/run.py --quick --trials 32  # the README table: close calls tuned again
    python benchmarks/run.py                      # the paper's five models at batch 1
    python benchmarks/run.py --models resnet18 --batch 1,16 --trials 0 --rounds 5
    python benchmarks/run.py --layout NHWC --trials 32 --records DIR   # channels-last, both sides

For each model (built from code, seeded) and batch size, one child process runs
``tvm_pet.pipeline.optimize_model``: PET's search with the measured cost, the end-to-end
confirmation (the optimized module is kept only when it wins beyond the noise) and the export of
``baseline.so`` and ``optimized.so``; on a CPU it also builds ``default.so``. The child then
times the contenders interleaved, A B C D A B C D ..., each sample the mean of ``number`` calls of
a wall-clock timer around the call:

- ``tvm_default``: ``default.so``, the original built by TVM's default pipeline with the records,
  the weights as the model holds them (``tvm-pet optimize --tvm-default``'s baseline);
- ``tvm``: ``baseline.so``, TVM's best build of the original with the records (on a CPU, the
  weights prepacked into the layouts the tuned kernels read);
- ``pet``: ``optimized.so``, what PET kept (the baseline itself when it kept the original);
- ``onnxruntime``: the same ONNX model in onnxruntime's CPU provider (all graph optimizations,
  the same threads), on a CPU timed alone in a fresh process after each of TVM's: beside TVM's
  thread pool it drew a ×1.9 slower speed in some processes.

Each contender's share of the machine's peak FLOP/s is the model's linear FLOPs over its median
time (:mod:`tvm_pet.tune.peak` says how the peak is computed).

The tuning budget held equal is **trials per task**: both TVM and PET+TVM build with the same
records directory. ``--quick`` uses the shipped records (32 trials per task, no new tuning);
``--trials N`` tunes N per task first (and a close call again, 2N per task on both sides with a
second seed: ``optimize_model``'s second look); with 0 (the default) records apply only where they
already exist and every other kernel is TVM's untuned loop nest. The tuning time spent on PET's
own candidates is reported separately, since equal trials per task is not equal tuning time.
``--layout NHWC`` builds both sides channels-last (TVM's ``ConvertLayout`` on the original and
on PET's candidates alike, ``tvm-pet optimize --layout``); its results go to
``<target>-nhwc.*``. ``--fast-math`` lowers both sides with TVM's ``FastMathTransform`` (fast
``erf``, ``exp``, ``tanh``, ``softmax``; ``tvm-pet optimize --fast-math``); its results go to
``<target>-fastmath.*``. ``--winograd`` lets PET's search offer each 3×3 stride-1
convolution by Winograd's F(4×4, 3×3) (``tvm-pet optimize --winograd``; TVM's side stays the
direct form, which is all TVM's CPU lowering has); its results go to ``<target>-winograd.*``.
``--im2col`` lets it offer each 2-D convolution as one matrix product over its shifted windows
(``tvm-pet optimize --im2col``); its results go to ``<target>-im2col.*``.
Peak memory is the child's peak resident set size. Results go to
``benchmarks/results/<target>.json``, ``.md`` and ``.png``; nothing here fails on timing.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The paper's five models (CSRNet twice: whole and its dilated back end), then Table 3's graphs.
PAPER = ["resnet18", "csrnet", "csrnet_backend", "inception_v3", "bert_encoder", "resnet3d_18"]
#: The five whole models of the paper's end-to-end figure.
WHOLE = [m for m in PAPER if m != "csrnet_backend"]
TABLE3 = ["conv5x5", "dilated_conv", "two_1x1_convs", "three_matmuls"]
#: --quick: the graphs the shipped records cover, at batch 1 (the README's table).
QUICK = TABLE3 + ["csrnet_backend"]
CONTENDERS = ("tvm_default", "tvm", "pet", "onnxruntime")
#: Seconds of untimed interleaved rounds before the timed ones (``time_interleaved``).
SETTLE_S = 2.0
#: Models whose untuned TVM run takes seconds: timed with one call per sample.
SLOW = {"resnet3d_18", "inception_v3", "csrnet", "bert_encoder", "resnet18"}
#: The trial budget per task of the records shipped in tvm_pet/tuning_logs/ for the QUICK graphs.
SHIPPED_TRIALS = 32


def _child(args) -> dict:
    """Optimize and time one model in this process; return its row."""
    import numpy as np
    import onnx

    from tvm_pet.models import build_model
    from tvm_pet.pipeline import DriverOptions, optimize_model
    from tvm_pet.search.config import SearchConfig

    args.batch = int(args.batch)
    kwargs = {"batch": args.batch} | ({"layers": 1} if args.one == "bert_encoder" else {})
    model = build_model(args.one, **kwargs)
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "model.onnx"
        onnx.save(model, path)
        config = SearchConfig(depth=3, rounds=1, time_limit=args.search_limit,
                              winograd=args.winograd, im2col=args.im2col)
        # a close call's second look tunes both sides again at twice the trials per task: on a
        # whole model that is the whole model tuned again (an hour here), and the rows would no
        # longer share one budget; so by default whole models get no second look
        second_look = (args.second_look == "on"
                       or (args.second_look == "auto" and args.one not in WHOLE))
        options = DriverOptions(target=args.target, trials=args.trials, records_dir=args.records,
                                second_look=second_look, seed=args.seed,
                                # the decision times as `tvm-pet optimize` does (3 samples of
                                # 3 calls a round), slow models included: fewer samples made
                                # a whole model's look weaker than a user's own run
                                timing_rounds=args.decision_rounds,
                                timing_processes=args.timing_processes, layout=args.layout,
                                fast_math=args.fast_math, promising=args.promising)
        report = optimize_model(path, pathlib.Path(tmp) / "out", config, options)
        if options.prepack and args.target.split()[0] == "llvm":
            _build_default(path, options, pathlib.Path(tmp) / "out" / "default.so")
        rng = np.random.default_rng(0)
        feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
                 .astype(np.float32) for i in model.graph.input}
        np.savez(pathlib.Path(tmp) / "feeds.npz", **feeds)
        processes = timing_processes(args)
        groups, others_share = _time_row(tmp, args, processes)
    timed = [k for k in CONTENDERS if k in groups[0]]
    samples = {k: [v for g in groups for v in g[k]] for k in timed}
    times = {k: summary(v) for k, v in samples.items()}
    by_process = [{k: 1e3 * statistics.median(g[k]) for k in timed} for g in groups]
    flops = (report.get("coverage") or {}).get("linear_flops")

    def speedup(slow: str, fast: str) -> float:
        # within each timing process, never across: the geometric mean of their ratios
        return geomean([p[slow] / p[fast] for p in by_process])
    return {
        "model": args.one, "batch": args.batch, "target": args.target,
        # the layout both sides were built in (with auto: chosen by timing the original)
        "layout": (report.get("layout") or {}).get("layout", args.layout),
        "layout_choice": report.get("layout"),
        "fast_math": args.fast_math,
        "target_detail": report["target"],
        "kept": report["kept"], "decision_rule": report["decision_rule"],
        "candidate_speedup_in_decision": report["measured_speedup_of_candidate"],
        "decision_looks": [{k: look.get(k) for k in ("what", "ratio", "p_value", "noise", "rounds",
                                                 "repeat", "number", "trials_per_task", "kept",
                                                 "refused", "process_ratios",
                                                 "cpu_others_share", "mutants", "kinds")}
                           for look in report["looks"]],
        "times_ms": times,
        # the share of the CPU other processes used while the row was timed (None: not known)
        "cpu_others_share": others_share,
        "speedup_pet_vs_tvm": speedup("tvm", "pet"),
        # each timing process's medians: a binary's speed can be drawn once per process
        "times_by_process_ms": by_process if processes > 1 else None,
        "speedup_pet_vs_tvm_by_process": ([p["tvm"] / p["pet"] for p in by_process]
                                          if processes > 1 else None),
        "speedup_pet_vs_onnxruntime": speedup("onnxruntime", "pet"),
        "speedup_tvm_vs_onnxruntime": speedup("onnxruntime", "tvm"),
        # TVM's best build (weights prepacked) over its default build, the same records
        "speedup_tvm_best_vs_default": (speedup("tvm_default", "tvm") if "tvm_default" in timed
                                        else None),
        "build": report.get("build"),
        # linear FLOPs (convolutions and products) of one run, and the share of the machine's
        # peak FLOP/s each contender reaches at its median (tvm_pet.tune.peak)
        "linear_flops": flops,
        "peak_share": ({k: _peak(args.target).share(flops, times[k]["median"] / 1e3)
                        for k in timed} if flops and args.target.split()[0] == "llvm" else None),
        "max_abs_err": report["max_abs_err"],
        "max_abs_err_vs_onnxruntime": report["max_abs_err_vs_onnxruntime"],
        "search_time_s": report["search_time_s"], "tuning_time_s": report["tuning_time_s"],
        "new_trials": report["new_trials"], "trials_per_task": args.trials,
        "seed": args.seed,
        "second_look": second_look,
        "applied": [a["mutant"] for a in report["applied"]],
        # the mutants whose kernels were tuned, and why each was chosen: with "applied", which
        # kinds win on this build
        "tuned_mutants": [{"mutant": " -> ".join(m["mutant"]), "subprogram": m["subprogram"],
                           "reason": m["reason"]}
                          for m in (report.get("tuning") or {}).get("tuned_mutants", [])],
        "search_stop": report["search"].get("stop"),
        # candidates costed at or a little above the original, timed all the same
        "near_ties_confirmed": report["search"].get("near_ties_confirmed", 0),
        # what the figures stand on: the kernels' records, and TVM's rewrites on both sides
        "records_plan": report.get("records_plan"),
        "kernels": (report.get("kernels") or {}).get("summary"),
        "tvm_rewrites": report.get("tvm_rewrites"),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _build_default(path: pathlib.Path, options, out: pathlib.Path) -> None:
    """TVM's default build of the original (no weight prepacking: ``tvm-pet optimize
    --tvm-default``'s baseline) from the same records, exported to ``out``."""
    import dataclasses

    from tvm_pet.pipeline.optimize import load_model, toolchain_for
    default = dataclasses.replace(options, prepack=False, layout="NCHW")
    loaded = load_model(path, default)
    toolchain, _ = toolchain_for(loaded, default, None)
    toolchain.export(toolchain.build(toolchain.lower(loaded.program)), str(out))


def _peak(target: str):
    """The machine's peak at the target's cores (:func:`tvm_pet.tune.peak.machine_peak`)."""
    from tvm_pet.tune.peak import machine_peak
    from tvm_pet.tune.targets import resolve_target
    cores = resolve_target(target).attrs.get("num-cores")
    return machine_peak(None if cores is None else int(cores))


def timing_processes(args) -> int:
    """The fresh processes a row's timing spreads over: ``--timing-processes`` on a CPU, one on
    a GPU (where onnxruntime then shares TVM's process)."""
    return args.timing_processes if args.target.split()[0] == "llvm" else 1


def _time_row(folder: str, args, processes: int) -> tuple[list[dict], float | None]:
    """Time the row in ``folder``: each process's samples (:func:`time_contenders`, in
    ``processes`` fresh processes or in this one), and the share of the CPU other processes used
    meanwhile (the timing processes' own time is not others')."""
    from tvm_pet.tune.contention import CpuWatch
    with CpuWatch() as watch:
        if processes > 1:
            rounds = math.ceil(args.rounds / processes)
            groups = [_time_in_fresh_process(folder, args, rounds, "tvm")
                      | _time_in_fresh_process(folder, args, rounds, "onnxruntime")
                      for _ in range(processes)]
        else:
            groups = [time_contenders(folder, args.target, args.rounds, args.number)]
    return groups, watch.share


def time_contenders(folder: str, target: str, rounds: int, number: int,
                    which: str = "all") -> dict[str, list]:
    """Time the contenders of the row in ``folder`` (``model.onnx``, ``feeds.npz``,
    ``out/baseline.so`` and ``out/optimized.so``) interleaved in this process: ``which`` is
    ``"all"``, ``"tvm"`` (TVM's builds alone) or ``"onnxruntime"`` (onnxruntime alone, its
    threads spinning between operators as by default: no other contender shares the process).

    In one process with TVM's thread pool, onnxruntime ran ResNet-18 ×1.9 slower in some
    processes (17 ms against 9 ms on a 2-core Zen 5), a draw that onnxruntime alone never made;
    so the benchmarks time it in a process of its own beside each of TVM's.
    """
    import numpy as np
    import tvm
    from tvm import relax

    folder = pathlib.Path(folder)
    on_cpu = target.split()[0] == "llvm"
    device = tvm.cpu() if on_cpu else tvm.cuda(0)
    with np.load(folder / "feeds.npz") as npz:
        feeds = {name: npz[name] for name in npz.files}
    args_tvm = ([] if which == "onnxruntime"
                else [tvm.runtime.tensor(v, device) for v in feeds.values()])
    builds = (("tvm_default", "default.so"), ("tvm", "baseline.so"), ("pet", "optimized.so"))
    vms = {k: relax.VirtualMachine(tvm.runtime.load_module(str(folder / "out" / f)), device)
           for k, f in builds if which != "onnxruntime" and (folder / "out" / f).exists()}
    calls = {k: (lambda vm=vm: vm["main"](*args_tvm)) for k, vm in vms.items()}
    if which != "tvm":
        calls["onnxruntime"] = _onnxruntime_call(folder, target, feeds, spin=which != "all")
    if not on_cpu:  # GPU calls are asynchronous: wait for each
        calls = {k: (lambda f=f: (f(), device.sync())) for k, f in calls.items()}
    return time_interleaved(calls, rounds, number)


def _onnxruntime_call(folder: pathlib.Path, target: str, feeds: dict, spin: bool):
    """A call of the model on onnxruntime (``ORT_ENABLE_ALL``, on the target's cores)."""
    import onnxruntime as ort
    options_ort = ort.SessionOptions()
    if not spin:  # idle threads spinning after a run would steal the next contender's cores
        options_ort.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options_ort.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if target.split()[0] == "llvm":  # the threads TVM's build runs on
        from tvm_pet.tune.targets import resolve_target
        cores = resolve_target(target).attrs.get("num-cores")
        options_ort.intra_op_num_threads = int(cores) if cores else 0
    session = ort.InferenceSession(str(folder / "model.onnx"), options_ort,
                                   providers=["CPUExecutionProvider"])
    return lambda: session.run(None, feeds)


def _time_in_fresh_process(folder: str, args, rounds: int, which: str = "all"
                           ) -> dict[str, list]:
    """:func:`time_contenders` in a fresh process: one draw of the address layout, which sets
    some binaries' speed for a whole process (the CSRNet back end's TVM binary: 25 ms in some
    processes, 31-37 ms in others; :mod:`tvm_pet.tune.process_timing`)."""
    samples, error = _run_json([sys.executable, __file__, "--time-folder", folder, "--target",
                                args.target, "--rounds", str(rounds), "--number",
                                str(args.number), "--time-which", which])
    if samples is None:
        raise RuntimeError(f"a timing process failed: {error}")
    return samples


def _run_json(cmd: list[str]) -> tuple[dict | None, str]:
    """Run a child of this script and read the JSON line it prints last: ``(that object,
    "")``, or ``(None, its last lines of output)`` when it failed or printed none."""
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return None, " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
    return json.loads(lines[-1]), ""


def time_interleaved(calls: dict, rounds: int, number: int,
                     settle_s: float = SETTLE_S) -> dict[str, list[float]]:
    """Time callables interleaved, rotating the order every round (A B C, B C A, C A B, ...):
    ``rounds`` samples each, each the mean of ``number`` calls (seconds). Untimed rounds come
    first, for at least ``settle_s`` seconds (one round at least): right after the optimize step
    every contender ran up to ×2.5 slow for a second or two (BERT: TVM 35 ms then 14 ms), which
    made the first rounds' samples noise. The rotation spreads over all contenders whatever the
    one before leaves behind (busy threads, a cold cache), which otherwise makes identical
    binaries differ."""
    start = time.perf_counter()
    while True:
        for call in calls.values():
            call()
        if time.perf_counter() - start >= settle_s:
            break
    samples: dict[str, list[float]] = {k: [] for k in calls}
    names = list(calls)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            call = calls[name]
            start = time.perf_counter()
            for _ in range(number):
                call()
            samples[name].append((time.perf_counter() - start) / number)
    return samples


def summary(values: list[float]) -> dict:
    """Median, min and max of samples in seconds, as milliseconds."""
    return {"median": 1e3 * statistics.median(values), "min": 1e3 * min(values),
            "max": 1e3 * max(values), "samples": [1e3 * v for v in values]}


def _run_child(name: str, batch: int, args) -> dict:
    """Run one model in a fresh process (peak memory per model; a crash costs one row)."""
    slow = name in SLOW or batch > 1
    cmd = [sys.executable, __file__, "--one", name, "--batch", str(batch),
           "--target", args.target, "--trials", str(args.trials),
           "--rounds", str(args.rounds), "--number", str(1 if slow else args.number),
           "--decision-rounds", str(args.decision_rounds), "--search-limit",
           str(args.search_limit), "--timing-processes", str(args.timing_processes)]
    cmd += ["--records", args.records] if args.records else []
    cmd += ["--second-look", args.second_look, "--seed", str(args.seed), "--layout",
            args.layout] + (["--fast-math"] if args.fast_math else []) \
        + (["--winograd"] if args.winograd else []) + (["--im2col"] if args.im2col else []) \
        + ["--promising", str(args.promising)]
    start = time.perf_counter()
    row, error = _run_json(cmd)
    if row is None:
        row = {"model": name, "batch": batch, "error": error}
    row["wall_s"] = time.perf_counter() - start
    return row


def timing_words(run: dict) -> str:
    """How the run timed each row, in words."""
    apart = run.get("onnxruntime_apart")
    words = (f"{run['rounds']} interleaved rounds of TVM default, TVM best, PET + TVM best"
             + ("" if apart else " and onnxruntime")
             + f", the order rotating every round, after {SETTLE_S:.0f} s of untimed rounds; "
             f"each sample the mean of {run['number']} calls (1 for the slow models); wall-clock "
             "timer")
    if run.get("timing_processes", 1) > 1:
        words += (f"; the rounds spread over {run['timing_processes']} fresh processes (a "
                  "binary's speed can be drawn once per process); times are their pooled "
                  "samples, ratios the geometric mean of each process's ratio of medians")
    if apart:
        words += ("; onnxruntime timed as many rounds alone, in a fresh process after each of "
                  "TVM's (beside TVM's thread pool it drew a ×1.9 slower speed in some "
                  "processes)")
    return words


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def write_results(rows: list[dict], run: dict, out_dir: pathlib.Path,
                  machine: dict | None = None) -> pathlib.Path:
    """Write ``<target>[-quick].json``, ``.md`` and ``.png`` and return the JSON path.

    ``run`` holds the run's settings: target, quick, trials, rounds, number. ``machine``, the
    ``machine`` and ``peak`` of the run of record when it is rendered again, so that they keep
    naming the machine its rows were timed on (by default, this machine's).
    """
    ok = [r for r in rows if "error" not in r]
    stem = (run["target"].split()[0] + ("-quick" if run["quick"] else "")
            + ("-" + run["layout"].lower() if run.get("layout", "auto") != "auto" else "")
            + ("-fastmath" if run.get("fast_math") else "")
            + ("-winograd" if run.get("winograd") else "")
            + ("-im2col" if run.get("im2col") else ""))
    table3 = [r for r in ok if r["model"] in TABLE3 and r["batch"] == 1]
    kept = [counted_speedup(r) for r in table3]
    whole = [counted_speedup(r) for r in ok
             if r["model"] in WHOLE and r["batch"] == 1]
    result = {
        "target": run["target"], "run": run,
        "machine": _machine(run["target"]),
        "budget_held_equal": budget_words(run, ok),
        "peak": (_peak(run["target"]).describe() if run["target"].split()[0] == "llvm"
                 else None),
        "timing": timing_words(run),
        "decision": (f"optimize's own keep-or-not timing: {run['decision_rounds']} rounds of 3 "
                     f"samples of 3 calls a side, as `tvm-pet optimize` times"
                     + (f", spread over {run['timing_processes']} fresh processes"
                        if run.get("timing_processes", 1) > 1 else "")
                     if run.get("decision_rounds") else None),
        # a model whose original was kept runs the same binary on both sides: ×1 by definition
        "table3_geomean_pet_vs_tvm": geomean(kept) if table3 else None,
        "table3_geomean_measured_ratios": (geomean([r["speedup_pet_vs_tvm"] for r in table3])
                                           if table3 else None),
        # the five whole models (the CSRNet back end is a part of CSRNet: not counted again)
        "models_geomean_pet_vs_tvm": geomean(whole) if len(whole) == len(WHOLE) else None,
        "rows": rows,
    }
    result.update({k: v for k, v in (machine or {}).items() if k in ("machine", "peak")})
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{stem}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    path.with_suffix(".md").write_text(markdown(rows, result))
    plot(ok, path.with_suffix(".png"))
    return path


def budget_words(run: dict, rows: list[dict]) -> str:
    """The tuning budget both sides had, in words, from the run's settings and what its rows
    did (whether any had a second look)."""
    second = [r["model"] for r in rows if r.get("second_look") or any(
        look["what"].startswith("second look") for look in r.get("decision_looks", []))]
    again = (f"; a close call (second look on for {', '.join(second)}) is tuned again on both "
             f"sides to {2 * run['trials']} per task with a second seed"
             if second and run["trials"] else "")
    where = (f"the records in {run['records']}" if run.get("records")
             else "the shipped records" if run["quick"] else "the records of tuning_logs/")
    if run.get("layout", "auto") != "auto":
        where += (f", both sides' convolutions in {run['layout']} as asked (TVM's ConvertLayout "
                  "on the original and on PET's candidates)")
    else:
        where += (", both sides' convolutions in the layout (NCHW or NHWC) that timed faster "
                  "on the tuned original (optimize --layout auto)")
    if run.get("fast_math"):
        where += (", both sides lowered with TVM's FastMathTransform (fast erf, exp, tanh and "
                  "softmax)")
    if run.get("winograd"):
        where += (", PET's search offering 3×3 convolutions by Winograd's F(4×4, 3×3) (TVM's "
                  "side: the direct form, all its CPU lowering has)")
    if run.get("im2col"):
        where += (", PET's search offering 2-D and 3-D convolutions as one matrix product "
                  "over their windows (TVM's side: the direct form)")
    if run.get("promising", 4) != 4:
        where += f", PET tuning up to {run['promising']} mutants of each kind (--promising)"
    if not run["trials"]:
        return (f"trials per task: TVM and PET+TVM build with {where}, no new tuning"
                + (f" ({SHIPPED_TRIALS} trials per task)" if run["quick"] else
                   " (untuned kernels except where records exist)"))
    seed = f" with seed {run['seed']}" if run.get("seed") else ""
    return (f"trials per task: TVM and PET+TVM build with {where}, every task tuned to "
            f"{run['trials']} trials{seed} (the original's and PET's tuned mutants' alike, "
            f"records reused where they exist){again}")


def _machine(target: str) -> str:
    """This machine as the target sees it (its records key: CPU level and cores)."""
    from tvm_pet.tune.targets import resolve_target, target_dir
    return f"{target_dir(resolve_target(target))}, {os.cpu_count()} logical CPUs"


def markdown(rows: list[dict], result: dict) -> str:
    lines = ["| model | batch | kept | layout | TVM default ms | TVM best ms | PET + TVM best ms | "
             "onnxruntime ms | best / default | PET / TVM best | PET / onnxruntime | "
             "% of peak (default, best, PET, ort) | search s | tuning s | max abs err "
             "(orig / ort) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | failed: {r['error'][:80]} |"
                         + " |" * 12)
            continue
        t = r["times_ms"]
        cell = {k: (f"{t[k]['median']:.2f} [{t[k]['min']:.2f}–{t[k]['max']:.2f}]"
                    if k in t else "–") for k in CONTENDERS}
        best = r.get("speedup_tvm_best_vs_default")
        lines.append(
            f"| {r['model']} | {r['batch']} | {kept(r)} | {layout_cell(r)} "
            f"| {cell['tvm_default']} | {cell['tvm']} "
            f"| {cell['pet']} | {cell['onnxruntime']} | "
            f"{'–' if best is None else f'×{best:.3f}'} | {pet_vs_tvm(r)} "
            f"| ×{r['speedup_pet_vs_onnxruntime']:.3f} | {peak_cell(r)} "
            f"| {r['search_time_s']:.1f} | {r['tuning_time_s']:.1f} "
            f"| {r['max_abs_err']:.1e} / {r['max_abs_err_vs_onnxruntime']:.1e} |")
    geo = result["table3_geomean_pet_vs_tvm"]
    lines += ["", f"Target {result['target']}; budget held equal: {result['budget_held_equal']}; "
              f"{result['timing']}. Times are median [min–max]."]
    lines += [f"Kept or not: {result['decision']}."] if result.get("decision") else []
    lines += [f"Peak: {result['peak']}; a share is the row's linear FLOPs (convolutions and "
              "products) over its median time."] if result.get("peak") else []
    # where rows were rerun into this run (--update), the budget line above is the first run's
    # (its records folder, say); what each later run changed is its note
    lines += [f"Run notes: {result['run']['note']}"] if result.get("run", {}).get("note") else []
    spread = [r for r in rows if r.get("speedup_pet_vs_tvm_by_process")]
    lines += ["", "PET / TVM in each timing process:"] if spread else []
    lines += [f"- {r['model']} (batch {r['batch']}): "
              + ", ".join(f"×{x:.3f}" for x in r["speedup_pet_vs_tvm_by_process"])
              for r in spread]
    watched = [r for r in rows if r.get("cpu_others_share") is not None]
    lines += ["", "The share of the CPU other processes used while each row was timed "
              "(`/proc/stat`; over 20 % the row's times may be the machine's): "
              + ", ".join(f"{r['model']} {r['cpu_others_share']:.1%}" for r in watched)
              ] if watched else []
    reported = [r for r in rows if "error" not in r and r.get("records_plan")]
    lines += ["", "What each row's kernels stood on (measured, not assumed):"] if reported else []
    for r in reported:
        lines.append(f"- {r['model']} (batch {r['batch']}): {r['records_plan']}; "
                     f"{r.get('kernels') or ''}")
    lines += aims_lines(rows)
    if result.get("models_geomean_pet_vs_tvm") is not None:
        lines.append(f"Geo-mean PET / TVM over the five whole models ({', '.join(WHOLE)}): "
                     f"×{result['models_geomean_pet_vs_tvm']:.3f} (×1 where the original was "
                     f"kept).")
    if geo is not None:
        lines.append(f"Table-3 geo-mean PET / TVM: ×{geo:.3f} (×1 where the original was kept; "
                     f"geo-mean of the measured ratios ×{result['table3_geomean_measured_ratios']:.3f}).")
    return "\n".join(lines) + "\n"


def layout_cell(row: dict) -> str:
    """The layout both sides were built in, with NCHW's time over NHWC's where both were timed
    (``optimize --layout auto``)."""
    choice = row.get("layout_choice") or {}
    ratio = choice.get("nchw_over_nhwc")
    return row.get("layout", "NCHW") + ("" if ratio is None else f" (NCHW/NHWC ×{ratio:.2f})")


def aims_lines(rows: list[dict]) -> list[str]:
    """The best build's aims over the five whole models at batch 1, as measured: TVM best over
    TVM default (geo-mean, aim ×1.3), PET + TVM best over onnxruntime (each within ×1.3, ahead
    on one), PET + TVM best over TVM best (geo-mean, aim ×1.05)."""
    whole = [r for r in rows if "error" not in r and r["model"] in WHOLE and r["batch"] == 1]
    if not whole:
        return []
    names = ", ".join(r["model"] for r in whole)
    of_five = "" if len(whole) == len(WHOLE) else f" (only {len(whole)} of the five: {names})"
    best = [r["speedup_tvm_best_vs_default"] for r in whole
            if r.get("speedup_tvm_best_vs_default")]
    ort = {r["model"]: r["speedup_pet_vs_onnxruntime"] for r in whole}
    pet = [counted_speedup(r) for r in whole]
    lines = ["", f"Aims of the best build, measured{of_five}:"]
    if best:
        lines.append(f"- TVM best / TVM default, geo-mean ×{geomean(best):.3f} (aim ≥ ×1.3: "
                     f"{_verdict(geomean(best) >= 1.3)})")
    within = all(x >= 1 / 1.3 for x in ort.values())
    ahead = [m for m, x in ort.items() if x > 1]
    lines.append("- PET + TVM best / onnxruntime: " + ", ".join(
        f"{m} ×{x:.3f}" for m, x in ort.items())
        + f" (aim: each ≥ ×{1 / 1.3:.3f}: {_verdict(within)}; at least one > ×1: "
        f"{_verdict(bool(ahead))})")
    lines.append(f"- PET + TVM best / TVM best, geo-mean ×{geomean(pet):.3f} (aim ≥ ×1.05: "
                 f"{_verdict(geomean(pet) >= 1.05)}; ×1 where the original was kept)")
    return lines


def _verdict(met: bool) -> str:
    return "met" if met else "missed"


def peak_cell(row: dict) -> str:
    """The shares of the machine's peak FLOP/s the row's contenders reach, in percent."""
    shares = row.get("peak_share")
    if not shares:
        return "–"
    return ", ".join(f"{100 * shares[k]:.0f}" if k in shares else "–" for k in CONTENDERS)


def kept(row: dict) -> str:
    """The kept cell, with the ratio of every look when the decision took more than one (a
    close call's second look ``2nd``, a runner-up candidate ``rN``, the kept one's replication
    ``rep``)."""
    looks = row.get("decision_looks", [])
    if len(looks) < 2:
        return row["kept"]

    def label(look: dict) -> str:
        what = look["what"]
        tag = ("2nd " if what.startswith("second look") else
               "rep " if what.startswith("replication") else
               f"r{what.split()[-1]} " if what.startswith("runner-up") else "")
        if look["ratio"] is None:  # refused untimed: its build computed something else
            return f"{tag}refused"
        return f"{tag}×{look['ratio']:.2f}"
    return f"{row['kept']} (looks: {', '.join(label(k) for k in looks)})"


def counted_speedup(row: dict) -> float:
    """PET / TVM as the geo-means count it: ×1 where PET kept the original (both sides then run
    the same binary, and their measured ratio is noise)."""
    return row["speedup_pet_vs_tvm"] if row["kept"] == "optimized" else 1.0


def pet_vs_tvm(row: dict) -> str:
    """The PET / TVM cell: when PET kept the original, both columns run the same binary (loaded
    twice), so their measured ratio is this run's noise floor, not a speed-up."""
    ratio = f"×{row['speedup_pet_vs_tvm']:.3f}"
    return ratio if row["kept"] == "optimized" else f"×1 (same binary; measured {ratio}: noise)"


def plot(rows: list[dict], path: pathlib.Path) -> None:
    """A bar chart of PET+TVM's speed-up over TVM and over onnxruntime, with min–max whiskers."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)", file=sys.stderr)
        return
    labels = [f"{r['model']}\nb={r['batch']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows)), 4))
    width = 0.38
    for k, (other, colour) in enumerate((("tvm", "tab:blue"), ("onnxruntime", "tab:orange"))):
        med = [r["times_ms"][other]["median"] / r["times_ms"]["pet"]["median"] for r in rows]
        lo = [r["times_ms"][other]["min"] / r["times_ms"]["pet"]["max"] for r in rows]
        hi = [r["times_ms"][other]["max"] / r["times_ms"]["pet"]["min"] for r in rows]
        xs = [i + (k - 0.5) * width for i in range(len(rows))]
        ax.bar(xs, med, width, color=colour, label=f"PET+TVM vs {other}",
               yerr=[[m - a for m, a in zip(med, lo)], [b - m for m, b in zip(med, hi)]],
               capsize=3)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("speed-up (median; whiskers: worst/best pairing)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    from tvm_pet.pipeline.options import LAYOUT_CHOICES
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{', '.join(QUICK)} at batch 1 with the shipped records")
    parser.add_argument("--models", help="comma-separated names (default: the paper's five)")
    parser.add_argument("--batch", default="1", help="comma-separated batch sizes")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--trials", type=int, default=0,
                        help="new tuning trials per task before optimizing (default 0: use the "
                             "records as they are; --quick uses the shipped ones)")
    parser.add_argument("--rounds", type=int, default=9,
                        help="interleaved timing rounds (a multiple of 3: each order equally)")
    parser.add_argument("--number", type=int, default=5, help="calls per timing sample")
    parser.add_argument("--decision-rounds", type=int, default=5,
                        help="rounds of optimize's own keep-or-not timing")
    parser.add_argument("--search-limit", type=float, default=600.0, help="seconds per search")
    parser.add_argument("--records", help="tuning records folder for both sides (default: "
                        "tuning_logs/<target>; a copy, for a budget sweep)")
    parser.add_argument("--second-look", choices=("auto", "on", "off"), default="auto",
                        help="tune a close call again on both sides at twice the trials per task "
                             "(auto: for the graphs, not for the five whole models)")
    parser.add_argument("--seed", type=int, default=0,
                        help="the tuning seed of both sides (default 0): several seeds give "
                             "several independent tunings of one model on fresh records")
    parser.add_argument("--layout", choices=LAYOUT_CHOICES, default="auto",
                        help="the convolutions' layout on both sides (optimize --layout; auto: "
                             "the faster on the tuned original)")
    parser.add_argument("--fast-math", action="store_true",
                        help="TVM's FastMathTransform on both sides (optimize --fast-math)")
    parser.add_argument("--winograd", action="store_true",
                        help="PET's search offers Winograd's F(4x4, 3x3) (optimize --winograd)")
    parser.add_argument("--promising", type=int, default=4, metavar="N",
                        help="mutants of the whole model tuned (optimize --promising; default 4)")
    parser.add_argument("--im2col", action="store_true",
                        help="PET's search offers convolutions as a product over their windows "
                             "(optimize --im2col)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--render", metavar="JSON",
                        help="only rewrite the .md and .png of an earlier run's JSON")
    parser.add_argument("--update", metavar="JSON",
                        help="put this run's rows into an earlier run's JSON (replacing those of "
                             "the same model and batch) and render it again, with --note")
    parser.add_argument("--note", help="with --update: what differed in this run, appended to "
                                       "the JSON's run note")
    parser.add_argument("--timing-processes", type=int, default=3, metavar="N",
                        help="spread each row's timing rounds, and optimize's own looks, over N "
                             "fresh processes (default 3; 1: the optimizing process times them)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--time-folder", help=argparse.SUPPRESS)
    parser.add_argument("--time-which", default="all", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.time_folder:
        from tvm_pet.tune.threads import size_thread_pool
        size_thread_pool()  # as the optimizing child sized it, before TVM starts its pool
        print(json.dumps(time_contenders(args.time_folder, args.target, args.rounds,
                                         args.number, args.time_which)), flush=True)
        return 0
    if args.one:
        print(json.dumps(_child(args)), flush=True)
        return 0
    if args.render:
        earlier = json.loads(pathlib.Path(args.render).read_text())
        path = write_results(earlier["rows"], earlier["run"], pathlib.Path(args.render).parent,
                             machine=earlier)
        print(path.with_suffix(".md").read_text())
        return 0
    names = args.models.split(",") if args.models else (QUICK if args.quick else PAPER)
    batches = [int(b) for b in args.batch.split(",")]
    run = {"target": args.target, "quick": args.quick, "trials": args.trials,
           "rounds": args.rounds, "number": args.number, "records": args.records,
           "decision_rounds": args.decision_rounds, "timing_processes": args.timing_processes,
           "seed": args.seed, "layout": args.layout, "fast_math": args.fast_math,
           "winograd": args.winograd, "im2col": args.im2col, "promising": args.promising,
           "onnxruntime_apart": timing_processes(args) > 1}
    # with --update the rows join the run of record at the end; the files written after each row
    # (kept if a later one fails) go to a scratch folder, not over that run (its other rows)
    out = pathlib.Path(tempfile.mkdtemp(prefix="run-")) if args.update else pathlib.Path(args.out)
    rows = []
    for name in names:
        for batch in batches:
            row = _run_child(name, batch, args)
            rows.append(row)
            path = write_results(rows, run, out)  # kept if a later one fails
            if "error" in row:
                print(f"{name} b={batch}: FAILED {row['error']}", flush=True)
            else:
                print(f"{name} b={batch}: kept {row['kept']}, PET/TVM "
                      f"×{row['speedup_pet_vs_tvm']:.3f}, PET/onnxruntime "
                      f"×{row['speedup_pet_vs_onnxruntime']:.3f} ({row['wall_s']:.0f} s)",
                      flush=True)
    if args.update:
        path = update(pathlib.Path(args.update), rows, args.note)
    print(path.with_suffix(".md").read_text())
    print(f"wrote {path}, .md and .png")
    return 0 if all("error" not in r for r in rows) else 1


def replace_rows(earlier: list[dict], rows: list[dict], key: tuple[str, ...]) -> list[dict]:
    """``earlier`` with each row that has the same ``key`` fields as one of ``rows`` replaced by
    it, in place, and the other ``rows`` at the end.

    >>> replace_rows([{"m": "a", "v": 1}, {"m": "b", "v": 2}], [{"m": "c", "v": 3},
    ...              {"m": "a", "v": 4}], ("m",))
    [{'m': 'a', 'v': 4}, {'m': 'b', 'v': 2}, {'m': 'c', 'v': 3}]
    """
    fresh = {tuple(r[k] for k in key): r for r in rows}
    merged = [fresh.pop(tuple(r[k] for k in key), r) for r in earlier]
    return merged + list(fresh.values())


def update(path: pathlib.Path, rows: list[dict], note: str | None) -> pathlib.Path:
    """Put ``rows`` into the run of record at ``path`` in place of its rows of the same model and
    batch (new ones at the end), append ``note`` to its run note, and render it again."""
    earlier = json.loads(path.read_text())
    merged = replace_rows(earlier["rows"], rows, ("model", "batch"))
    run = dict(earlier["run"])
    if note:
        run["note"] = " ".join(filter(None, (run.get("note"), note)))
    return write_results(merged, run, path.parent, machine=earlier)


if __name__ == "__main__":
    sys.exit(main())
