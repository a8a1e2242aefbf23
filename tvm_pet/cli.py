"""The ``tvm-pet`` command line.

``tvm-pet verify A.onnx B.onnx [--json] [--tests T] [--seed S]``
    PET's verifier as a "diff" of two tensor programs: per output, whether the two models compute
    the same thing, and the boxes where they differ. Exit code 0 either way, 2 on bad input.

``tvm-pet explore MODEL [--depth D] [--rounds R] [--emit DIR] [--json]``
    Runs the mutant generator and the verifier on every multi-linear subprogram and lists the
    verified mutants; ``--emit`` writes each subprogram and each corrected mutant as ONNX.

``tvm-pet optimize MODEL --target llvm --out DIR [--trials N] [--depth D] [--rounds R]
[--topk K] [--winograd] [--im2col] [--columns] [--time-limit S] [--no-tvm-rewrites]
[--layout NHWC] [--fast-math] [--progress | --quiet]``
    Optimizes the model with PET for a TVM target, confirms it end to end against plain TVM with
    the same tuning records and TVM's own graph rewrites on both sides, and writes
    ``report.json``, ``optimized.so``, ``baseline.so``, ``optimized.onnx`` (where tvm_pet can
    write it) and ``optimized.py`` into DIR. ``--time-limit`` covers the search and the timing.
    It states its records plan first; kernels with no record anywhere (own or borrowed) are
    tuned at 32 trials each unless ``--trials`` or ``--budget`` says otherwise (up to 8 of
    them; with more, the whole model within 10 minutes).

``tvm-pet tune MODEL --target T --trials N``
    Tunes the model's kernels and those of its most promising mutants into ``tuning_logs/``.

``tvm-pet model NAME FILE``
    Writes a model of the seeded zoo (:mod:`tvm_pet.models`) as an ONNX file.

``tvm-pet example NAME DIR``
    Writes a paper example as two ONNX models, ``DIR/original.onnx`` and ``DIR/candidate.onnx``.

``optimize``, ``tune`` and ``explore`` take an ONNX file (any opset TVM's ``from_onnx``
imports) or a ``.pt2`` file saved with ``torch.export.save`` (``pip install tvm-pet[torch]``),
imported by TVM's own frontend; ``verify`` reads ONNX with tvm_pet's importer. An ONNX input
with dynamic dimensions (a batch axis exported as ``"batch"``) is given its shape with
``--input-shape NAME:D0,D1,...``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

from tvm_pet.errors import PetError

EXAMPLES = ("figure1", "figure3", "figure3-partial", "weight-changed", "off-by-one-slice",
            "wrong-padding", "equivalent")
#: ``optimize``'s trials per kernel where kernels have no record anywhere and none was asked.
DEFAULT_UNTUNED_TRIALS = 32
#: ``optimize``'s whole-model budget where more than 8 kernels have no record anywhere (minutes).
DEFAULT_UNTUNED_MINUTES = 10


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
    program = load_model(args.model, _driver_options(args)).program
    config = SearchConfig(depth=args.depth, rounds=args.rounds, time_limit=args.time_limit,
                          progress=not args.json and sys.stderr.isatty())
    report = explore(program, config)
    if args.emit:
        index = write_emitted(report, args.emit)
        if not args.json:
            print(f"wrote {index}")
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0
    print(f"{args.model}: {len(report.subprograms)} multi-linear subprograms "
          f"({report.seconds:.1f} s, stopped: {report.stop.value})")
    for sub in report.subprograms:
        kinds = " ".join(sub.ops)
        print(f"  {sub.name} [{kinds}]: {len(sub.mutants)} verified mutants "
              f"({sub.stats.candidates} generated, {sub.stats.corrected} corrected)")
        for m in sub.mutants[:args.max_list]:
            tag = f"partial, {m.corrected_boxes} boxes corrected" if m.partially_equivalent \
                else "exact"
            print(f"    {' -> '.join(m.ops)}  ({tag})")
    return 0


def _driver_options(args: argparse.Namespace):
    from tvm_pet.pipeline.options import DriverOptions, WholeBudget
    budget = getattr(args, "budget", None)
    if getattr(args, "timing_processes", 2) < 1:
        raise PetError(f"--timing-processes {args.timing_processes}: at least 1")
    if getattr(args, "promising", 1) < 1:
        raise PetError(f"--promising {args.promising}: at least 1")
    if getattr(args, "second_look_kernels", 0) < 0:
        raise PetError(f"--second-look-kernels {args.second_look_kernels}: at least 0")
    if getattr(args, "screen_trials", None) is not None and args.screen_trials < 1:
        raise PetError(f"--screen-trials {args.screen_trials}: at least 1")
    shapes = getattr(args, "input_shape", [])
    named = [name for name, _ in shapes]
    if len(set(named)) < len(named):
        raise PetError("--input-shape: one shape per input (an input is named twice, or two "
                       "shapes are given without a name)")
    trials = getattr(args, "trials", 0)
    return DriverOptions(target=getattr(args, "target", "llvm"), trials=trials or 0,
                         untuned_trials=DEFAULT_UNTUNED_TRIALS if trials is None else 0,
                         untuned_minutes=DEFAULT_UNTUNED_MINUTES if trials is None else 0,
                         budget=None if budget is None else WholeBudget.parse(budget),
                         charge=getattr(args, "charge", "beside"),
                         mutant_share=getattr(args, "mutant_share", 0.25),
                         records_dir=getattr(args, "records", None), rpc=getattr(args, "rpc", None),
                         cost=getattr(args, "cost", "measured"),
                         second_look=not getattr(args, "no_second_look", False),
                         second_look_kernels=getattr(args, "second_look_kernels", 8),
                         replicate=not getattr(args, "no_replication", False),
                         second_screen=getattr(args, "second_screen", 0),
                         promising=getattr(args, "promising", 4),
                         seed=getattr(args, "seed", 0),
                         **({} if getattr(args, "screen_trials", None) is None
                            else {"screen_trials": args.screen_trials}),
                         timing_processes=getattr(args, "timing_processes", 2),
                         confirm=getattr(args, "confirm", 3), time_limit=args.time_limit,
                         confirm_every=not getattr(args, "first_kept", False),
                         tvm_rewrites=not args.no_tvm_rewrites,
                         layout=getattr(args, "layout", "NCHW"),
                         fast_math=getattr(args, "fast_math", False),
                         input_shapes=tuple(shapes), progress=_progress(args))


def _progress(args: argparse.Namespace) -> bool:
    """Progress lines on stderr: with ``--progress``, or on a terminal unless ``--quiet``."""
    if getattr(args, "progress", False):
        return True
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def _search_config(args: argparse.Namespace):
    from tvm_pet.search.config import SearchConfig
    return SearchConfig(depth=args.depth, rounds=args.rounds, topk=args.topk,
                        time_limit=args.time_limit, progress=sys.stderr.isatty(),
                        winograd=getattr(args, "winograd", False),
                        im2col=getattr(args, "im2col", False),
                        columns=getattr(args, "columns", False))


def _cmd_dry_run(args: argparse.Namespace) -> int:
    from tvm_pet.relax.cuda_dry_run import dry_run
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


def _cmd_optimize(args: argparse.Namespace) -> int:
    from tvm_pet.pipeline.optimize import optimize
    if args.dry_run:
        return _cmd_dry_run(args)
    report = optimize(args.model, args.out, _search_config(args), _driver_options(args))
    print(f"{args.model} on {report.target}: kept the {report.kept} model")
    print(f"  baseline  {report.baseline_time_s * 1e3:9.3f} ms (median of interleaved rounds)")
    deciding = report.confirmation.look
    print(f"  candidate {report.candidate_time_s * 1e3:9.3f} ms  "
          f"(x{report.measured_speedup_of_candidate:.3f}: {deciding.what})")
    for look in report.confirmation.looks:
        if look is deciding:  # below
            continue
        if look.refused is not None:
            print(f"  {look.what}: candidate {look.candidate} refused, not timed: {look.refused}")
            continue
        verdict = (f"kept the {look.decision.kept}" if not look.decision.keep else
                   "faster beyond the noise; timed again to replicate it (below)"
                   if deciding.what.startswith("replication")
                   and deciding.candidate == look.candidate else
                   "faster beyond the noise, but another candidate is faster")
        print(f"  {look.what}: x{look.decision.ratio:.3f} (rank test p = "
              f"{look.decision.p_value:.2g}{_by_process(look)}), {verdict}")
        _print_cpu_shared(look)
    print(f"  speedup   x{report.speedup:.3f}   rule: {report.confirmation.rule}"
          f"{_by_process(deciding)}")
    _print_cpu_shared(deciding)
    looks_s = report.tuning_time_s - report.tuning.tuning_time_s
    print(f"  search {report.found.seconds:.1f} s, tuning {report.tuning_time_s:.1f} s "
          + (f"({looks_s:.0f} s of it tuning candidates before they were timed) "
             if looks_s >= 0.5 else "")
          + f"({report.new_trials} new trials), max |optimized - original| "
          f"{report.max_abs_err:.2e}")
    for a in report.applied:
        print(f"  applied {' -> '.join(a.mutant_ops)} on {a.subprogram}"
              + (f" ({a.corrected_boxes} boxes corrected)" if a.partially_equivalent else ""))
    _print_trust(report, args)
    onnx_file = "" if _onnx_missing(report) else "optimized.onnx, "
    print(f"  wrote {args.out}/report.json, optimized.so, baseline.so, {onnx_file}optimized.py")
    return 0


def _print_cpu_shared(look) -> None:
    """A line under a look timed while other processes used much of the CPU."""
    if look.cpu_shared:
        print(f"    (other processes used {look.others_share:.0%} of the CPU while this was "
              "timed: its ratio may be the machine's; time it again on a quiet machine)")


def _by_process(look) -> str:
    """``; in 2 processes: x1.21, x1.00`` for a look spread over fresh processes, else ``""``."""
    ratios = look.process_ratios
    if len(ratios) < 2:
        return ""
    return f"; in {len(ratios)} processes: " + ", ".join(f"x{r:.2f}" for r in ratios)


def _layout_hint(layout: str, target: str, coverage: dict | None) -> str | None:
    """The line pointing a CPU model with convolutions, built channels-first, at ``--layout
    NHWC``: TVM's own layout change, on both sides, which PET's ratio does not show. ``target``
    is ``--target`` as given (``llvm``, ``llvm -mcpu=haswell``, ``cuda``)."""
    if layout != "NCHW" or target.split()[0] != "llvm" or not coverage:
        return None
    if "Conv" not in coverage.get("lifted", {}):
        return None
    return ("layout: NCHW, as imported; --layout NHWC runs TVM's own ConvertLayout on both sides "
            "(whole convnets ran x1.29-x1.65 faster with it on the CPU of the NHWC table in "
            "docs/benchmarks.md)")


#: The opaque operators (kinds of :mod:`tvm_pet.relax.coverage`) that TVM 0.27 lowers to scalar
#: libm calls on a CPU and ``--fast-math`` replaces.
FAST_MATH_KINDS = ("Erf", "Gelu", "relax.nn.gelu_tanh", "Softmax", "Exp", "Tanh", "Sigmoid",
                   "relax.nn.silu")


def _fast_math_hint(fast_math: bool, target: str, coverage: dict | None) -> str | None:
    """The line pointing a CPU model with erf, exp or tanh in its non-linear operators at
    ``--fast-math``: TVM's own change, on both sides, which PET's ratio does not show."""
    if fast_math or target.split()[0] != "llvm" or not coverage:
        return None
    found = [kind for kind in FAST_MATH_KINDS if kind in coverage.get("opaque", {})]
    if not found:
        return None
    return (f"fast math: off; {', '.join(found)} run as TVM lowers them (erf and exp one scalar "
            "libm call per element); --fast-math runs TVM's own FastMathTransform on both sides "
            "(TVM itself ran x1.09-x1.58 faster with it on the BERTs, convnext_tiny and "
            "efficientnet_b0 of docs/optimize.md)")


def _onnx_missing(report) -> bool:
    return (report.optimized_onnx or "").startswith("not written")


def _tuned_line(tuning: dict) -> str:
    """What the tune stage measured, and where PET's mutant trials were charged."""
    budget = (f"the whole model within {tuning['budget']}" if tuning.get("budget")
              else f"{tuning['trials_per_task']} trials per kernel")
    original = tuning["new_trials"] - tuning["mutant_trials"]
    inside = tuning.get("inside_budget")
    if inside is None:
        return (f"tuned {budget}: {original} new trials for the original's kernels, "
                f"{tuning['mutant_trials']} for PET's mutants (at {tuning['trials_per_task']} "
                f"per kernel, beside the budget), {_split_seconds(tuning)}")
    skipped = inside["mutants_not_tuned"]
    return (f"tuned {budget}, PET's mutants inside it: {original} new trials for the original's "
            f"kernels ({inside['trials_per_task']} per kernel, then the rest by the task "
            f"scheduler), {tuning['mutant_trials']} for PET's mutants (their new kernels hold "
            f"{inside['charged_to_mutants']} of the {inside['reserve']} reserved"
            + (f"; {skipped} mutant{'s' if skipped != 1 else ''} not tuned: the reserve could "
               f"not hold {'them' if skipped != 1 else 'it'}" if skipped else "")
            + f"), {_split_seconds(tuning)}")


