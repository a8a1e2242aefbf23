"""The ``tvm-pet`` command line.

``tvm-pet verify A.onnx B.onnx [--json] [--tests T] [--seed S]``
    PET's verifier as a "diff" of two tensor programs: per output, whether the two models compute
    the same thing, and the boxes where they differ. Exit code 0 either way, 2 on bad input.

``tvm-pet explore MODEL [--depth D] [--rounds R] [--emit DIR] [--json] [--verbose]``
    Runs the mutant generator and the verifier on every multi-linear subprogram and counts the
    verified mutants (``--verbose`` lists them); ``--emit`` writes each subprogram and each
    corrected mutant as ONNX, its inputs and outputs named as the model names them.

``tvm-pet optimize MODEL --out DIR [--target T] [--trials N | --budget N|Nm] [--verbose]``
    Optimizes the model with PET for a TVM target, times it end to end against TVM's own build
    of the original (the same tuning records and graph rewrites on both sides), keeps it only
    where it is faster, and writes ``report.json``, ``optimized.so``, ``baseline.so``,
    ``optimized.onnx`` (where tvm_pet can write it) and ``optimized.py`` into DIR. It prints a
    short summary (``--verbose``: the full account). ``--help`` lists the options a user sets,
    ``--help-all`` every option.

``tvm-pet tune MODEL [--target T] [--trials N | --budget N|Nm] [--verbose]``
    Tunes the model's kernels and those of its most promising mutants into the tuning records.

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
import collections
import dataclasses
import json
import os
import re
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
    loaded = load_model(args.model, _driver_options(args))
    config = SearchConfig(depth=args.depth, rounds=args.rounds, time_limit=args.time_limit,
                          progress=not args.json and sys.stderr.isatty())
    report = explore(loaded.program, config)
    if args.emit:
        index = write_emitted(report, args.emit, _model_names(loaded))
        if not args.json:
            print(f"wrote {index}")
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0
    print(f"{args.model}: {len(report.subprograms)} multi-linear subprograms "
          f"({report.seconds:.1f} s, stopped: {report.stop.value})")
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


def _model_names(loaded) -> dict[str, str]:
    """The model's own names of the loaded program's inputs and outputs, for the ONNX files
    ``explore --emit`` writes (none for a model that is not ONNX)."""
    if loaded.onnx_model is None:
        return {}
    from tvm_pet.onnx.exporter import model_names
    return model_names(loaded.onnx_model, [spec.name for spec in loaded.inputs],
                       loaded.program.outputs)


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
                         prepack=not getattr(args, "tvm_default", False),
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
                        im2col=getattr(args, "im2col", False))


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


def _cmd_optimize(args: argparse.Namespace) -> int:
    from tvm_pet.pipeline.optimize import optimize
    if args.dry_run:
        return _cmd_dry_run(args)
    report = optimize(args.model, args.out, _search_config(args), _driver_options(args))
    if args.verbose:
        _print_account(report, args)
    else:
        print("\n".join(summary_lines(report, args)))
    return 0


def summary_lines(report, args: argparse.Namespace) -> list[str]:
    """``optimize``'s short summary, at most 8 lines: the decision and the speed-up with its
    spread over the timing processes, the target and PET's error, the rewrites applied,
    whether the kernels were tuned, how much of the model PET searched, a note where the timing
    shared the CPU, the lowering options worth a try, and where ``report.json`` is.
    ``--verbose`` prints the full account instead (:func:`_print_account`)."""
    signs = _Signs.for_stream(sys.stdout)
    facts = report.to_json()
    lines = [_decision_line(report, signs), _target_line(report), _applied_line(report, signs),
             _kernels_line(report), _coverage_line(facts, args.time_limit)]
    deciding = report.confirmation.look
    if deciding.cpu_shared and deciding.candidate is not None:
        lines.append(f"  note: other processes used {deciding.others_share:.0%} of the CPU during "
                     "the timing: the ratio may be the machine's; time it again on a quiet "
                     "machine")
    hints = [flag for flag, hint in (
        ("--layout NHWC", _layout_hint(args.layout, args.target, facts["coverage"])),
        ("--fast-math", _fast_math_hint(args.fast_math, args.target, facts["coverage"]))) if hint]
    if hints:
        lines.append(f"  worth a try: {' and '.join(hints)} (TVM's own rewrites, on both sides; "
                     "--verbose says why)")
    missing = " (optimized.onnx not written: report.json says why)" if _onnx_missing(report) \
        else ""
    lines.append(f"  wrote {os.path.join(args.out, 'report.json')} and the builds{missing}; "
                 "--verbose for the full account")
    return lines


@dataclasses.dataclass(frozen=True)
class _Signs:
    """The multiplication sign and the dash of the short summary: ``×`` and ``–`` where the
    stream can write them, else ``x`` and ``-``."""

    times: str = "×"
    dash: str = "–"

    @classmethod
    def for_stream(cls, stream) -> "_Signs":
        """The signs ``stream`` can write (one without an encoding, as a ``StringIO``, writes
        any)."""
        encoding = getattr(stream, "encoding", None)
        try:
            "×–".encode(encoding or "utf-8")
        except (UnicodeEncodeError, LookupError):
            return cls("x", "-")
        return cls()

    def spread(self, look) -> str:
        """A look's ratios over its timing processes, lowest to highest."""
        ratios = look.process_ratios
        if len(ratios) < 2:
            return "timed in one process"
        return (f"{self.times}{min(ratios):.2f}{self.dash}{self.times}{max(ratios):.2f} over "
                f"{len(ratios)} processes")


