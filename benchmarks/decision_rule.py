"""How often does optimize's keep-or-not rule keep a change that is not there, and how often
does it keep a real candidate?

    python benchmarks/decision_rule.py                 # the --quick graphs, 20 decisions each
    python benchmarks/decision_rule.py --models csrnet_backend --reps 40
    python benchmarks/decision_rule.py --models resnet18 --reps 30 --name decision_rule_resnet18
    python benchmarks/decision_rule.py --models csrnet_backend --records DIR --reps 10

For each model (built from code, seeded, loaded as ``optimize`` loads it: TVM's frontend and
rewrites) PET's search runs with the measured cost and the shipped records (``--records``: another
folder). Then, ``--reps`` times, optimize's confirmation timing (the TVM toolchain's ``time``,
:func:`tvm_pet.tune.timing.time_interleaved`, with ``DriverOptions``' rounds, number and repeat)
is taken twice, its rounds spread over ``--timing-processes`` fresh processes as optimize
spreads them (2 by default; :mod:`tvm_pet.tune.process_timing`), each process's ratio kept:

- **A/A**: the baseline against a second, separate build of the baseline. Any "keep" here is a
  false one: the rule's false-positive rate on this machine.
- **A/B**: the baseline against PET's candidate (when the search changed the model).

Each timing is judged by the rule ``optimize`` uses (:func:`tvm_pet.pipeline.confirm.decide`: the
ratio of medians above 1.05 and a one-sided Mann-Whitney test at p < 0.01; p < 0.01 / 3 where a
whole model's three candidates share that level) and by the rule used before it (the ratio of
medians above 1 + the larger relative interquartile range, at least 0.05), on the same samples.
A whole model's keep needs two looks (``optimize``'s replication, "How it works" step 6): a first
look at p < 0.01 / 3, then the same two binaries timed again, in fresh processes, at p < 0.01.
Decisions 2k and 2k + 1 are read as such a pair: the "kept, then kept by its replication" column.
Results go to ``benchmarks/results/<name>.{json,md}`` (``--name``, default ``decision_rule``);
nothing here fails on timing.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUICK = ["conv5x5", "dilated_conv", "two_1x1_convs", "three_matmuls", "csrnet_backend"]


def iqr_rule(timings: dict) -> bool:
    """The rule optimize used before: the ratio of medians above 1 + the larger relative
    interquartile range of the two sample sets, and at least 1.05."""
    from tvm_pet.pipeline.confirm import relative_iqr
    base, opt = timings["baseline"], timings["optimized"]
    noise = max(relative_iqr(base), relative_iqr(opt), 0.05)
    return base.median / opt.median > 1 + noise


def measure_model(name: str, reps: int, records: str | None = None,
                  timing_processes: int = 2) -> dict:
    import numpy as np

    from tvm_pet.models import build_model
    from tvm_pet.pipeline import DriverOptions, tvm_toolchain
    from tvm_pet.pipeline.confirm import ALPHA, decide, process_ratios
    from tvm_pet.pipeline.load import load
    from tvm_pet.search.config import SearchConfig
    from tvm_pet.search.optimizer import optimize

    # loaded as optimize loads it (TVM's frontend and rewrites), so that its kernels are the
    # ones the shipped records were tuned for
    loaded = load(build_model(name, batch=1))
    # the shipped records unless --records; each timing spread over fresh processes as
    # optimize spreads its looks (DriverOptions.timing_processes)
    toolchain = tvm_toolchain("llvm", records,
                              timing_processes=timing_processes).with_lowering(loaded.lower)
    program = loaded.program
    result = optimize(program, SearchConfig(depth=3, rounds=1, time_limit=600),
                      toolchain.cost_model())
    executables = {"baseline": toolchain.build(toolchain.lower(program)),
                   "baseline_again": toolchain.build(toolchain.lower(program))}
    if result.applied:
        executables["candidate"] = toolchain.build(toolchain.lower(result.program))
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(t.shape).astype(np.float32) for t in program.inputs]
    options = DriverOptions()
    trials = {"aa": [], "ab": []}
    for _ in range(reps):
        for kind, other in (("aa", "baseline_again"), ("ab", "candidate")):
            if other not in executables:
                continue
            t = toolchain.time({"baseline": executables["baseline"],
                                "optimized": executables[other]}, inputs,
                               rounds=options.timing_rounds, number=options.timing_number,
                               repeat=options.timing_repeat)
            look = decide(t)
            trials[kind].append({"ratio": look.ratio, "p_value": look.p_value,
                                 "ratios_by_process": list(process_ratios(t["baseline"],
                                                                          t["optimized"])),
                                 "noise": look.noise, "keep_rank_rule": look.keep,
                                 # a whole model's level: 3 candidates share ALPHA
                                 "keep_rank_rule_3": decide(t, ALPHA / 3).keep,
                                 "keep_iqr_rule": iqr_rule(t)})
    return {"model": name, "candidate": [" -> ".join(a.mutant_ops) for a in result.applied],
            "reps": reps, **trials}


def summarise(row: dict, kind: str) -> dict | None:
    runs = row[kind]
    if not runs:
        return None
    ratios = [r["ratio"] for r in runs]
    # optimize's keep on a whole model: a first look at p < ALPHA / 3, then its replication (the
    # same two binaries timed again in fresh processes) at p < ALPHA; here the decisions 2k, 2k+1
    firsts, replications = runs[0::2], runs[1::2]
    return {"decisions": len(runs), "pairs": len(replications),
            "kept_replicated": sum(a.get("keep_rank_rule_3", False) and b["keep_rank_rule"]
                                   for a, b in zip(firsts, replications)),
            "kept_rank_rule": sum(r["keep_rank_rule"] for r in runs),
            "kept_rank_rule_3": sum(r.get("keep_rank_rule_3", False) for r in runs),
            "kept_iqr_rule": sum(r["keep_iqr_rule"] for r in runs),
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "spread_median": statistics.median(r["noise"] for r in runs)}


def markdown(rows: list[dict]) -> str:
    lines = ["| model | timing | decisions | kept (rank rule) | kept (rank rule, p < 0.01 / 3) "
             "| kept, then kept by its replication (pairs) "
             "| kept (IQR rule) | ratio of medians median [min–max] | median relative IQR |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for kind, label in (("aa", "A/A: baseline vs baseline"),
                            ("ab", "A/B: baseline vs candidate")):
            s = summarise(row, kind)
            if s is None:
                lines.append(f"| {row['model']} | {label} | no candidate | | | | | | |")
                continue
            lines.append(f"| {row['model']} | {label} | {s['decisions']} | {s['kept_rank_rule']} "
                         f"| {s['kept_rank_rule_3']} "
                         f"| {s['kept_replicated']} of {s['pairs']} | {s['kept_iqr_rule']} "
                         f"| ×{s['ratio_median']:.3f} "
                         f"[{s['ratio_min']:.3f}–{s['ratio_max']:.3f}] "
                         f"| {s['spread_median']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(QUICK))
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--name", default="decision_rule", help="results file stem")
    parser.add_argument("--records", help="records folder (default: the shipped records)")
    parser.add_argument("--timing-processes", type=int, default=2, metavar="N",
                        help="fresh processes each timing is spread over, as optimize's looks "
                             "(default 2; 1: this process)")
    args = parser.parse_args()
    rows = []
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.models.split(","):
        start = time.perf_counter()
        rows.append(measure_model(name, args.reps, args.records, args.timing_processes))
        rows[-1] |= {"records": args.records or "shipped",
                     "timing_processes": args.timing_processes}
        rows[-1]["wall_s"] = time.perf_counter() - start
        summary = {"machine": "2-core x86-64 (AVX-512), no GPU", "target": "llvm",
                   "rows": [{**r, "aa_summary": summarise(r, "aa"),
                             "ab_summary": summarise(r, "ab")} for r in rows]}
        (out / f"{args.name}.json").write_text(json.dumps(summary, indent=2) + "\n")
        (out / f"{args.name}.md").write_text(markdown(rows))
        print(f"{name}: {rows[-1]['wall_s']:.0f} s", flush=True)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