def _split_seconds(tuning: dict) -> str:
    """The tune stage's seconds, and where they went.

    >>> _split_seconds({"tuning_time_s": 484.5, "original_s": 191.2, "screen_s": 220.0,
    ...                 "mutants_s": 73.3, "screened_mutants": 404})
    '484 s: 191 s tuning the original, 220 s screening 404 mutants, 73 s tuning mutants'
    """
    return (f"{tuning['tuning_time_s']:.0f} s: {tuning['original_s']:.0f} s tuning the "
            f"original, {tuning['screen_s']:.0f} s screening {tuning['screened_mutants']} "
            f"mutants, {tuning['mutants_s']:.0f} s tuning mutants")


def _print_trust(report, args: argparse.Namespace) -> None:
    """The lines that say what the figures stand on: import, coverage, kernels, timing budget,
    and the layout they were built in."""
    facts = report.to_json()
    source, cov = facts["source"], facts["coverage"]
    rewrites = ", ".join(facts["tvm_rewrites"]) or "none (--no-tvm-rewrites)"
    print(f"  imported with {source['frontend']} in {source['load_time_s']:.1f} s; "
          f"TVM rewrites on both sides: {rewrites}")
    opaque = ", ".join(f"{k} x{v}" for k, v in cov["opaque"].items()) or "none"
    flops = (f"{100 * cov['coverage']:.1f}% of linear FLOPs in " if "coverage" in cov else "")
    total = cov["subprograms"]
    searched = cov.get("searched_subprograms", total)
    print(f"  coverage: {flops}{searched if searched == total else f'{searched} of {total}'} "
          f"multi-linear subprograms searched; left opaque: {opaque}")
    search = facts["search"]
    if search["stop"] == "time_limit" and not any(s["generated"] or s["cached"]
                                                  for s in search["subsets"]):
        print(f"  the search's time limit ran out before it searched any subprogram: give "
              f"--time-limit more than {args.time_limit:g} s (the measured cost first times "
              f"the original's kernels, untuned ones too), or tune first")
    elif search["stop"] == "time_limit" and searched < total:
        print(f"  the search's time limit ran out after {searched} of {total} subprograms: "
              f"give --time-limit more than {args.time_limit:g} s to search them all")
    if facts.get("records_plan"):
        print(f"  {facts['records_plan']}")
    if report.baseline_lowering is not None:
        print(f"  {report.baseline_lowering.line()}")
    tuning = facts["tuning"]
    if tuning.get("tasks") is not None:
        print("  " + _tuned_line(tuning))
        picked = [m for m in tuning["tuned_mutants"] if m["subprogram"] != "combined"]
        by_flops = tuning.get("screened_by_flops", 0)
        print(f"  screen: {tuning['screened_mutants']} mutants compared from their fusion "
              f"regions ({tuning['screened_mutants'] - by_flops} timed untuned, {by_flops} by "
              f"FLOPs: kernels too large to time untuned, or Winograd and window forms)"
              + (f"; short-tuned {tuning['short_tuned']} more at {tuning['screen_trials']} "
                 f"trials per kernel to rank them tuned" if tuning.get("short_tuned") else "")
              + _picked_line(picked))
    if facts["search"]["set_aside_untuned"]:
        print(f"  the search set aside {facts['search']['set_aside_untuned']} rewrite(s) whose "
              f"new kernels have no records, untimed (an untuned kernel against a tuned one); "
              f"`tvm-pet tune` tunes the most promising")
    if facts["search"].get("set_aside_unbuildable"):
        print(f"  the search set aside {facts['search']['set_aside_unbuildable']} rewrite(s) with "
              f"a new kernel that TVM cannot compile for this target")
    if facts["search"]["near_ties_confirmed"]:
        print(f"  {facts['search']['near_ties_confirmed']} candidate(s) timed were near ties: "
              f"costed at or a little above the original (one cached timing per kernel cannot "
              f"rank them), so the end-to-end timing decided")
    print(f"  {report.kernels_line()}")
    c = report.confirmation
    threads = os.environ.get("TVM_NUM_THREADS")  # tvm_pet.tune.threads, or the user's
    print(f"  timing: one call {c.baseline.call_s:.3g} s, {_timing_spent(c)}"
          + (f", TVM on {threads} thread(s)" if threads else "")
          + "".join(f"; {n}" for n in c.notes))
    if _onnx_missing(report):
        print(f"  optimized.onnx {report.optimized_onnx}")
    for hint in (_layout_hint(args.layout, args.target, cov),
                 _fast_math_hint(args.fast_math, args.target, cov)):
        if hint:
            print(f"  {hint}")
    print(f"  total {report.total_time_s:.1f} s")