def _decision_line(report, signs: _Signs) -> str:
    """Which program was kept, and the speed-up (kept) or the best candidate's ratio (not)."""
    c = report.confirmation
    if c.keep:
        return (f"{report.model}: kept PET's program, {signs.times}{report.speedup:.2f} faster "
                f"than TVM's build of the original ({signs.spread(c.look)})")
    timed = [k for k in c.looks if k.refused is None and k.candidate is not None]
    if timed:
        best = max(timed, key=lambda k: k.decision.ratio)
        return (f"{report.model}: kept the original: no candidate was faster beyond the noise "
                f"(the best {signs.times}{best.decision.ratio:.2f}, {signs.spread(best)})")
    why = ("every candidate was refused (its build computes something else, or TVM cannot "
           "compile it)" if any(k.refused is not None for k in c.looks)
           else "the search found no rewrite costed faster than the original")
    return f"{report.model}: kept the original: {why}"


def _target_words(target: str) -> str:
    """The target as a command line names it: ``llvm -mcpu=skylake-avx512`` for TVM's JSON
    form of it, else as it is.

    >>> _target_words('{"kind": "llvm", "keys": ["cpu"], "mcpu": "haswell"}')
    'llvm -mcpu=haswell'
    >>> _target_words("cuda -arch=sm_90")
    'cuda -arch=sm_90'
    """
    try:
        parsed = json.loads(target)
    except ValueError:
        return target
    if not isinstance(parsed, dict) or "kind" not in parsed:
        return target
    return " ".join([parsed["kind"]] + [f"-{key}={parsed[key]}" for key in ("mcpu", "arch")
                                        if parsed.get(key)])


def _target_line(report) -> str:
    """The target, and what ``optimized.so`` holds: PET's program, with its error against the
    original's outputs, or TVM's build of the original. (The times are ``--verbose``'s: over
    several timing processes, the speed-up is the mean of the processes' ratios, which the
    medians of the pooled samples need not show.)"""
    target = _target_words(report.target)
    if not report.confirmation.keep:
        return f"  target {target}; optimized.so is TVM's build of the original"
    return (f"  target {target}; PET's outputs are within {report.max_abs_err:.1e} of the "
            "original's")


def _applied_line(report, signs: _Signs) -> str:
    """The rewrites in ``optimized.so``, counted by the operators they put in place."""
    applied = report.applied
    if not applied:
        return "  applied: none"
    kinds = collections.Counter(" -> ".join(a.mutant_ops) for a in applied).most_common()
    named = [ops + (f" {signs.times}{n}" if n > 1 else "") for ops, n in kinds[:3]]
    more = f", and {len(kinds) - 3} more kinds" if len(kinds) > 3 else ""
    corrected = sum(a.partially_equivalent for a in applied)
    return (f"  applied {len(applied)} rewrite{'s' if len(applied) != 1 else ''}: "
            f"{', '.join(named)}{more}"
            + (f" ({corrected} partly equivalent, corrected)" if corrected else ""))


#: The counts of the records plan's line (:meth:`tvm_pet.tune.records_plan.RecordsPlan.summary`).
_PLAN_COUNTS = re.compile(r"(\d+) from its own records(?:, (\d+) borrowed from [^,]+)?, "
                          r"(\d+) untuned")


