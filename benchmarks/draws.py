"""Independent tunings: PET / TVM of one model over several tuning seeds, each on fresh records.

    python benchmarks/draws.py --models resnet18 --seeds 1,2 --trials 32   # tune and time draws
    python benchmarks/draws.py --models csrnet_backend --seeds 3 --layout NHWC   # both in NHWC
    python benchmarks/draws.py --render                                    # the table again

At 32 trials per task on this CPU a kernel's tuned time moves up to ×2 from one tuning seed to
the next (``results/conv_forms.md``), more than the rewrites PET finds change it. One tuning
is one draw; this script makes several. Each draw is one ``benchmarks/run.py --models M
--trials N --seed S --records <work>/<M>-s<S>`` run: an empty records folder, every kernel of
both sides (the original's and PET's screened mutants) tuned at N trials per task with seed S,
then timed as the benchmarks of record are. Its files go to ``results/draws/<M>-s<S>/``
(``<M>-nhwc-s<S>/`` with ``--layout NHWC``: both sides' convolutions in NHWC).

The render step collects every ``results/draws/*/llvm.json`` and ``llvm-nhwc.json`` (and the
earlier fresh draws named in ``EARLIER``) into ``draws.json`` and ``draws.md``: per model and
layout, each draw's TVM time, what PET kept and PET / TVM (×1 where the original was kept, as
the benchmarks of record count it), and the geo-mean over the draws, the fair reading of one
model's gain at that budget.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.run import counted_speedup, geomean  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
#: Fresh draws made before this script (seed 0, empty records, 32 trials per task), by the
#: results file that holds them (relative to ``RESULTS``).
EARLIER = ("fresh-records-32/llvm.json", "fresh-records-32/llvm-quick.json",
           "fresh-records-32-table3/llvm-quick.json", "fresh-draws-backend/draw2/llvm.json",
           "fresh-draws-backend/draw3/llvm.json",
           # the NHWC benchmarks of record: every NHWC kernel tuned once, at seed 0
           "llvm-nhwc.json")


def stem(model: str, layout: str) -> str:
    """How a model's draws in a layout are named: ``<model>`` in NCHW, ``<model>-nhwc``."""
    return model if layout == "NCHW" else f"{model}-{layout.lower()}"