def _timing_spent(c) -> str:
    """``12.0 s of 60 s``; or, when the timing outran what ``--time-limit`` left it (the
    smallest look the rank test can decide on, :func:`~tvm_pet.pipeline.confirm.plan_timing`),
    says so rather than ``23.3 s of 0 s``."""
    if c.budget_s is None:
        return f"{c.seconds:.1f} s of unbounded"
    if c.seconds <= c.budget_s + 1.0:
        return f"{c.seconds:.1f} s of {c.budget_s:.0f} s"
    return (f"{c.seconds:.1f} s, past the {c.budget_s:.0f} s --time-limit left it (a look "
            f"times at least the fewest samples the rank test can decide on)")


def _picked_line(picked: list[dict]) -> str:
    """The tuned mutants in the summary: those aligning an awkward side, then the others with
    their expected savings."""
    aligning = [m["subprogram"] for m in picked if m.get("aligns")]
    ranked = [m for m in picked if not m.get("aligns")]
    line = (f"; tuned {len(aligning)} padding an awkward side to a smooth one "
            f"({', '.join(aligning)}) and" if aligning else "; tuned")
    return (line + f" the {len(ranked)} with the best expected saving"
            + "".join(f"; {m['subprogram']} {m['expected_saving_ms']:.2f} ms"
                      for m in ranked if m["expected_saving_ms"] is not None))


