"""Time PET's search: discovery of each case-study transformation, and whole-model searches.

    python benchmarks/search_bench.py [--out benchmarks/results/search_bench.json]
    python benchmarks/search_bench.py --search [--graphs table3 models] [--real NAME ...]
                                      [--depth D] [--rounds R] [--time-limit S]
                                      [--out benchmarks/results/eqsat_analytic.json]

1. Time to discovery: for each case of :mod:`tvm_pet.search.case_studies` (real shapes), the seconds
   from the start of generation until the generator yields that transformation, verified and
   corrected (target: 10 s each).
2. Whole-model search at depth 3, rounds 3, with the analytic cost: ResNet-18 (224), the CSRNet
   back end (14x14) and one BERT-base encoder layer (seq 128), built from code (target: 60 s).
3. ``--search``: Algorithm 2 against equality saturation (``SearchConfig(search=...)``) on each
   graph of a set: the Table-3 graphs (``table3``), the five models of
   :func:`tvm_pet.models.build_model` (``models``), and with ``--real`` the real models of
   ``benchmarks/real_models.py`` (lifted from Relax; needs the ``torch`` extra). Per graph and
   search: the analytic cost of the chosen program, the search time (each search with its own
   generator cache, so both generate their mutants), the e-graph's size and the stop reason.
   Every chosen program is checked against the original
   (:func:`tvm_pet.search.eqsat.checked`) before it is reported. Writes the JSON file and a
   Markdown table beside it.
Nothing here fails on timing; the figures go to the JSON file and the console.
"""
from __future__ import annotations

import argparse
import dataclasses
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

#: The graph sets of ``--search``.
GRAPH_SETS = {"table3": ("conv5x5", "dilated_conv", "two_1x1_convs", "three_matmuls"),
              "models": ("resnet18", "csrnet", "bert_encoder", "resnet3d_18", "inception_v3")}
SEARCH_NAMES = ("algorithm2", "eqsat")


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


def real_program(name: str):
    """A real model of ``benchmarks/real_models.py``, exported and lifted from Relax."""
    from tvm_pet.relax.adapter import from_relax
    from tvm_pet.testing.real_models import build_torch_model, to_relax_module
    model, inputs = build_torch_model(name)
    mod = to_relax_module(model, inputs)
    return from_relax(mod["main"], mod).program


def compare_searches(name: str, program, config: SearchConfig) -> dict:
    """Both searches on one graph, with the analytic cost; each chosen program checked."""
    from tvm_pet.cost.analytic import AnalyticCost
    from tvm_pet.search.dispatch import run_search
    from tvm_pet.search.eqsat import checked
    from tvm_pet.search.mutant_cache import MutantCache
    row = {"graph": name, "operators": len(program.nodes)}
    for search in SEARCH_NAMES:
        start = time.perf_counter()
        result = run_search(program, dataclasses.replace(config, search=search), AnalyticCost(),
                            MutantCache())
        seconds = time.perf_counter() - start
        row[search] = {"original_cost_s": result.original_cost, "cost_s": result.cost,
                       "speedup": result.speedup, "search_time_s": seconds,
                       "stop": result.stop.value, "applied": len(result.applied),
                       "post_optimizations": result.post_optimizations,
                       "verified": checked(program, result.program, config),
                       "egraph": None if result.egraph is None else result.egraph.to_json()}
    return row


