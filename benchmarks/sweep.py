"""The budget sweep: PET / TVM on the Table-3 graphs and the CSRNet back end as both sides are
tuned longer (32, 128 and 512 trials per task, equal for both).

    python benchmarks/sweep.py --trials 32,128,512            # run every budget, then render
    python benchmarks/sweep.py --trials 512 --models conv5x5,three_matmuls
    python benchmarks/sweep.py --render                       # the table from earlier runs

Each budget is one ``benchmarks/run.py --quick --trials N --second-look off`` run into
``benchmarks/results/sweep-<N>/``, on its own records folder ``<work>/<N>`` (outside the
repository: records at 512 trials per task would not fit its size limit). A budget's folder
starts as a copy of the next smaller budget's, so a task tuned to 128 trials goes on to 512
rather than starting again (the original's kernels and PET's tuned mutants alike; a kernel whose
search ran out of candidates is not searched again); the smallest starts empty (the shipped
records hold some tasks at 64 trials, from second looks). The second look is off, so that every
row of a column has exactly its budget. Graphs run at a budget that has rows already join them
(``run.py --update``, which writes its per-row files to a scratch folder). The render step
collects every ``sweep-<N>/llvm-quick.json`` into ``sweep.json`` and ``sweep.md``: per graph and
budget, what PET kept, TVM's time and PET / TVM (×1 where the original was kept), and the
geo-mean over the graphs each budget measured.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.run import QUICK, counted_speedup, geomean  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def run_budget(trials: int, models: list[str], work: pathlib.Path, target: str) -> int:
    """Tune and time ``models`` at ``trials`` per task on ``work/<trials>`` (seeded from the next
    smaller budget's folder, if any); returns run.py's exit status."""
    from tvm_pet.tune.targets import resolve_target, target_dir
    key = target_dir(resolve_target(target))
    folder = work / str(trials)
    if not (folder / key).exists():
        smaller = sorted((int(p.name) for p in work.glob("[0-9]*") if int(p.name) < trials),
                         reverse=True)
        seed = (work / str(smaller[0]) / key) if smaller else None
        if seed is not None and seed.exists():
            shutil.copytree(seed, folder / key, ignore=shutil.ignore_patterns("pending", "logs"))
    out = RESULTS / f"sweep-{trials}"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--models",
           ",".join(models), "--target", target, "--trials", str(trials), "--records",
           str(folder), "--second-look", "off"]
    if (out / "llvm-quick.json").exists():  # rows of other graphs at this budget: kept
        cmd += ["--update", str(out / "llvm-quick.json"), "--note",
                f"{', '.join(models)} run again or added."]
    else:
        cmd += ["--out", str(out)]
    print(" ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=ROOT)


def collect(results: pathlib.Path = RESULTS) -> dict:
    """Every budget's rows, from ``<results>/sweep-<N>/llvm-quick.json``, by budget."""
    budgets = {}
    for path in sorted(results.glob("sweep-*/llvm-quick.json")):
        trials = int(re.fullmatch(r"sweep-(\d+)", path.parent.name).group(1))
        result = json.loads(path.read_text())
        budgets[trials] = {r["model"]: r for r in result["rows"] if "error" not in r}
    return dict(sorted(budgets.items()))


def render(budgets: dict, results: pathlib.Path = RESULTS) -> str:
    """Write ``sweep.json`` and ``sweep.md`` into ``results``; returns the Markdown."""
    graphs = [g for g in QUICK if any(g in rows for rows in budgets.values())]
    head = "| graph | " + " | ".join(f"{n} trials/task: TVM ms · PET / TVM" for n in budgets)
    lines = [head + " |", "|---|" + "---|" * len(budgets)]
    for g in graphs:
        cells = []
        for rows in budgets.values():
            r = rows.get(g)
            cells.append("not run" if r is None else
                         f"{r['times_ms']['tvm']['median']:.2f} · ×{counted_speedup(r):.3f}"
                         + ("" if r["kept"] == "optimized" else " (original kept)"))
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    geo = {n: geomean([counted_speedup(rows[g]) for g in graphs if g in rows])
           for n, rows in budgets.items()}
    lines.append("| geo-mean (graphs measured) | " + " | ".join(
        f"×{geo[n]:.3f} over {sum(g in rows for g in graphs)}" for n, rows in budgets.items())
        + " |")
    # the graphs measured at every budget: the only fair way to follow one gain across budgets
    common = [g for g in graphs if all(g in rows for rows in budgets.values())]
    common_geo = {n: geomean([counted_speedup(rows[g]) for g in common])
                  for n, rows in budgets.items()}
    if common and len(budgets) > 1:
        lines += ["", f"Over the graphs measured at every budget ({', '.join(common)}): "
                  + ", ".join(f"×{v:.3f} at {n}" for n, v in common_geo.items()) + "."]
    lines += ["", "Both sides build with the same records folder at each budget (TVM with its "
              "own rewrites on both sides), no second look; timing as benchmarks/run.py "
              "(interleaved rounds, medians). ×1 where PET kept the original: both columns then "
              "run the same binary."]
    result = {"budgets": {n: {g: {"kept": r["kept"], "tvm_ms": r["times_ms"]["tvm"]["median"],
                                  "pet_ms": r["times_ms"]["pet"]["median"],
                                  "pet_vs_tvm": counted_speedup(r),
                                  "measured_ratio": r["speedup_pet_vs_tvm"],
                                  "applied": r.get("applied"), "new_trials": r.get("new_trials"),
                                  "tuning_time_s": r.get("tuning_time_s")}
                              for g, r in rows.items()} for n, rows in budgets.items()},
              "geomean": geo, "common_graphs": common, "common_geomean": common_geo}
    (results / "sweep.json").write_text(json.dumps(result, indent=2) + "\n")
    text = "\n".join(lines) + "\n"
    (results / "sweep.md").write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", help="comma-separated budgets per task to run, in order")
    parser.add_argument("--models", default=",".join(QUICK), help="comma-separated graphs")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--work", default=str(pathlib.Path.home() / ".cache" / "tvm_pet" /
                                              "sweep"),
                        help="where each budget's records folder is kept")
    parser.add_argument("--render", action="store_true", help="only render earlier runs")
    args = parser.parse_args()
    status = 0
    if args.trials and not args.render:
        for trials in (int(t) for t in args.trials.split(",")):
            status |= run_budget(trials, args.models.split(","), pathlib.Path(args.work),
                                 args.target)
    print(render(collect()))
    return status


if __name__ == "__main__":
    sys.exit(main())