def _cmd_tune(args: argparse.Namespace) -> int:
    from tvm_pet.pipeline.optimize import load_model, toolchain_for
    from tvm_pet.pipeline.toolchain import tvm_toolchain
    from tvm_pet.pipeline.tune import tune_model
    from tvm_pet.pipeline.progress import Progress
    options = _driver_options(args)
    loaded = load_model(args.model, options)
    progress = Progress(options.progress)
    # the original's kernels as optimize builds them (its baseline may be tvm_pet's lowering),
    # with optimize's line saying so
    toolchain, _ = toolchain_for(loaded, options, tvm_toolchain(
        options.target, options.records_dir, options.rpc, run_here=False), progress)
    summary = tune_model(loaded.program, _search_config(args), options, toolchain,
                         progress=progress.note)
    print(json.dumps(summary.to_json(), indent=2))
    return 0


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


def _progress_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--progress", action="store_true",
                       help="progress lines on stderr even when it is not a terminal")
    group.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tvm-pet", description="PET for Apache TVM")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_verify(sub)
    _add_explore(sub)
    _add_optimize_and_tune(sub)
    _add_model_and_example(sub)
    return parser


def _add_verify(sub) -> None:
    v = sub.add_parser("verify", help="where do two multi-linear ONNX models differ?")
    v.add_argument("original")
    v.add_argument("candidate")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    v.add_argument("--tests", type=int, default=4, help="random tests per position (default 4)")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--max-boxes", type=int, default=20, help="boxes listed per output")
    v.set_defaults(func=_cmd_verify)