def run_draw(model: str, seed: int, trials: int, work: pathlib.Path, target: str,
             layout: str = "NCHW") -> int:
    """Tune ``model`` afresh at ``trials`` per task with ``seed`` (both sides in ``layout``) and
    time it; run.py's status."""
    name = f"{stem(model, layout)}-s{seed}"
    records = work / name
    if records.exists() and any(records.iterdir()):
        print(f"{records} is not empty: a draw starts from no records", file=sys.stderr)
        return 2
    records.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--models", model, "--target",
           target, "--trials", str(trials), "--seed", str(seed), "--records", str(records),
           "--layout", layout, "--out", str(RESULTS / "draws" / name)]
    print(" ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=ROOT)


def collect(results: pathlib.Path = RESULTS) -> list[dict]:
    """Every fresh draw's rows at batch 1, with where they come from and their budget."""
    paths = [results / p for p in EARLIER] + [  # <model>-s<S>, <model>-nhwc-s<S>: not the
        path for name in ("llvm.json", "llvm-nhwc.json")  # folders of other PET variants
        for path in sorted(results.glob(f"draws/*/{name}"))
        if re.fullmatch(r"[a-z0-9_]+(-nhwc)?-s\d+", path.parent.name)]
    draws = []
    for path in paths:
        if not path.exists():
            continue
        result = json.loads(path.read_text())
        for row in result["rows"]:
            if "error" in row or row["batch"] != 1:
                continue
            draws.append({"model": row["model"], "source": str(path.relative_to(results)),
                          "layout": result["run"].get("layout") or "NCHW",
                          "trials": result["run"]["trials"],
                          "seed": result["run"].get("seed", 0), "kept": row["kept"],
                          "applied": row.get("applied", []),
                          "tvm_ms": row["times_ms"]["tvm"]["median"],
                          "pet_ms": row["times_ms"]["pet"]["median"],
                          "measured_ratio": row["speedup_pet_vs_tvm"],
                          "pet_vs_tvm": counted_speedup(row)})
    return draws


def render(draws: list[dict], results: pathlib.Path = RESULTS) -> str:
    """Write ``draws.json`` and ``draws.md`` into ``results``; returns the Markdown."""
    lines = ["| model | layout | trials/task | seed | TVM ms | PET / TVM | kept | from |",
             "|---|---|---|---|---|---|---|---|"]
    models: dict[tuple[str, str, int], list[dict]] = {}
    for d in draws:
        models.setdefault((d["model"], d["layout"], d["trials"]), []).append(d)
    summary = {}
    for (model, layout, trials), rows in models.items():
        for d in rows:
            n = len(d["applied"])
            kept = (f"{n} rewrite{'s' * (n != 1)} ({', '.join(sorted(set(d['applied'])))})"
                    if d["kept"] == "optimized" else
                    f"original (measured ×{d['measured_ratio']:.3f}: noise)")
            lines.append(f"| {model} | {layout} | {trials} | {d['seed']} | {d['tvm_ms']:.1f} | "
                         f"×{d['pet_vs_tvm']:.3f} | {kept} | `{d['source']}` |")
        ratios = [d["pet_vs_tvm"] for d in rows]
        tvm = [d["tvm_ms"] for d in rows]
        summary[f"{stem(model, layout)}@{trials}"] = {
            "draws": len(rows), "geomean": geomean(ratios), "min": min(ratios),
            "max": max(ratios), "tvm_ms_min": min(tvm), "tvm_ms_max": max(tvm)}
        if len(rows) < 2:
            continue
        lines.append(f"| **{model}** | {layout} | {trials} | {len(rows)} draws | {min(tvm):.1f}–"
                     f"{max(tvm):.1f} | **×{geomean(ratios):.3f}** (×{min(ratios):.2f}–"
                     f"×{max(ratios):.2f}) | geo-mean over the draws | |")
    lines += ["", "Each draw: an empty records folder, every kernel of both sides tuned at the "
              "stated trials per task with the stated seed (draws of seed 0 differ by the "
              "tuner's measurement noise only), TVM with its own rewrites on both sides, then "
              "timed as benchmarks/run.py (interleaved rounds in fresh processes, medians). ×1 "
              "where PET kept the original: both columns then run the same binary. NHWC: both "
              "sides' convolutions in NHWC (TVM's ConvertLayout, `run.py --layout NHWC`); its "
              "seed-0 rows are the NHWC benchmarks of record (`llvm-nhwc.json`), where every "
              "NHWC kernel was tuned once at seed 0."]
    (results / "draws.json").write_text(json.dumps({"draws": draws, "summary": summary},
                                                   indent=2) + "\n")
    text = "\n".join(lines) + "\n"
    (results / "draws.md").write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18", help="comma-separated models")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated tuning seeds")
    parser.add_argument("--trials", type=int, default=32, help="trials per task (default 32)")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--layout", default="NCHW", choices=("NCHW", "NHWC"),
                        help="both sides' convolutions' layout (run.py --layout)")
    parser.add_argument("--work", default=str(pathlib.Path.home() / ".cache" / "tvm_pet" /
                                              "draws"),
                        help="where each draw's records folder is kept (outside the repository)")
    parser.add_argument("--render", action="store_true", help="only render earlier draws")
    args = parser.parse_args()
    status = 0
    if not args.render:
        for model in args.models.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                status |= run_draw(model, seed, args.trials, pathlib.Path(args.work),
                                   args.target, args.layout)
    print(render(collect()))
    return status


if __name__ == "__main__":
    sys.exit(main())
