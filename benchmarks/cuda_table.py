"""The CUDA table of record: TVM against PET + TVM on a GPU, from what the timing runs wrote.

    python benchmarks/cuda_table.py RESULTS_DIR [--commit-summary S.json] [--out NAME]

RESULTS_DIR holds what ``scripts/gpu/on_gpu.sh`` and ``scripts/gpu/torch_eager.py`` wrote on
the GPU machine (their output folder), one file per process: ``run_cuda.py``'s
``cuda-run*.json``, with each model's folder once as built with TVM's default GPU schedules
(``<model>``) and once with the CUDA records (``<model>-tuned``), and ``torch_eager*.json``.
Every ratio compares two builds timed in the same process, interleaved, so rows taken on
another GPU kind are never mixed. Writes
``benchmarks/results/<NAME>.{json,md}`` (NAME: ``cuda-<gpu>``, from the device's name).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.run import geomean  # noqa: E402

#: What the PET paper reports on a V100 (batch 1) that these rows can stand beside. Its
#: per-graph Table-3 ratios are not in this repository's sources; its whole-model CSRNet figure
#: (the back end is CSRNet's dilated part) and its operator-level figure for Ansor are.
PAPER_V100 = {"csrnet_backend": "whole CSRNet ×2.21", "csrnet": "×2.21",
              "bert_encoder": "BERT ×1.40", "inception_v3": "×1.24"}
PAPER_NOTE = ("the paper (V100, batch 1): whole CSRNet ×2.21, BERT ×1.40, Inception-v3 ×1.24; "
              "PET + Ansor over Ansor per operator ×1.21 at 1,024 trials")


def _row(runs: list[dict | None]) -> dict | None:
    """One form of one model over the processes that timed it: the first process's times, the
    ratio as the geo-mean of each process's ratio, and what each process kept."""
    runs = [r for r in runs if r is not None]
    if not runs:
        return None
    chosen = [r["measured_choice"] for r in runs]
    first = runs[0]
    kept = chosen[0]["kept"]
    timed = [v for v in first["variants"] if v["median_ms"] is not None]
    return {"tvm_ms": chosen[0]["tvm_ms"], "pet_ms": chosen[0]["pet_ms"],
            "ratio": geomean([c["speedup_pet_vs_tvm"] for c in chosen]),
            "ratios_by_process": [c["speedup_pet_vs_tvm"] for c in chosen],
            "kept": kept, "kept_by_process": [c["kept"] for c in chosen],
            "kept_mutant": next((" → ".join(v["mutant"]) for v in first["variants"]
                                 if v["name"] == kept and v["mutant"]), ""),
            "builds_timed": len(timed), "builds_refused": len(first["variants"]) - len(timed)}


def _tried(part: dict | None) -> bool:
    """Whether PET had a build beside the original there (a whole model's default-schedule
    folder may hold the original alone: its mutants were not built end to end)."""
    return part is not None and part["builds_timed"] > 1


def table(runs: list[dict], eagers: list[dict], batch: dict | None) -> dict:
    """One row per model: default schedules and tuned, each TVM vs PET + TVM, over the runs
    (processes) given; PyTorch eager's median over its runs."""
    folders = [{r["folder"]: r for r in run["rows"]} for run in runs]
    order = list(folders[0])
    models = sorted({f.removesuffix("-tuned") for f in order},
                    key=lambda m: order.index(m) if m in order else len(order))
    rows = []
    for model in models:
        eager = [e["rows"][model]["median_ms"] for e in eagers if model in e.get("rows", {})]
        rows.append({"model": model,
                     "default": _row([f.get(model) for f in folders]),
                     "tuned": _row([f.get(f"{model}-tuned") for f in folders]),
                     "torch_eager_ms": statistics.median(eager) if eager else None,
                     "paper_v100": PAPER_V100.get(model, "")})
    tried = {form: [r[form]["ratio"] for r in rows if _tried(r[form])]
             for form in ("default", "tuned")}
    summary = {form: geomean(v) if v else None  # None: PET was tried on no row in that form
               for form, v in tried.items()}
    return {"device": runs[0]["device"], "compute_version": runs[0].get("compute_version"),
            "processes": len(runs), "timing": runs[0]["timing"],
            "rule": "PET's build: lowest median over the first half of the rounds, kept when it "
            "beats the original there and over the second half; ratios from the second half, "
            "geo-mean over the processes", "batch": batch, "rows": rows,
            "geo_mean_pet_over_tvm": summary, "paper": PAPER_NOTE,
            "torch_eager": {k: v for k, v in (eagers[0] if eagers else {}).items()
                            if k != "rows"}}


def markdown(data: dict) -> str:
    def cell(part: dict | None, key: str, fmt: str) -> str:
        if part is None or (key != "tvm_ms" and not _tried(part)):
            return "-"
        return format(part[key], fmt)

    def ratio(part: dict | None) -> str:
        return "×" + cell(part, "ratio", ".3f") if _tried(part) else "not tried"

    lines = [f"**{data['device']}** (compute {data['compute_version']}), batch 1, "
             f"{data['processes']} processes. {data['timing']}. {data['rule']}.", "",
             "| graph | TVM default ms | PET+TVM ms | PET / TVM | TVM tuned ms | PET+TVM tuned ms "
             "| PET / TVM tuned | kept (tuned) | PyTorch eager ms | paper (V100) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        d, t = r["default"], r["tuned"]
        kept = "-" if t is None else (t["kept"] + (f" ({t['kept_mutant']})"
                                                   if t["kept_mutant"] else ""))
        eager = "-" if r["torch_eager_ms"] is None else f"{r['torch_eager_ms']:.3f}"
        lines.append(f"| {r['model']} | {cell(d, 'tvm_ms', '.3f')} | {cell(d, 'pet_ms', '.3f')} "
                     f"| {ratio(d)} | {cell(t, 'tvm_ms', '.3f')} "
                     f"| {cell(t, 'pet_ms', '.3f')} | {ratio(t)} | {kept} "
                     f"| {eager} | {r['paper_v100'] or '-'} |")
    g = {form: "not tried" if v is None else f"×{v:.3f}"
         for form, v in data["geo_mean_pet_over_tvm"].items()}
    lines += ["", f"Geo-mean PET / TVM over the rows PET was tried on: default schedules "
              f"{g['default']}, tuned {g['tuned']}. Beside: {data['paper']}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=pathlib.Path)
    parser.add_argument("--commit-summary", type=pathlib.Path, default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    runs = [json.loads(p.read_text()) for p in sorted(args.results.glob("cuda-run*.json"))]
    if not runs:
        raise SystemExit(f"cuda_table.py: no run_cuda.py results (cuda-run*.json) in "
                         f"{args.results}")
    eagers = [json.loads(p.read_text()) for p in sorted(args.results.glob("torch_eager*.json"))]
    batch = json.loads(args.commit_summary.read_text()) if args.commit_summary else None
    data = table(runs, eagers, batch)
    name = args.out or "cuda-" + re.sub(r"[^a-z0-9]+", "-",
                                        data["device"].lower().replace("nvidia", "")).strip("-")
    out = ROOT / "benchmarks" / "results"
    (out / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / f"{name}.md").write_text(markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