def _add_explore(sub) -> None:
    x = sub.add_parser("explore", help="list verified mutants of every multi-linear subprogram")
    x.add_argument("model")
    x.add_argument("--depth", type=int, default=3, help="most operators per mutant (default 3)")
    x.add_argument("--rounds", type=int, default=1, help="rounds of mutating mutants (default 1)")
    x.add_argument("--time-limit", type=float, default=300.0, help="seconds (default 300)")
    x.add_argument("--emit", metavar="DIR", help="write subprograms and mutants as ONNX")
    x.add_argument("--json", action="store_true", help="print the result as JSON")
    x.add_argument("--max-list", type=int, default=10, help="mutants listed per subprogram")
    x.add_argument("--no-tvm-rewrites", action="store_true",
                   help="explore the model as TVM imports it, without TVM's graph rewrites")
    _input_shape_flag(x)
    _progress_flags(x)
    x.set_defaults(func=_cmd_explore)


def _input_shape_flag(o) -> None:
    o.add_argument("--input-shape", action="append", type=parse_input_shape, default=[],
                   metavar="NAME:D0,D1,...",
                   help="the shape of an ONNX input with dynamic dimensions (a batch axis, "
                        "a sequence length), e.g. input:1,3,224,224; once per such input; "
                        "without NAME: the model's only input")