def search_table(rows: list[dict], header: list[str]) -> str:
    """The Markdown of ``--search``: one row per graph, both searches side by side."""
    lines = header + [
        "| graph | ops | analytic cost | Algorithm 2 | time | eqsat | time | e-graph "
        "(classes / nodes / iterations) | eqsat stop | verified |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        a, e = row["algorithm2"], row["eqsat"]
        g = e["egraph"]
        lines.append(
            f"| {row['graph']} | {row['operators']} | {a['original_cost_s'] * 1e3:.3f} ms | "
            f"x{a['speedup']:.3f} | {a['search_time_s']:.1f} s | x{e['speedup']:.3f} | "
            f"{e['search_time_s']:.1f} s | {g['classes']} / {g['nodes']} / {g['iterations']} | "
            f"{e['stop']} | {'yes' if a['verified'] and e['verified'] else 'NO'} |")
    cheaper = sum(r["eqsat"]["cost_s"] < r["algorithm2"]["cost_s"] * (1 - 1e-9) for r in rows)
    costlier = sum(r["eqsat"]["cost_s"] > r["algorithm2"]["cost_s"] * (1 + 1e-9) for r in rows)
    lines += ["", f"eqsat chose a cheaper program than Algorithm 2 on {cheaper} of {len(rows)} "
                  f"graphs, a costlier one on {costlier}, the same cost on "
                  f"{len(rows) - cheaper - costlier}."]
    return "\n".join(lines) + "\n"


def search_main(args) -> int:
    config = SearchConfig(depth=args.depth, rounds=args.rounds, time_limit=args.time_limit)
    graphs = [(n, lambda n=n: import_model(build_model(n))) for s in args.graphs
              for n in GRAPH_SETS[s]]
    graphs += [(f"{n} (real)", lambda n=n: real_program(n)) for n in args.real]
    rows = []
    for name, make in graphs:
        row = compare_searches(name, make(), config)
        rows.append(row)
        a, e = row["algorithm2"], row["eqsat"]
        print(f"{name:24s} algorithm2 x{a['speedup']:.3f} {a['search_time_s']:6.1f} s   "
              f"eqsat x{e['speedup']:.3f} {e['search_time_s']:6.1f} s  ({e['stop']}, "
              f"{e['egraph']['nodes']} e-nodes)", flush=True)
    machine = {"cpu": _cpu_name(), "cpus": os.cpu_count(), "python": platform.python_version()}
    settings = {"cost_model": "analytic", "depth": args.depth, "rounds": args.rounds,
                "time_limit_s": args.time_limit, "eqsat_iterations": config.eqsat_iterations,
                "eqsat_nodes": config.eqsat_nodes, "topk": config.topk,
                "max_subset": config.max_subset}
    out = pathlib.Path(args.out or "benchmarks/results/eqsat_analytic.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": args.date, "machine": machine, "config": settings,
                               "graphs": rows}, indent=2) + "\n")
    header = ["# Algorithm 2 and equality saturation, analytic cost", "",
              f"{args.date}, {machine['cpu']} ({machine['cpus']} cores, shared with other "
              f"work), Python {machine['python']}. Both searches with the analytic cost, depth "
              f"{args.depth}, {args.rounds} round(s), time limit {args.time_limit:g} s; eqsat with "
              f"at most {config.eqsat_iterations} iterations and {config.eqsat_nodes} e-nodes. "
              f"Speed-ups are the analytic cost's (original / chosen); times include generating "
              f"the mutants (each search with its own generator cache). Every chosen program was "
              f"checked against the original. Data: `{out.name}`.", ""]
    out.with_suffix(".md").write_text(search_table(rows, header))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


def _cpu_name() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None,
                        help="the JSON file (default benchmarks/results/search_bench.json, with "
                             "--search benchmarks/results/eqsat_analytic.json)")
    parser.add_argument("--search", action="store_true",
                        help="compare Algorithm 2 and equality saturation (item 3 above)")
    parser.add_argument("--graphs", nargs="*", choices=sorted(GRAPH_SETS),
                        default=["table3", "models"], help="--search: the graph sets")
    parser.add_argument("--real", nargs="*", default=[], metavar="NAME",
                        help="--search: real models of benchmarks/real_models.py too")
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--date", default=time.strftime("%Y-%m-%d"),
                        help="--search: the date the results are stamped with")
    args = parser.parse_args()
    if args.search:
        return search_main(args)
    args.out = args.out or "benchmarks/results/search_bench.json"
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
