"""``tvm-pet``'s subcommands: each ``_cmd_*`` takes the parsed command line, runs the library and
prints what it found, and returns the exit code (:func:`tvm_pet.cli.main` turns a
:class:`~tvm_pet.errors.PetError` into 2).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from tvm_pet.cli.account import print_account
from tvm_pet.cli.options import _driver_options, _search_config
from tvm_pet.cli.summary import summary_lines
from tvm_pet.errors import PetError


def _cmd_verify(args: argparse.Namespace) -> int:
    from tvm_pet.onnx import import_model
    from tvm_pet.verify.verifier import verify
    original = import_model(args.original, require_multilinear=True)
    candidate = import_model(args.candidate, require_multilinear=True)
    start = time.perf_counter()
    result = verify(original, candidate, tests=args.tests, seed=args.seed)
    elapsed = time.perf_counter() - start
    if args.json:
        out = result.to_json()
        out["seconds"] = round(elapsed, 4)
        print(json.dumps(out, indent=2))
        return 0
    verdict = "equivalent" if result.equivalent else "NOT equivalent"
    print(f"{args.original} vs {args.candidate}: {verdict} "
          f"({result.positions} positions x {result.tests} tests mod p={result.prime}, "
          f"miss probability <= {result.error_bound:.1e}, {elapsed:.2f} s)")
    for o in result.outputs:
        state = "same" if o.equivalent else f"differs in {len(o.boxes)} box(es)"
        print(f"  {o.name} {list(o.shape)}: {state} ({o.tested_boxes} boxes tested)")
        for box in o.boxes[:args.max_boxes]:
            rng = ", ".join(f"{l}:{h}" + (f":{s}" if s > 1 else "")
                            for l, h, s in zip(box.lo, box.hi, box.step))
            print(f"    [{rng}]")
        if len(o.boxes) > args.max_boxes:
            print(f"    ... {len(o.boxes) - args.max_boxes} more (use --json for all)")
    return 0


def _cmd_explore(args: argparse.Namespace) -> int:
    from tvm_pet.pipeline.optimize import load_model
    from tvm_pet.search.config import SearchConfig
    from tvm_pet.search.explore import explore, write_emitted
    loaded = load_model(args.model, _driver_options(args))
    config = SearchConfig(depth=args.depth, rounds=args.rounds, time_limit=args.time_limit,
                          progress=not args.json and sys.stderr.isatty())
    report = explore(loaded.program, config)
    searched = _explore_search(loaded.program, config, args.search) if args.search else None
    if args.emit:
        index = write_emitted(report, args.emit, _model_names(loaded))
        if not args.json:
            print(f"wrote {index}")
    if args.json:
        out = report.to_json()
        if searched is not None:
            out["search"] = searched.to_json()
        print(json.dumps(out, indent=2))
        return 0
    print(f"{args.model}: {len(report.subprograms)} multi-linear subprograms "
          f"({report.seconds:.1f} s, stopped: {report.stop.value})")
    if searched is not None:
        print(search_line(searched))
    shown = report.subprograms if args.verbose else report.subprograms[:EXPLORE_LISTED]
    for sub in shown:
        kinds = " ".join(sub.ops)
        print(f"  {sub.name} [{kinds}]: {len(sub.mutants)} verified mutants "
              f"({sub.stats.candidates} generated, {sub.stats.corrected} corrected)")
        for m in sub.mutants[:args.max_list] if args.verbose else ():
            tag = f"partial, {m.corrected_boxes} boxes corrected" if m.partially_equivalent \
                else "exact"
            print(f"    {' -> '.join(m.ops)}  ({tag})")
    if not args.verbose:
        rest = report.subprograms[len(shown):]
        if rest:
            print(f"  and {len(rest)} more subprograms, with "
                  f"{sum(len(s.mutants) for s in rest)} verified mutants")
        if any(s.mutants for s in report.subprograms):
            print("  --verbose lists the mutants")
    return 0


#: Subprograms ``explore`` lists without ``--verbose``.
EXPLORE_LISTED = 8


def _explore_search(program, config, search: str):
    """``explore --search``: that search on the model, with the analytic cost and explore's
    budgets."""
    import dataclasses

    from tvm_pet.cost.analytic import AnalyticCost
    from tvm_pet.search.dispatch import run_search
    return run_search(program, dataclasses.replace(config, search=search), AnalyticCost())


def search_line(result) -> str:
    """``explore --search``'s line: the search, the analytic cost before and after, the mutants
    applied, the stop reason and, for eqsat, the e-graph's size.

    >>> from types import SimpleNamespace
    >>> from tvm_pet.search.config import StopReason
    >>> r = SimpleNamespace(search="algorithm2", original_cost=2e-3, cost=1e-3, speedup=2.0,
    ...                     applied=[1], stop=StopReason.ROUNDS, seconds=0.5, egraph=None)
    >>> print(search_line(r))  # doctest: +NORMALIZE_WHITESPACE
      search algorithm2: analytic cost 2000 -> 1000 us (x2.00), 1 mutant(s) applied, 0.5 s,
      stopped: rounds
    """
    line = (f"  search {result.search}: analytic cost {result.original_cost * 1e6:.0f} -> "
            f"{result.cost * 1e6:.0f} us (x{result.speedup:.2f}), {len(result.applied)} "
            f"mutant(s) applied, {result.seconds:.1f} s, stopped: {result.stop.value}")
    if result.egraph is not None:
        line += (f"; e-graph {result.egraph.classes} e-classes, {result.egraph.nodes} e-nodes, "
                 f"{result.egraph.iterations} iterations")
    return line


def _model_names(loaded) -> dict[str, str]:
    """The model's own names of the loaded program's inputs and outputs, for the ONNX files
    ``explore --emit`` writes (none for a model that is not ONNX)."""
    if loaded.onnx_model is None:
        return {}
    from tvm_pet.onnx.exporter import model_names
    return model_names(loaded.onnx_model, [spec.name for spec in loaded.inputs],
                       loaded.program.outputs)


def _cmd_optimize(args: argparse.Namespace) -> int:
    from tvm_pet.pipeline.optimize import optimize
    if args.dry_run:
        return _cmd_dry_run(args)
    report = optimize(args.model, args.out, _search_config(args), _driver_options(args))
    if args.verbose:
        print_account(report, args)
    else:
        print("\n".join(summary_lines(report, args)))
    return 0


def _cmd_dry_run(args: argparse.Namespace) -> int:
    from tvm_pet.contrib.cuda_offline.dry_run import dry_run
    if args.target != "cuda":
        raise PetError("--dry-run is for --target cuda (it builds for a GPU without running)")
    report = dry_run(args.model, args.out, _search_config(args), arch=args.arch,
                     records_dir=args.records, trials=args.trials or 0,
                     rewrites=not args.no_tvm_rewrites, progress=print)
    failed = [v for v in report.variants if v.error]
    print(f"dry run for {report.arch}: {len(report.variants) - len(failed)} of "
          f"{len(report.variants)} builds compiled by nvcc ({report.distinct_binaries} distinct "
          f"CUDA modules), {len(failed)} failed, {report.seconds:.1f} s; wrote {args.out}/")
    print("stopped before the first kernel run. On a GPU, this would:")
    for line in report.gpu_work:
        print(f"  - {line}")
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from tvm_pet.pipeline.layout import choose_layout
    from tvm_pet.pipeline.optimize import load_model
    from tvm_pet.pipeline.toolchain import tvm_toolchain
    from tvm_pet.pipeline.tune import tune_model
    from tvm_pet.pipeline.progress import Progress
    options = _driver_options(args)
    loaded = load_model(args.model, options)
    progress = Progress(options.progress)
    # the original's kernels as optimize builds them (its baseline may be tvm_pet's lowering),
    # with optimize's line saying so
    # with --layout auto, the original tuned in both layouts, the mutants in the faster
    chosen = choose_layout(loaded, options, tvm_toolchain(
        options.target, options.records_dir, options.rpc, run_here=False), progress,
        measure=options.rpc is None)
    progress.note(chosen.choice.line())
    summary = tune_model(loaded.program, _search_config(args), options, chosen.toolchain,
                         progress=progress.note)
    tuning = summary.to_json() | {"layout": chosen.choice.to_json()}
    if args.verbose:
        print(json.dumps(tuning, indent=2))
    else:
        print("\n".join(tune_lines(tuning, args)))
    return 0


def tune_lines(tuning: dict, args: argparse.Namespace) -> list[str]:
    """``tune``'s short summary: what was tuned, the new trials and the time, and where the
    records are (``--verbose`` prints ``tuning`` as JSON instead).

    >>> from types import SimpleNamespace
    >>> args = SimpleNamespace(model="m.onnx", target="llvm")
    >>> tune_lines({"records": "recs", "new_trials": 0, "tuning_time_s": 0.1}, args)
    ['m.onnx for llvm: nothing tuned (--trials 0)', '  records: recs']
    """
    records = f"  records: {tuning['records']}"
    layout = tuning.get("layout")
    layout_line = []
    if layout is not None and layout["asked"] == "auto":
        both = (f"; {layout['new_trials']} more trials tuned the original in both layouts"
                if layout["new_trials"] else "")
        layout_line = [f"  layout: {layout['layout']} ({layout['reason']}){both}"]
    if tuning.get("tasks") is None:
        return [f"{args.model} for {args.target}: nothing tuned (--trials 0)", records]
    budget = (f"the whole model within {tuning['budget']}" if tuning.get("budget")
              else f"{tuning['trials_per_task']} trials per kernel")
    mutants = sum(m["subprogram"] != "combined" for m in tuning["tuned_mutants"])
    original = tuning["new_trials"] - tuning["mutant_trials"]
    return [f"{args.model} for {args.target}: tuned {budget}, the original and {mutants} of "
            f"PET's mutants",
            f"  {tuning['new_trials']} new trials ({original} for the original's kernels, "
            f"{tuning['mutant_trials']} for the mutants') in {tuning['tuning_time_s']:.0f} s",
            *layout_line,
            records + "; tvm-pet optimize reads them (--verbose: the full summary as JSON)"]


def _cmd_model(args: argparse.Namespace) -> int:
    import onnx

    from tvm_pet.models import build_model
    try:
        model = build_model(args.name)
    except ValueError as e:
        raise PetError(str(e)) from None
    onnx.save(model, args.file)
    print(f"wrote {args.file}")
    return 0


def _cmd_example(args: argparse.Namespace) -> int:
    import pathlib

    from tvm_pet import example_pairs
    from tvm_pet.onnx import save_model
    makers = {
        "figure1": example_pairs.figure1_pair,
        "figure3": lambda: example_pairs.figure3_pair(exact=True),
        "figure3-partial": lambda: example_pairs.figure3_pair(exact=False),
        "weight-changed": example_pairs.weight_changed_pair,
        "off-by-one-slice": example_pairs.off_by_one_slice_pair,
        "wrong-padding": example_pairs.wrong_padding_pair,
        "equivalent": example_pairs.equivalent_pair,
    }
    original, candidate = makers[args.name]()
    out = pathlib.Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    save_model(original, out / "original.onnx")
    save_model(candidate, out / "candidate.onnx")
    print(f"wrote {out / 'original.onnx'} and {out / 'candidate.onnx'}")
    return 0
