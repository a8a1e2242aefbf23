"""PET against plain TVM on the Table-3 operator models and the CSRNet back end (issue 4).

    python benchmarks/optimize_bench.py [--trials 32] [--models dilated_conv,...] [--target llvm]

For each model, built from code with seeded weights, it runs ``tvm-pet optimize`` with the
measured cost and the shipped tuning records (``--trials`` per task, the budget the records
were made with: zero new trials when they are complete). The optimized and baseline modules are
built by the same pipeline with the same records and timed interleaved; the report of each run
is kept, and a summary goes to ``benchmarks/results/optimize_<target>.json`` and ``.md``. Nothing
here fails on timing.
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402

from tvm_pet.models import build  # noqa: E402
from tvm_pet.relax.driver import DriverOptions, optimize_model  # noqa: E402
from tvm_pet.search.config import SearchConfig  # noqa: E402

MODELS = ["conv5x5", "dilated_conv", "two_1x1_convs", "three_matmuls", "csrnet_backend"]
TABLE3 = MODELS[:4]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path = pathlib.Path(tmp) / f"{name}.onnx"
            onnx.save(build(name), path)
            report = optimize_model(path, pathlib.Path(tmp) / name,
                                    SearchConfig(depth=3, rounds=args.rounds, time_limit=900),
                                    DriverOptions(target=args.target, trials=args.trials,
                                                  timing_rounds=7))
            t = report["timings"]
            row = {"model": name, "kept": report["kept"], "speedup": report["speedup"],
                   "candidate_ratio": report["measured_speedup_of_candidate"],
                   "baseline_ms": [1e3 * t["baseline"][k] for k in ("median", "min", "max")],
                   "candidate_ms": [1e3 * t["optimized"][k] for k in ("median", "min", "max")],
                   "max_abs_err": report["max_abs_err"],
                   "max_abs_err_vs_onnxruntime": report["max_abs_err_vs_onnxruntime"],
                   "search_time_s": report["search_time_s"], "new_trials": report["new_trials"],
                   "applied": report["applied"], "decision_rule": report["decision_rule"]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    geo = math.exp(sum(math.log(r["speedup"]) for r in rows if r["model"] in TABLE3)
                   / max(1, sum(r["model"] in TABLE3 for r in rows)))
    out = pathlib.Path("benchmarks/results") / f"optimize_{args.target}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {"target": args.target, "trials_per_task": args.trials,
               "budget_held_equal": "trials per task (the same records for both sides)",
               "table3_geomean_speedup": geo, "rows": rows}
    out.write_text(json.dumps(summary, indent=2) + "\n")
    lines = ["| model | kept | speed-up | candidate / baseline (median) | baseline ms (median [min–max]) "
             "| candidate ms | max abs err vs original / onnxruntime |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        b, c = r["baseline_ms"], r["candidate_ms"]
        lines.append(f"| {r['model']} | {r['kept']} | {r['speedup']:.3f} | {r['candidate_ratio']:.3f} "
                     f"| {b[0]:.2f} [{b[1]:.2f}–{b[2]:.2f}] | {c[0]:.2f} [{c[1]:.2f}–{c[2]:.2f}] "
                     f"| {r['max_abs_err']:.1e} / {r['max_abs_err_vs_onnxruntime']:.1e} |")
    out.with_suffix(".md").write_text("\n".join(lines) + f"\n\nTable-3 geo-mean speed-up: "
                                      f"{geo:.3f}\n")
    print("\n".join(lines))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