def parse_input_shape(text: str) -> tuple:
    """``--input-shape``'s ``NAME:D0,D1,...`` as ``(NAME, (D0, D1, ...))``; NAME is None when
    left out, and may hold colons itself (``input_1:0:1,3``: the last colon separates).

    >>> parse_input_shape("x:[1, 3, 224, 224]")
    ('x', (1, 3, 224, 224))
    >>> parse_input_shape("2,4")
    (None, (2, 4))
    """
    name, _, dims = text.rpartition(":")
    try:
        shape = tuple(int(d) for d in dims.strip().strip("[]").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give NAME:D0,D1,... with whole numbers, e.g. input:1,3,224,224") from None
    if any(d < 1 for d in shape):
        raise argparse.ArgumentTypeError(f"{text!r}: every dimension must be at least 1")
    return (name or None), shape


def _add_budget_options(o) -> None:
    """``--budget``, ``--charge`` and ``--mutant-share`` of optimize and tune."""
    o.add_argument("--budget", metavar="N|Nm",
                   help="tune the whole model within N trials in all, or N minutes (20m), "
                        "shared across its kernels by MetaSchedule's task scheduler; PET's "
                        "mutant kernels then get the trials per kernel the original got, "
                        "reported beside it, or charged inside it with --charge inside "
                        "(replaces --trials)")
    o.add_argument("--charge", choices=("beside", "inside"), default="beside",
                   help="with --budget N (trials): PET's mutant trials beside the budget "
                        "(default: TVM's kernels get all N), or inside it: the original "
                        "first gets 1 - --mutant-share of N, the mutants' new kernels as many "
                        "trials each while the share holds them, the original the rest; the "
                        "run then measures N trials in all")
    o.add_argument("--mutant-share", type=float, default=0.25, metavar="F",
                   help="with --charge inside: the part of the budget kept for PET's mutants "
                        "(default 0.25; on a one-kernel model a mutant needs at least 0.5)")


def _add_optimize_and_tune(sub) -> None:
    for name, helptext in (("optimize", "optimize an ONNX or torch.export (.pt2) model with PET "
                                        "for a TVM target"),
                           ("tune", "tune a model's kernels and its promising mutants")):
        o = sub.add_parser(name, help=helptext)
        o.add_argument("model")
        o.add_argument("--target", default="llvm",
                       help="llvm (default: this CPU), e.g. 'llvm -mcpu=haswell', or cuda")
        o.add_argument("--trials", type=int, default=None if name == "optimize" else 64,
                       help="MetaSchedule trials per task (optimize: 0 = use the records only; "
                            f"by default, {DEFAULT_UNTUNED_TRIALS} where kernels have no record "
                            "anywhere, own or borrowed, if there are at most 8 of them; with "
                            f"more, the whole model within {DEFAULT_UNTUNED_MINUTES} minutes)")
        _add_budget_options(o)
        o.add_argument("--promising", type=int, default=4, metavar="N",
                       help="mutants of the whole model tuned besides the original (default 4; "
                            "up to half of them pad an awkward side to a smooth one, the rest "
                            "have the best expected saving; --winograd tunes up to N more, "
                            "convolutions by Winograd's algorithm, and --im2col up to N more, "
                            "convolutions as a product over their windows)")
        o.add_argument("--second-screen", type=int, default=0, metavar="N",
                       help="short-tune N more mutants (--screen-trials per kernel), those "
                            "whose new kernels replace the most time across the model, and rank "
                            "them by their tuned time before choosing the ones to tune (default "
                            "0: off; about a minute a mutant here)")
        o.add_argument("--screen-trials", type=int, metavar="T",
                       help="trials per kernel of --second-screen (default 8; at "
                            "most --trials): 8 can rank a large kernel wrongly (CSRNet's "
                            "dilated 512-channel conv after Pad -> Conv: 45 ms at 8 trials, 22-"
                            "51 ms at 32 over three seeds, the original 28-59 ms)")
        o.add_argument("--seed", type=int, default=0,
                       help="the tuning seed (default 0); only kernels tuned now draw with it. "
                            "At 32 trials per task a kernel's tuned time can move x2 between "
                            "seeds here: benchmarks/results/conv_forms.md")
        o.add_argument("--depth", type=int, default=3)
        o.add_argument("--rounds", type=int, default=1,
                       help="rounds of mutation (default 1, as in the recorded benchmarks)")
        o.add_argument("--topk", type=int, default=4)
        _offered_forms_flags(o)
        o.add_argument("--time-limit", type=float, default=None,
                       help="seconds for the whole run: import, search and end-to-end timing "
                            f"(default {_BASE_TIME_LIMIT[name]:g}"
                            + (", so that a model on untuned kernels still ends within 5 "
                               "minutes" if name == "optimize" else "")
                            + f"; with --budget Nm, {BUDGET_TIME_LIMIT_PER_MINUTE:g} s per "
                            "minute of the budget when that is more; the timing takes at most "
                            "a quarter)")
        _lowering_flags(o)
        _input_shape_flag(o)
        _progress_flags(o)
        o.add_argument("--records", help="tuning records folder (default tuning_logs/<target>)")
        o.add_argument("--rpc", metavar="HOST:PORT:KEY", help="measure through an RPC tracker")
        if name == "optimize":
            _add_optimize_flags(o)
            o.set_defaults(func=_cmd_optimize)
        else:
            o.set_defaults(func=_cmd_tune)


def _offered_forms_flags(o) -> None:
    """The flags of what PET's search offers besides its own rewrites: other algorithms and
    lowerings of a convolution, each tuned and kept only where it measures faster."""
    o.add_argument("--winograd", action="store_true",
                   help="also offer each 3x3 stride-1 convolution by Winograd's F(4x4, 3x3) "
                        "(a quarter of the multiplications; TVM's CPU lowering has only "
                        "the direct form), tuned on the convolutions taking the most time "
                        "(up to --promising more mutants) and chosen where its tuned "
                        "kernels measure faster. "
                        "Its rounding differs from the direct form's (about 4e-6 of the "
                        "output's scale on 512 channels)")
    o.add_argument("--im2col", action="store_true",
                   help="also offer each 2-D or 3-D convolution larger than 1x1 as one matrix "
                        "product over its shifted windows (the same products, summed in "
                        "another order), tuned in the places kept for mutants the untuned "
                        "screen cannot rank and chosen where its tuned kernels measure "
                        "faster")
    o.add_argument("--columns", action="store_true",
                   help="also offer a wide matrix product (its width a multiple of its "
                        "reduction, such as the Q, K and V products TVM merges) as products "
                        "over square pieces of its columns, concatenated (the same sums in the "
                        "same order), tuned in the places kept for mutants the untuned screen "
                        "cannot rank and chosen where its tuned kernels measure faster")


def _lowering_flags(o) -> None:
    """The flags of how both sides are lowered: TVM's rewrites, the layout, fast math."""
    o.add_argument("--no-tvm-rewrites", action="store_true",
                   help="compare with TVM's default import: skip TVM's own graph rewrites "
                        "(BN folding, CSE, CombineParallelMatmul), run on both sides by "
                        "default")
    o.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW",
                   help="the convolutions' layout on both sides: NHWC runs TVM's "
                        "ConvertLayout (conv2d NHWC/HWIO, conv3d NDHWC/DHWIO) on the "
                        "original and on every candidate as they are lowered; PET searches "
                        "the model as imported (default NCHW: as imported). Records are "
                        "per layout: the shipped ones hold both for four of the paper's "
                        "models")
    o.add_argument("--fast-math", action="store_true",
                   help="run TVM's FastMathTransform on both sides as they are lowered: "
                        "erf, exp, tanh and softmax by TVM's polynomial approximations "
                        "(vectorized; fast_erf is within 3.3e-7 of erf), GELU, SiLU and "
                        "sigmoid written out in them first. TVM's default "
                        "lowers erf to one scalar libm call per element (BERT's GELU); "
                        "records are per form")