def _kernels_line(report) -> str:
    """Whether the kernels the decision stands on were tuned: how many had records (the
    target's own, or borrowed from a compatible target's, as the records plan found them), and
    the trials this run measured."""
    trials = f"{report.new_trials} new trial{'s' if report.new_trials != 1 else ''}"
    if report.kernels is None:
        return f"  kernels: not counted; {trials}"
    total, tuned = report.kernels
    state = ("tuned" if tuned == total else "untuned" if tuned == 0 else "partly untuned")
    line = (f"  kernels: {state}, " + (f"all {total}" if tuned == total else f"{tuned} of {total}")
            + " with records")
    found = _PLAN_COUNTS.search(report.records_plan or "")
    if found:
        own, borrowed = int(found[1]), int(found[2] or 0)
        now = tuned - own - borrowed if report.new_trials else 0
        line += (f" ({own} own, {borrowed} borrowed" + (f", {now} tuned now" if now > 0 else "")
                 + ")")
    if report.kept_kernels is not None and report.kept_kernels[1] < report.kept_kernels[0]:
        line += (f"; PET's program: {report.kept_kernels[1]} of {report.kept_kernels[0]} with "
                 "records")
    return line + f"; {trials}" + (" (--trials N tunes them)" if tuned < total else "")


def _coverage_line(facts: dict, time_limit: float) -> str:
    """How much of the model PET searched, and what it left opaque."""
    cov, search = facts["coverage"], facts["search"]
    if not cov:
        return "  coverage: not counted"
    total = cov["subprograms"]
    searched = cov.get("searched_subprograms", total)
    flops = f" ({100 * cov['coverage']:.1f}% of linear FLOPs)" if "coverage" in cov else ""
    opaque = sum(cov["opaque"].values())
    line = (f"  coverage: {searched} of {total} multi-linear subprograms searched{flops}; "
            + (f"{opaque} operator{'s' if opaque != 1 else ''} opaque"
               f" ({', '.join(list(cov['opaque'])[:3])}{', ...' if len(cov['opaque']) > 3 else ''})"
               if opaque else "nothing left opaque"))
    if search["stop"] == "time_limit" and searched < total:
        line += f"; the time limit ran out (give --time-limit more than {time_limit:g} s)"
    return line


def _print_account(report, args: argparse.Namespace) -> None:
    """``optimize --verbose``: every look and its verdict, the rule, the search and the tuning,
    the rewrites applied, and what the figures stand on (:func:`_print_trust`)."""
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
    if args.verbose:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        print("\n".join(tune_lines(summary.to_json(), args)))
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


def _progress_flags(parser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--progress", action="store_true",
                       help="progress lines on stderr, even when it is not a terminal")
    group.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


