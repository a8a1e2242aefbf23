"""``optimize``'s short summary (:func:`summary_lines`, at most 8 lines), and the hints it
shares with the full account of ``--verbose`` (:mod:`tvm_pet.cli.account`).
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import sys


def summary_lines(report, args: argparse.Namespace) -> list[str]:
    """``optimize``'s short summary, at most 8 lines: the decision and the speed-up with its
    spread over the timing processes, the target and PET's error, the rewrites applied,
    whether the kernels were tuned, how much of the model PET searched, a note where the timing
    shared the CPU, the lowering options worth a try, and where ``report.json`` is.
    ``--verbose`` prints the full account instead (:func:`~tvm_pet.cli.account.print_account`)."""
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
        ("--fast-math", _fast_math_hint(args.fast_math, args.target, facts["coverage"])),) if hint]
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
    target = _target_words(report.target) + _layout_words(report)
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
    if report.records_counts is not None:
        line += f" ({_records_words(report.records_counts, tuned, report.new_trials)})"
    if report.kept_kernels is not None and report.kept_kernels[1] < report.kept_kernels[0]:
        line += (f"; PET's program: {report.kept_kernels[1]} of {report.kept_kernels[0]} with "
                 "records")
    return line + f"; {trials}" + (" (--trials N tunes them)" if tuned < total else "")


def _records_words(counts, tuned: int, new_trials: int) -> str:
    """Whose records the kernels had before the run, as the records plan counted them
    (:class:`~tvm_pet.pipeline.report.RecordsCounts`), and how many this run tuned.

    >>> from tvm_pet.pipeline.report import RecordsCounts
    >>> _records_words(RecordsCounts(5, 3, 1, 1, ("llvm-haswell-c2",)), tuned=5, new_trials=32)
    '3 own, 1 borrowed from llvm-haswell-c2, 1 tuned now'
    >>> _records_words(RecordsCounts(5, 5, 0, 0), tuned=5, new_trials=0)
    '5 own, 0 borrowed'
    """
    now = tuned - counts.own - counts.borrowed if new_trials else 0
    lenders = f" from {' and '.join(counts.lenders)}" if counts.borrowed else ""
    return (f"{counts.own} own, {counts.borrowed} borrowed{lenders}"
            + (f", {now} tuned now" if now > 0 else ""))


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


def _layout_words(report) -> str:
    """The layout both sides were built in, for a model with convolutions: ``", NHWC (x1.31
    faster than NCHW, timed on the tuned original)"``; empty for others."""
    choice, coverage = report.layout, report.to_json()["coverage"] or {}
    if choice is None or "Conv" not in coverage.get("lifted", {}):
        return ""
    return ", " + choice.line().removeprefix("layout: ")


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