def _add_optimize_flags(o) -> None:
    """The flags of ``optimize`` alone: its output, cost and end-to-end timing."""
    o.add_argument("--out", required=True, help="output folder")
    o.add_argument("--cost", choices=("measured", "analytic"), default="measured")
    o.add_argument("--confirm", type=int, default=3,
                   help="candidates timed end to end, best first, before the original is kept "
                        "(default 3)")
    o.add_argument("--first-kept", action="store_true",
                   help="keep the first candidate the rule keeps (by default every one is "
                        "timed, and the fastest of those kept replaces the original)")
    o.add_argument("--no-second-look", action="store_true",
                   help="decide close calls on the first timing alone (by default they are "
                        "tuned again with a second seed, or timed over more rounds)")
    o.add_argument("--second-look-kernels", type=int, default=8, metavar="N",
                   help="the most kernels a close call's second look tunes again, at twice "
                        "the trials (about 2 minutes each at 32 trials on 2 cores); with more, "
                        "it times the same builds again over more rounds (default 8)")
    o.add_argument("--no-replication", action="store_true",
                   help="replace the original on the kept candidate's one look (by default it "
                        "is timed once more, and kept only if the rule keeps it again)")
    o.add_argument("--timing-processes", type=int, default=2, metavar="N",
                   help="spread each look's rounds over N fresh processes, on a CPU (default "
                        "2): some binaries' speed is drawn once per process by its address "
                        "layout; 1 times in this process")
    o.add_argument("--dry-run", action="store_true",
                   help="cuda without a GPU: search, build every original, mutant and "
                        "correction with nvcc, write them, stop before running a kernel")
    o.add_argument("--arch", default="sm_90", help="CUDA arch of --dry-run (sm_90)")


