"""Which kinds of PET's rewrites win on a build: per kind, how often they were tuned, timed
against the original, and kept, over the rows of ``benchmarks/run.py`` results.

    python benchmarks/kinds.py benchmarks/results/best-build-xeon/llvm.json [more.json ...]

Each row of a result names the mutants tuned (``tuned_mutants``), each look's candidate's
rewrites (``decision_looks[].mutants``) and what was kept (``applied``); a kind
(:func:`tvm_pet.pipeline.kinds.kind_of`) counts once per row for each. A look's ratio is the
original's time over the candidate's in that look. Rows written before looks named their
rewrites count only their kept rewrites. Writes ``kinds.md`` and ``kinds.json`` beside the
first result.
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def tally(rows: list[dict]) -> dict[str, dict]:
    """Per kind: rows where it was tuned, timed, kept, and the ratios of its looks."""
    from tvm_pet.pipeline.kinds import kind_of
    kinds: dict[str, dict] = collections.defaultdict(
        lambda: {"tuned": set(), "timed": set(), "kept": set(), "ratios": []})
    for row in rows:
        if "error" in row:
            continue
        name = f"{row['model']} (batch {row['batch']})"
        for m in row.get("tuned_mutants", []):
            if m["subprogram"] != "combined":
                kinds[kind_of(m["mutant"].split(" -> "))]["tuned"].add(name)
        for look in row.get("decision_looks", []):
            for kind in look.get("kinds") or []:
                kinds[kind]["timed"].add(name)
                if look.get("ratio"):
                    kinds[kind]["ratios"].append(look["ratio"])
        if row.get("kept") == "optimized":
            for mutant in row.get("applied", []):
                kinds[kind_of(mutant.split(" -> "))]["kept"].add(name)
    return {kind: {"tuned": sorted(v["tuned"]), "timed": sorted(v["timed"]),
                   "kept": sorted(v["kept"]),
                   "look_ratio_geomean": (math.exp(sum(map(math.log, v["ratios"]))
                                                   / len(v["ratios"])) if v["ratios"] else None)}
            for kind, v in sorted(kinds.items())}


def markdown(table: dict[str, dict], sources: list[str]) -> str:
    from tvm_pet.pipeline.kinds import KINDS
    lines = ["| kind | what it does | tuned in | timed in | kept in | looks' ratio (geo-mean) |",
             "|---|---|---|---|---|---|"]
    for kind, v in table.items():
        ratio = v["look_ratio_geomean"]
        lines.append(f"| {kind} | {KINDS.get(kind, '')} | {len(v['tuned'])} | "
                     f"{len(v['timed'])} | {', '.join(v['kept']) or '–'} | "
                     f"{'–' if ratio is None else f'×{ratio:.3f}'} |")
    lines += ["", "Rows counted once per kind; a look's ratio is the original's time over the "
              "candidate's. From: " + ", ".join(f"`{s}`" for s in sources) + "."]
    return "\n".join(lines) + "\n"


def _shown(path: pathlib.Path) -> str:
    """``path`` relative to the repository where it lies inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="benchmarks/run.py result JSON files")
    args = parser.parse_args(argv)
    rows = [r for path in args.results for r in json.loads(pathlib.Path(path).read_text())["rows"]]
    table = tally(rows)
    out = pathlib.Path(args.results[0]).parent
    sources = [_shown(pathlib.Path(p).resolve()) for p in args.results]
    (out / "kinds.json").write_text(json.dumps({"sources": sources, "kinds": table},
                                               indent=2) + "\n")
    (out / "kinds.md").write_text(markdown(table, sources))
    print(markdown(table, sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