class _HelpAll(argparse.Action):
    """``--help-all``: the help with every option, those :func:`_advanced` keeps out of
    ``--help`` too, then exit."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="show every option, the advanced ones too, and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        hidden = [a for a in parser._actions if hasattr(a, "advanced_help")]
        for action in hidden:
            action.help = action.advanced_help
        try:
            parser.print_help()
        finally:
            for action in hidden:
                action.help = argparse.SUPPRESS
        parser.exit()


def _advanced(group, *flags: str, help: str, **kwargs) -> None:
    """An option that works as any other, kept out of ``--help``; ``--help-all`` lists it with
    ``help``."""
    action = group.add_argument(*flags, help=argparse.SUPPRESS, **kwargs)
    action.advanced_help = help


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
    x.add_argument("--max-list", type=int, default=10,
                   help="mutants listed per subprogram with --verbose (default 10)")
    x.add_argument("--no-tvm-rewrites", action="store_true",
                   help="explore the model as TVM imports it, without TVM's graph rewrites")
    _input_shape_flag(x)
    _progress_flags(x)
    x.add_argument("--verbose", action="store_true",
                   help="list every subprogram and its mutants (default: a short summary)")
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


#: What ``optimize`` and ``tune`` do, in ``--help``.
_DESCRIPTIONS = {
    "optimize": "Optimize a model with PET for a TVM target: search for rewrites the verifier "
                "proves equal to the original, time the best end to end against TVM's own "
                "build of the original (the same tuning records, the same TVM rewrites), and "
                "keep PET's program only where it is faster beyond the noise.",
    "tune": "Tune the kernels of a model and those of PET's most promising rewrites into the "
            "tuning records, for a later optimize.",
}


def _add_optimize_and_tune(sub) -> None:
    """``optimize`` and ``tune``: what ``--help`` shows (what to build, the budget, the output)
    and the advanced options ``--help-all`` adds."""
    for name, helptext in (("optimize", "optimize an ONNX or torch.export (.pt2) model with PET "
                                        "for a TVM target"),
                           ("tune", "tune a model's kernels and its promising mutants")):
        o = sub.add_parser(name, help=helptext, description=_DESCRIPTIONS[name],
                           usage="%(prog)s MODEL" + (" --out DIR" if name == "optimize" else "")
                                 + " [options]")
        o.add_argument("--help-all", action=_HelpAll)
        _build_flags(o.add_argument_group("what to build"))
        _budget_flags(o.add_argument_group("budget"), name)
        output = o.add_argument_group("output")
        if name == "optimize":
            output.add_argument("--out", required=True, metavar="DIR",
                                help="the folder to write report.json, both builds and the "
                                     "optimized model into")
        _progress_flags(output)
        output.add_argument("--verbose", action="store_true",
                            help="print the full account: every timing, the tuning, the "
                                 "records and the search (default: a short summary)"
                            if name == "optimize" else
                            "print the full summary as JSON (default: a few lines)")
        _search_flags(o.add_argument_group("search (advanced)"), name)
        _tuning_flags(o.add_argument_group("tuning (advanced)"))
        if name == "optimize":
            _timing_flags(o.add_argument_group("end-to-end timing and decision (advanced)"))
            o.set_defaults(func=_cmd_optimize)
        else:
            o.set_defaults(func=_cmd_tune)


def _build_flags(g) -> None:
    """What to build: the model, the target, its input shapes, and how both sides are
    lowered."""
    g.add_argument("model", help="an ONNX file, or a .pt2 file saved with torch.export.save")
    g.add_argument("--target", default="llvm",
                   help="the TVM target: llvm (this CPU, the default), e.g. "
                        "'llvm -mcpu=haswell', or cuda")
    _input_shape_flag(g)
    g.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW",
                   help="the convolutions' layout on both sides: NHWC runs TVM's "
                        "ConvertLayout as they are lowered (default NCHW, as imported)")
    g.add_argument("--fast-math", action="store_true",
                   help="lower both sides with TVM's FastMathTransform: erf, exp, tanh and "
                        "softmax by vectorized polynomial approximations")
    _advanced(g, "--tvm-default", action="store_true",
              help="build both sides as TVM's default pipeline does, the weights in the "
                   "model's layouts (default on a CPU: TVM's best build, the weights prepacked "
                   "into the layouts the tuned kernels read)")
    g.add_argument("--winograd", action="store_true",
                   help="also offer each 3x3 stride-1 convolution by Winograd's F(4x4, 3x3) "
                        "(a quarter of the multiplications, another rounding), kept where its "
                        "tuned kernels measure faster")


def _budget_flags(g, name: str) -> None:
    """The budget: tuning trials or a whole-model budget, the time limit, the records and the
    tuning seed."""
    g.add_argument("--trials", type=int, default=None if name == "optimize" else 64,
                   metavar="N",
                   help="MetaSchedule trials per kernel; 0: the tuning records only (default: "
                        f"{DEFAULT_UNTUNED_TRIALS} for each kernel with no record anywhere, or "
                        f"the whole model within {DEFAULT_UNTUNED_MINUTES} minutes where more "
                        "than 8 have none)" if name == "optimize" else
                        "MetaSchedule trials per kernel (default 64)")
    g.add_argument("--budget", metavar="N|Nm",
                   help="tune the whole model within N trials in all, or N minutes (20m), "
                        "shared across its kernels by MetaSchedule's task scheduler "
                        "(instead of --trials)")
    g.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="seconds for the whole run, tuning not counted (default "
                        f"{_BASE_TIME_LIMIT[name]:g}; with --budget Nm, "
                        f"{BUDGET_TIME_LIMIT_PER_MINUTE:g} per minute of it where that is more)")
    g.add_argument("--records", metavar="DIR",
                   help="the tuning records folder to read and add to (default: the target's "
                        "records in the working directory, else those shipped with tvm_pet)")
    g.add_argument("--seed", type=int, default=0, metavar="N",
                   help="the tuning seed (default 0); only kernels tuned now draw with it")


def _search_flags(g, name: str) -> None:
    """The search's budgets, the forms it offers besides PET's own rewrites, and (``optimize``)
    its cost model."""
    _advanced(g, "--depth", type=int, metavar="N", default=3,
              help="most operators per mutant (default 3)")
    _advanced(g, "--rounds", type=int, metavar="N", default=1,
              help="rounds of mutation: the next round mutates the best mutants found "
                   "(default 1)")
    _advanced(g, "--topk", type=int, metavar="N", default=4,
              help="programs kept in the search's heap (default 4)")
    _advanced(g, "--im2col", action="store_true",
              help="also offer each 2-D or 3-D convolution larger than 1x1 as one matrix "
                   "product over its shifted windows (the same products, summed in another "
                   "order), tuned in the places kept for mutants the untuned screen cannot "
                   "rank and kept where its tuned kernels measure faster")
    _advanced(g, "--columns", action="store_true",
              help="no longer has an effect (matrix products in pieces of their columns are "
                   "not offered any more); accepted so that earlier command lines still run")
    _advanced(g, "--no-tvm-rewrites", action="store_true",
              help="compare with TVM's default import: skip TVM's own graph rewrites (BN "
                   "folding, CSE, CombineParallelMatmul), run on both sides by default")
    if name == "optimize":
        _advanced(g, "--cost", choices=("measured", "analytic"), default="measured",
                  help="how the search costs a candidate: measured (TVM's kernels, timed; the "
                       "default) or analytic (counted FLOPs and bytes, nothing run)")


def _tuning_flags(g) -> None:
    """Which of PET's mutants are tuned, and how their trials are charged."""
    _advanced(g, "--promising", type=int, default=4, metavar="N",
              help="mutants of the whole model tuned besides the original (default 4; up to "
                   "half of them pad an awkward side to a smooth one, the rest have the best "
                   "expected saving; --winograd tunes up to N more, convolutions by "
                   "Winograd's algorithm, and --im2col up to N more, convolutions as a product "
                   "over their windows)")
    _advanced(g, "--second-screen", type=int, default=0, metavar="N",
              help="short-tune N more mutants (--screen-trials per kernel), those whose new "
                   "kernels replace the most time across the model, and rank them by their "
                   "tuned time before choosing the ones to tune (default 0: off)")
    _advanced(g, "--screen-trials", type=int, metavar="T",
              help="trials per kernel of --second-screen (default 8; at most --trials); few "
                   "trials can rank a large kernel wrongly")
    _advanced(g, "--charge", choices=("beside", "inside"), default="beside",
              help="with --budget N (trials): PET's mutant trials beside the budget (default: "
                   "TVM's kernels get all N), or inside it: the original first gets 1 - "
                   "--mutant-share of N, the mutants' new kernels as many trials each while "
                   "the share holds them, the original the rest; the run then measures N "
                   "trials in all")
    _advanced(g, "--mutant-share", type=float, default=0.25, metavar="F",
              help="with --charge inside: the part of the budget kept for PET's mutants "
                   "(default 0.25; on a one-kernel model a mutant needs at least 0.5)")
    _advanced(g, "--rpc", metavar="HOST:PORT:KEY", help="measure through an RPC tracker")