def _add_model_and_example(sub) -> None:
    m = sub.add_parser("model", help="write a seeded model of the zoo as ONNX")
    m.add_argument("name", help="e.g. dilated_conv, conv5x5, two_1x1_convs, three_matmuls, "
                                "csrnet_backend, resnet18, bert_encoder")
    m.add_argument("file")
    m.set_defaults(func=_cmd_model)
    e = sub.add_parser("example", help="write a paper example pair as ONNX models")
    e.add_argument("name", choices=EXAMPLES)
    e.add_argument("dir")
    e.set_defaults(func=_cmd_example)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tvm-pet`` console script. As the script (no ``argv``), TVM's
    repeated warnings on stderr are shown once (:func:`tvm_pet.tvm_log.tvm_warnings_once`)."""
    if argv is None:
        from tvm_pet.tvm_log import tvm_warnings_once

        with tvm_warnings_once():
            return _main(None)
    return _main(argv)


#: ``--time-limit``'s default per command (tuning not counted).
_BASE_TIME_LIMIT = {"optimize": 240.0, "tune": 600.0}
#: With ``--budget Nm`` and no ``--time-limit``: seconds of time limit per minute of the budget
#: (half the tuning time again), when that is more than the default. Measured on swin_t at 224
#: (124 kernels, ``--budget 30m``): with 900 s the search took 431 s and the timing 109 s for
#: its three candidates; the default 240 s had left the timing nothing and two candidates
#: untimed.
BUDGET_TIME_LIMIT_PER_MINUTE = 30.0


def _default_time_limit(args: argparse.Namespace) -> None:
    """Fill in ``--time-limit`` where it was not given: the command's default, or more with a
    ``--budget`` in minutes (:data:`BUDGET_TIME_LIMIT_PER_MINUTE`)."""
    if getattr(args, "time_limit", 0.0) is not None:
        return
    from tvm_pet.pipeline.options import WholeBudget
    args.time_limit = _BASE_TIME_LIMIT[args.command]
    budget = getattr(args, "budget", None)
    minutes = None if budget is None else WholeBudget.parse(budget).minutes
    if minutes is not None:
        args.time_limit = max(args.time_limit, BUDGET_TIME_LIMIT_PER_MINUTE * minutes)


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _default_time_limit(args)
        return args.func(args)
    except PetError as e:
        print(f"tvm-pet {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"tvm-pet {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        kept = ("; the tuning records measured so far are kept, and a second run goes on from "
                "them" if args.command in ("optimize", "tune") else "")
        print(f"tvm-pet {args.command}: interrupted{kept}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
