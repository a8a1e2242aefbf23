"""PET / TVM on a GPU as the baseline is tuned longer: one row per model, one column per budget.

    python benchmarks/cuda_sweep.py 8=cuda-h200-models 40=cuda-h200-models-40 ... --out NAME

Each BUDGET=NAME reads ``benchmarks/results/NAME.json``, a table of ``benchmarks/cuda_table.py``
whose tuned builds had BUDGET MetaSchedule candidates a kernel (plus TVM's default schedule) on
both sides. Ratios are never mixed across tables: each is from its own processes, interleaved.
Writes ``benchmarks/results/NAME.{json,md}``.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def sweep(tables: dict[int, dict]) -> dict:
    """``{model: {budget: {"tvm_ms", "pet_ms", "ratio", "kept"}}}`` over the tuned rows."""
    rows: dict[str, dict] = {}
    for budget, data in sorted(tables.items()):
        for row in data["rows"]:
            tuned = row["tuned"]
            if tuned is not None:
                rows.setdefault(row["model"], {})[budget] = {
                    k: tuned[k] for k in ("tvm_ms", "pet_ms", "ratio", "kept")}
    return rows


def markdown(rows: dict, budgets: list[int]) -> str:
    head = " | ".join(f"{b}: TVM ms, PET+TVM ms, PET / TVM" for b in budgets)
    lines = [f"| model | {head} |", "|---|" + "---|" * len(budgets)]
    for model, by in rows.items():
        cells = [f"{by[b]['tvm_ms']:.3f}, {by[b]['pet_ms']:.3f}, ×{by[b]['ratio']:.3f}"
                 if b in by else "-" for b in budgets]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", nargs="+", metavar="BUDGET=NAME")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = ROOT / "benchmarks" / "results"
    tables = {int(b): json.loads((out / f"{name}.json").read_text())
              for b, name in (t.split("=", 1) for t in args.tables)}
    rows = sweep(tables)
    budgets = sorted(tables)
    text = ("Candidates a kernel (best of them and TVM's default schedule), the same on both "
            "sides; each column from its own timing processes.\n\n" + markdown(rows, budgets))
    (out / f"{args.out}.json").write_text(json.dumps({"budgets": budgets, "rows": rows},
                                                     indent=1) + "\n")
    (out / f"{args.out}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
