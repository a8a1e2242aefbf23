"""Time PET's search: discovery of each case-study transformation, and whole-model searches.

    python benchmarks/search_bench.py [--out benchmarks/results/search_bench.json]
    python benchmarks/search_bench.py --search [--graphs table3 models] [--real NAME ...]
                                      [--cost analytic|measured] [--end-to-end MODEL ...]
                                      [--resume] [--before FILE]
                                      [--depth D] [--rounds R] [--time-limit S]
                                      [--out benchmarks/results/eqsat_<cost>.json]

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
   (:func:`tvm_pet.search.eqsat.checked`) before it is reported. With ``--cost measured``, each
   graph is imported through TVM (NCHW) and both searches take the TVM toolchain's measured
   cost on the shipped records; ``--end-to-end`` also runs ``optimize_model`` once per search
   (no tuning, NCHW, timing over 2 fresh processes) and reports the timed original and result.
   The JSON file and a Markdown table beside it are rewritten after each graph; ``--resume``
   keeps the graphs the file has.
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
              "csrnet_backend": ("csrnet_backend",),
              "models": ("resnet18", "csrnet", "bert_encoder", "resnet3d_18", "inception_v3"),
              "none": ()}
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


#: Real models by name: :func:`tvm_pet.testing.real_models.build_torch_model`'s, and
#: ``bert_base``: BERT-base (12 layers, hidden 768, 12 heads, intermediate 3072, sequence 128).
BERT_BASE = {"layers": 12, "hidden": 768, "heads": 12, "intermediate": 3072, "vocab": 30522,
             "sequence": 128}


def real_program(name: str):
    """A real model of ``benchmarks/real_models.py``, exported and lifted from Relax."""
    from tvm_pet.relax.adapter import from_relax
    from tvm_pet.testing.real_models import BertSize, build_torch_model, to_relax_module
    if name == "bert_base":
        model, inputs = build_torch_model("bert", bert=BertSize(**BERT_BASE))
    else:
        model, inputs = build_torch_model(name)
    mod = to_relax_module(model, inputs)
    return from_relax(mod["main"], mod).program


def compare_searches(name: str, program, config: SearchConfig, make_cost=None) -> dict:
    """Both searches on one graph, each with a cost model of its own from ``make_cost``
    (default: the analytic cost); each chosen program checked."""
    from tvm_pet.cost.analytic import AnalyticCost
    from tvm_pet.search.dispatch import run_search
    from tvm_pet.search.eqsat import checked
    from tvm_pet.search.mutant_cache import MutantCache
    make_cost = make_cost or AnalyticCost
    row = {"graph": name, "operators": len(program.nodes)}
    for search in SEARCH_NAMES:
        cost = make_cost()
        start, cpu = time.perf_counter(), time.process_time()
        result = run_search(program, dataclasses.replace(config, search=search), cost,
                            MutantCache())
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        row[search] = {"original_cost_s": result.original_cost, "cost_s": result.cost,
                       "speedup": result.speedup, "search_time_s": seconds,
                       "search_cpu_s": cpu,
                       "stop": result.stop.value, "applied": len(result.applied),
                       "post_optimizations": result.post_optimizations,
                       "verified": _verdict(program, result.program, config),
                       "egraph": None if result.egraph is None else result.egraph.to_json()}
        if hasattr(cost, "set_aside"):
            row[search]["set_aside"] = cost.set_aside
        row[search]["program"] = result.program
    if make_cost is not AnalyticCost:  # measured: each search timed kernels of its own
        judge = make_cost()  # one timing of each kernel, for the original and both results
        row["common_original_cost_s"] = judge.cost(program)
        for search in SEARCH_NAMES:
            row[search]["common_cost_s"] = judge.cost(row[search]["program"])
    for search in SEARCH_NAMES:
        del row[search]["program"]
    return row


def _verdict(program, chosen, config: SearchConfig) -> str:
    """``"yes"`` when ``chosen`` passed :func:`tvm_pet.search.eqsat.checked` against
    ``program``, ``"unchanged"`` when it is ``program`` itself, ``"unevaluable: OP"`` when the
    float interpreter cannot run the original (an operator lifted from Relax that it does not
    evaluate), else ``"NO"``."""
    from tvm_pet.errors import PetError
    from tvm_pet.ir.keys import canonical
    from tvm_pet.search.eqsat import checked
    from tvm_pet.verify.interpreter import evaluate
    if canonical(chosen)[0] == canonical(program)[0]:
        return "unchanged"
    if checked(program, chosen, config):
        return "yes"
    if not program.is_multilinear():
        import numpy as np
        try:
            evaluate(program, {t.name: np.zeros(t.shape) for t in program.inputs}, np.float64)
        except PetError as e:
            from tvm_pet.ops.float_eval import OPAQUE_FLOAT
            kinds = sorted({n.attrs["kind"] for n in program.nodes if n.op.value == "Opaque"
                            and n.attrs["kind"] not in OPAQUE_FLOAT})
            return "unevaluable: " + (", ".join(kinds) or type(e).__name__)
    return "NO"


def end_to_end(name: str, work: pathlib.Path, records: str | None = None) -> dict:
    """``optimize_model`` of model ``name`` once per search: the records (``records``, a
    target's folder, or the shipped ones), no tuning, NCHW, the measured cost, timing over 2
    fresh processes; the CPU share other processes used meanwhile
    (:class:`~tvm_pet.tune.contention.CpuWatch`)."""
    from tvm_pet.pipeline import DriverOptions
    from tvm_pet.pipeline.optimize import optimize_model
    from tvm_pet.tune.contention import CpuWatch
    row = {"graph": name}
    for search in SEARCH_NAMES:
        with CpuWatch() as watch:
            start = time.perf_counter()
            report = optimize_model(build_model(name), work / f"{name}-{search}",
                                    SearchConfig(search=search),
                                    DriverOptions(trials=0, layout="NCHW", timing_processes=2,
                                                  records_dir=records))
            seconds = time.perf_counter() - start
        search_report = report.get("search") or {}
        row[search] = {"baseline_time_s": report["baseline_time_s"],
                       "optimized_time_s": report["optimized_time_s"],
                       "kept": report["kept"], "applied": len(report.get("applied") or []),
                       "run_s": seconds, "others_cpu_share": watch.share,
                       "search_time_s": search_report.get("search_time_s"),
                       "stop": search_report.get("stop"),
                       "egraph": search_report.get("egraph")}
    return row


def search_table(rows: list[dict], header: list[str], cost_label: str = "analytic cost",
                 before: dict | None = None) -> str:
    """The Markdown of ``--search``: one row per graph, both searches side by side (with
    ``before``, each search's time in an earlier result file, by graph)."""
    before = before or {}
    then = " | before" if before else ""
    common = any("common_original_cost_s" in r for r in rows)
    both = " | both results on one timing" if common else ""
    lines = header + [
        f"| graph | ops | {cost_label} | Algorithm 2 | time{then} | eqsat | time{then} | e-graph "
        f"(classes / nodes / iterations) | eqsat stop | checked (Algorithm 2 / eqsat){both} |",
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if before else "")
        + ("---|" if common else "")]
    for row in rows:
        a, e = row["algorithm2"], row["eqsat"]
        g = e["egraph"]
        old = before.get(row["graph"])
        was = {s: (f" | {old[s]['search_time_s']:.1f} s" if old else " | -") if before else ""
               for s in SEARCH_NAMES}
        cpu = {s: f" ({row[s]['search_cpu_s']:.0f} s CPU)" if "search_cpu_s" in row[s] else ""
               for s in SEARCH_NAMES}
        lines.append(
            f"| {row['graph']} | {row['operators']} | {a['original_cost_s'] * 1e3:.3f} ms | "
            f"x{a['speedup']:.3f} | {a['search_time_s']:.1f} s{cpu['algorithm2']}"
            f"{was['algorithm2']} | x{e['speedup']:.3f} | {e['search_time_s']:.1f} s"
            f"{cpu['eqsat']}{was['eqsat']} | "
            f"{g['classes']} / {g['nodes']} / {g['iterations']} | "
            f"{e['stop']} | {_shown(a['verified'])} / {_shown(e['verified'])} |"
            + (_on_one_timing(row) if common else ""))
    field = "common_cost_s" if common else "cost_s"  # measured: both on one timing
    cheaper = sum(r["eqsat"][field] < r["algorithm2"][field] * (1 - 1e-9) for r in rows)
    costlier = sum(r["eqsat"][field] > r["algorithm2"][field] * (1 + 1e-9) for r in rows)
    lines += ["", f"eqsat chose a cheaper program than Algorithm 2 on {cheaper} of {len(rows)} "
                  f"graphs, a costlier one on {costlier}, the same cost on "
                  f"{len(rows) - cheaper - costlier}"
                  + (" (both chosen programs costed on one timing, the last column)."
                     if common else ".")]
    return "\n".join(lines) + "\n"


def _shown(verdict) -> str:
    """A verdict of :func:`_verdict` as the table shows it (earlier files hold booleans)."""
    return {True: "yes", False: "NO"}.get(verdict, verdict) if isinstance(verdict, bool) \
        else verdict


def _on_one_timing(row: dict) -> str:
    """Both chosen programs' speed-ups over the original, costed by one cost model (each
    kernel timed once for all three)."""
    base = row.get("common_original_cost_s")
    if base is None:
        return " - |"
    a, e = (base / row[s]["common_cost_s"] for s in SEARCH_NAMES)
    return f" x{a:.3f} / x{e:.3f} |"


def _baseline_spread(rows: list[dict]) -> str:
    """How far apart the runs timed the same original (the same build from the same records)."""
    ratios = [max(r[s]["baseline_time_s"] for s in SEARCH_NAMES)
              / min(r[s]["baseline_time_s"] for s in SEARCH_NAMES) for r in rows]
    return (f"Both runs of a model build the same original from the same records; their "
            f"baselines lie x{min(ratios):.2f}-x{max(ratios):.2f} apart, so compare each row's "
            f"optimized time with its own baseline, not rows with rows.")


def end_to_end_table(rows: list[dict]) -> str:
    """The Markdown of ``--end-to-end``: per model and search, the timed original and result."""
    lines = ["| model | search | baseline | optimized | speed-up | kept | applied | search time "
             "| e-graph (classes / nodes / stop) | run | others' CPU |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for search in SEARCH_NAMES:
            r = row[search]
            share = "-" if r["others_cpu_share"] is None else f"{r['others_cpu_share']:.0%}"
            g = r.get("egraph")
            graph = f"{g['classes']} / {g['nodes']} / {g['stop']}" if g else "-"
            took = "-" if r.get("search_time_s") is None else f"{r['search_time_s']:.0f} s"
            lines.append(f"| {row['graph']} | {search} | {r['baseline_time_s'] * 1e3:.2f} ms | "
                         f"{r['optimized_time_s'] * 1e3:.2f} ms | "
                         f"x{r['baseline_time_s'] / r['optimized_time_s']:.3f} | "
                         f"{'yes' if r['kept'] else 'no'} | {r['applied']} | {took} | {graph} "
                         f"| {r['run_s']:.0f} s | {share} |")
    return "\n".join(lines) + "\n"


def _measured_cost_for(name: str, records: str | None = None):
    """The program of model ``name`` as ``optimize`` loads it (TVM's import, NCHW), and a
    maker of measured cost models lowering into it, on the records (``records``, a target's
    folder, or the shipped ones), each with a toolchain of its own (neither search reuses
    kernels the other compiled or timed)."""
    from tvm_pet.pipeline.load import load
    from tvm_pet.pipeline.toolchain import tvm_toolchain
    loaded = load(build_model(name))

    def make_cost():  # a toolchain of its own: the records opened afresh for each search
        return tvm_toolchain("llvm", records).with_lowering(loaded.lower).cost_model()
    make_cost().cost(loaded.program)  # TVM's first compilation, before either search is timed
    return loaded.program, make_cost


def search_main(args) -> int:
    config = SearchConfig(depth=args.depth, rounds=args.rounds, time_limit=args.time_limit)
    measured = args.cost == "measured"
    out = pathlib.Path(args.out or f"benchmarks/results/eqsat_{args.cost}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"cpu": _cpu_name(), "cpus": os.cpu_count(), "python": platform.python_version(),
               "load": args.load}
    settings = {"cost_model": args.cost, "depth": args.depth, "rounds": args.rounds,
                "time_limit_s": args.time_limit, "eqsat_iterations": config.eqsat_iterations,
                "eqsat_nodes": config.eqsat_nodes, "topk": config.topk,
                "max_subset": config.max_subset}
    data = {"date": args.date, "machine": machine, "config": settings, "graphs": [],
            "end_to_end": []}
    if args.resume and out.exists():
        data = {**data, **json.loads(out.read_text())}
    if args.before:
        data["before"] = {r["graph"]: {s: {"search_time_s": r[s]["search_time_s"]}
                                       for s in SEARCH_NAMES}
                          for r in json.loads(pathlib.Path(args.before).read_text())["graphs"]}
    before = data.get("before") or {}
    names = [n for s in args.graphs for n in GRAPH_SETS[s]] + [f"{n} (real)" for n in args.real]
    done = {r["graph"] for r in data["graphs"]}
    for name in names:
        if name in done:
            continue
        real = name.endswith(" (real)")
        base = name.removesuffix(" (real)")
        try:
            if measured:
                program, make_cost = _measured_cost_for(base, args.records)
            else:
                program, make_cost = (real_program(base) if real
                                      else import_model(build_model(base))), None
            row = compare_searches(name, program, config, make_cost)
        except Exception as e:  # noqa: BLE001 - one graph's failure is reported, not fatal
            print(f"{name:24s} failed: {type(e).__name__}: {e}", flush=True)
            continue
        data["graphs"].append(row)
        _write(out, data, args, before)
        a, e = row["algorithm2"], row["eqsat"]
        print(f"{name:24s} algorithm2 x{a['speedup']:.3f} {a['search_time_s']:6.1f} s   "
              f"eqsat x{e['speedup']:.3f} {e['search_time_s']:6.1f} s  ({e['stop']}, "
              f"{e['egraph']['nodes']} e-nodes)", flush=True)
    done = {r["graph"] for r in data["end_to_end"]}
    for name in args.end_to_end:
        if name in done:
            continue
        import tempfile
        with tempfile.TemporaryDirectory() as work:
            try:
                row = end_to_end(name, pathlib.Path(work), args.records)
            except Exception as e:  # noqa: BLE001 - one model's failure is reported
                print(f"{name:24s} end to end failed: {type(e).__name__}: {e}", flush=True)
                continue
        data["end_to_end"].append(row)
        _write(out, data, args, before)
        print(f"{name:24s} end to end: " + "   ".join(
            f"{s} {row[s]['baseline_time_s'] * 1e3:.2f} -> {row[s]['optimized_time_s'] * 1e3:.2f}"
            f" ms (kept: {row[s]['kept']})" for s in SEARCH_NAMES), flush=True)
    _write(out, data, args, before)
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


def _write(out: pathlib.Path, data: dict, args, before: dict) -> None:
    """The JSON file and the Markdown beside it, as they stand (rewritten after each graph)."""
    out.write_text(json.dumps(data, indent=2) + "\n")
    machine, settings = data["machine"], data["config"]
    measured = settings["cost_model"] == "measured"
    what = ("the measured cost (the TVM toolchain's cost model: fused kernels timed from the "
            "shipped tuning records of this machine's target, llvm-skylake-avx512-c2, "
            "untuned kernels set aside; models imported through TVM, NCHW)" if measured
            else "the analytic cost")
    header = [f"# Algorithm 2 and equality saturation, {settings['cost_model']} cost", "",
              f"{data['date']}, {machine['cpu']} ({machine['cpus']} cores, "
              f"{machine.get('load') or 'no other work'}), Python {machine['python']}. "
              f"Both searches "
              f"with {what}, depth {settings['depth']}, {settings['rounds']} round(s), time "
              f"limit {settings['time_limit_s']:g} s; eqsat with at most "
              f"{settings['eqsat_iterations']} iterations and {settings['eqsat_nodes']} e-nodes. "
              f"Speed-ups are the cost model's (original / chosen); times include generating "
              f"the mutants (each search with its own generator cache). Every chosen program was "
              f"checked against the original (`tvm_pet.search.eqsat.checked`: the verifier, or float64 "
              f"evaluation on random inputs where the program has non-linear operators): yes, "
              f"unchanged (the original itself), or unevaluable (the float interpreter does not "
              f"run an operator of the original; eqsat then keeps the original, polished). "
              + ("Each search has a toolchain of its own, so each times its kernels itself "
                 "(a kernel's cost is one timing, and timings vary on a shared machine); the last "
                 "column costs the original and both chosen programs with one more cost model, "
                 "each kernel timed once for all three (Algorithm 2 / eqsat). " if measured
                 else "")
              + ("Real models (marked) are lifted from Relax (torch.export of torchvision and "
                 "transformers models with seeded random weights, CNNs at 64 x 64, BERT-base at "
                 "sequence 128). " if any(r["graph"].endswith(" (real)") for r in data["graphs"])
                 else "")
              + f"Data: `{out.name}`.", ""]
    if before:
        header += ["The before columns are the search times the previous version of this "
                   "file held, before both searches were made faster (same machine, same "
                   "settings, the same contention).", ""]
    text = search_table(data["graphs"], header, "measured cost" if measured else "analytic cost",
                        before)
    if data.get("end_to_end"):
        text += ("\n## End to end: PET + TVM, measured\n\n`optimize_model(model, out, "
                 "SearchConfig(search=...), DriverOptions(trials=0, layout=\"NCHW\", "
                 "timing_processes=2))` once per search (the default budgets: depth 3, 3 rounds, "
                 "60 s), on the shipped records (no new tuning), NCHW on both sides. Baseline "
                 "and optimized are the end-to-end medians the run timed; kept says whether the "
                 "run kept the optimized model. Others' CPU is the share of the machine other "
                 "processes used during the run (the machine's load "
                 "in the header above is the searches' table's). "
                 + _baseline_spread(data["end_to_end"]) + "\n\n"
                 + end_to_end_table(data["end_to_end"]))
    out.with_suffix(".md").write_text(text)


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
                        help="--search: real models of benchmarks/real_models.py too "
                             "(and bert_base: BERT-base)")
    parser.add_argument("--cost", choices=("analytic", "measured"), default="analytic",
                        help="--search: the cost model (measured: the TVM toolchain's, on the "
                             "shipped records)")
    parser.add_argument("--end-to-end", nargs="*", default=[], metavar="MODEL",
                        help="--search: also optimize these models end to end once per search "
                             "(measured cost, no tuning, NCHW)")
    parser.add_argument("--records", default=None,
                        help="--search --cost measured / --end-to-end: a target's records "
                             "folder (default: the shipped records of this machine's target)")
    parser.add_argument("--load", default=None,
                        help="--search: what else ran on the machine, as the result says it "
                             "(default: no other work)")
    parser.add_argument("--resume", action="store_true",
                        help="--search: keep the graphs the output file has, run the others")
    parser.add_argument("--before", default=None,
                        help="--search: an earlier result file whose search times are shown "
                             "beside the new ones")
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