def _timing_flags(g) -> None:
    """``optimize``'s end-to-end timing and decision, and its CUDA build without a GPU."""
    _advanced(g, "--confirm", type=int, default=3,
              help="candidates timed end to end, best first, before the original is kept "
                   "(default 3)")
    _advanced(g, "--first-kept", action="store_true",
              help="keep the first candidate the rule keeps (by default every one is timed, "
                   "and the fastest of those kept replaces the original)")
    _advanced(g, "--no-second-look", action="store_true",
              help="decide close calls on the first timing alone (by default they are tuned "
                   "again with a second seed, or timed over more rounds)")
    _advanced(g, "--second-look-kernels", type=int, default=8, metavar="N",
              help="the most kernels a close call's second look tunes again, at twice the "
                   "trials; with more, it times the same builds again over more rounds "
                   "(default 8)")
    _advanced(g, "--no-replication", action="store_true",
              help="replace the original on the kept candidate's one look (by default it is "
                   "timed once more, and kept only if the rule keeps it again)")
    _advanced(g, "--timing-processes", type=int, default=2, metavar="N",
              help="spread each look's rounds over N fresh processes, on a CPU (default 2): "
                   "some binaries' speed is drawn once per process by its address layout; 1 "
                   "times in this process")
    _advanced(g, "--dry-run", action="store_true",
              help="cuda without a GPU: search, build every original, mutant and correction "
                   "with nvcc, write them, stop before running a kernel")
    _advanced(g, "--arch", default="sm_90", help="CUDA arch of --dry-run (default sm_90)")


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
    if getattr(args, "columns", False):
        print(f"tvm-pet {args.command}: --columns no longer has an effect; the search runs "
              "without it", file=sys.stderr)
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
