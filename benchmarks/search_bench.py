"""Time PET's search: discovery of each case-study transformation, and whole-model searches.

    python benchmarks/search_bench.py [--out benchmarks/results/search_bench.json]

1. Time to discovery: for each case of :mod:`tvm_pet.search.case_studies` (real shapes), the seconds
   from the start of generation until the generator yields that transformation, verified and
   corrected (target: 10 s each).
2. Whole-model search at depth 3, rounds 3, with the analytic cost: ResNet-18 (224), the CSRNet
   back end (14x14) and one BERT-base encoder layer (seq 128), built from code (target: 60 s).
Nothing here fails on timing; the figures go to the JSON file and the console.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tvm_pet.models import build_model  # noqa: E402
from tvm_pet.onnx import import_model  # noqa: E402
from tvm_pet.search.case_studies import CASE_STUDIES  # noqa: E402
from tvm_pet.search.config import SearchConfig  # noqa: E402
from tvm_pet.search.generator import iter_mutants  # noqa: E402
from tvm_pet.search.optimizer import optimize  # noqa: E402

MODELS = {"resnet18": {}, "csrnet_backend": {}, "bert_encoder": {"layers": 1}}


def discovery(case) -> dict:
    sub = case.build()
    start = time.perf_counter()
    mutants, stats = iter_mutants(sub, SearchConfig(depth=case.depth, time_limit=120))
    for m in mutants:
        if case.found(sub, m.program):
            return {"case": case.name, "title": case.title, "seconds": time.perf_counter() - start,
                    "mutant": list(m.ops), "partially_equivalent": m.partially_equivalent,
                    "corrected_boxes": m.corrected_boxes, "depth": case.depth}
    return {"case": case.name, "title": case.title, "seconds": None, "found": False,
            "stats": stats.to_json()}


def model_search(name: str, kwargs: dict) -> dict:
    program = import_model(build_model(name, **kwargs))
    start = time.perf_counter()
    result = optimize(program, SearchConfig(depth=3, rounds=3, time_limit=600))
    seconds = time.perf_counter() - start
    return {"model": name, "nodes": len(program.nodes), "seconds": seconds,
            "stop": result.stop.value, "rounds": result.rounds,
            "subsets_searched": sum(not s.cached for s in result.subsets),
            "subsets_from_cache": sum(s.cached for s in result.subsets),
            "mutants_listed": sum(len(s.mutants) for s in result.subsets if not s.cached),
            "analytic_speedup": result.speedup, "applied": len(result.applied)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results/search_bench.json")
    args = parser.parse_args()
    cases = []
    for case in CASE_STUDIES.values():
        row = discovery(case)
        cases.append(row)
        secs = "not found" if row["seconds"] is None else f"{row['seconds']:6.2f} s"
        print(f"{case.name:24s} {secs}  {' -> '.join(row.get('mutant', []))}", flush=True)
    models = []
    for name, kwargs in MODELS.items():
        row = model_search(name, kwargs)
        models.append(row)
        print(f"{name:24s} search {row['seconds']:6.1f} s  ({row['subsets_searched']} subsets "
              f"searched, {row['subsets_from_cache']} from cache, stop: {row['stop']})", flush=True)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": {"cpus": os.cpu_count(),
                                           "python": platform.python_version()},
                               "cost_model": "analytic", "cases": cases, "models": models},
                              indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
