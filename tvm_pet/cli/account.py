"""``optimize --verbose``: the full account of a run (:func:`print_account`): every look and its
verdict, the search and the tuning, the rewrites applied, and what the figures stand on.
"""
from __future__ import annotations

import argparse
import os

from tvm_pet.cli.summary import _fast_math_hint, _onnx_missing


def print_account(report, args: argparse.Namespace) -> None:
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


def _print_trust(report, args: argparse.Namespace) -> None:
    """The lines that say what the figures stand on: import, coverage, the search's stop
    (:func:`_print_seen`), the records and the tuning (:func:`_print_tuning`), kernels, timing
    budget, and the layout they were built in."""
    facts = report.to_json()
    _print_seen(facts, args.time_limit)
    _print_tuning(report, facts)
    print(f"  {report.kernels_line()}")
    c = report.confirmation
    threads = os.environ.get("TVM_NUM_THREADS")  # tvm_pet.tune.threads, or the user's
    print(f"  timing: one call {c.baseline.call_s:.3g} s, {_timing_spent(c)}"
          + (f", TVM on {threads} thread(s)" if threads else "")
          + "".join(f"; {n}" for n in c.notes))
    if _onnx_missing(report):
        print(f"  optimized.onnx {report.optimized_onnx}")
    cov = facts["coverage"]
    if report.layout is not None:
        print(f"  {report.layout.line()}")
    hint = _fast_math_hint(args.fast_math, args.target, cov)
    if hint:
        print(f"  {hint}")
    print(f"  total {report.total_time_s:.1f} s")


def _print_seen(facts: dict, time_limit: float) -> None:
    """How the model was imported, how much of it PET searched, and whether the search's time
    limit cut it short."""
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
              f"--time-limit more than {time_limit:g} s (the measured cost first times "
              f"the original's kernels, untuned ones too), or tune first")
    elif search["stop"] == "time_limit" and searched < total:
        print(f"  the search's time limit ran out after {searched} of {total} subprograms: "
              f"give --time-limit more than {time_limit:g} s to search them all")


def _print_tuning(report, facts: dict) -> None:
    """The records plan, how the original was lowered, what the tune stage tuned and screened,
    and the rewrites the search set aside or left to the end-to-end timing."""
    if facts.get("records_plan"):
        print(f"  {facts['records_plan']}")
    if report.baseline_lowering is not None:
        print(f"  {report.baseline_lowering.line()}")
    tuning = facts["tuning"]
    if tuning.get("tasks") is not None:
        print("  " + _tuned_line(tuning))
        print("  " + _screen_line(tuning))
    search = facts["search"]
    if search["set_aside_untuned"]:
        print(f"  the search set aside {search['set_aside_untuned']} rewrite(s) whose "
              f"new kernels have no records, untimed (an untuned kernel against a tuned one); "
              f"`tvm-pet tune` tunes the most promising")
    if search.get("set_aside_unbuildable"):
        print(f"  the search set aside {search['set_aside_unbuildable']} rewrite(s) with "
              f"a new kernel that TVM cannot compile for this target")
    if search["near_ties_confirmed"]:
        print(f"  {search['near_ties_confirmed']} candidate(s) timed were near ties: "
              f"costed at or a little above the original (one cached timing per kernel cannot "
              f"rank them), so the end-to-end timing decided")


def _screen_line(tuning: dict) -> str:
    """How the tune stage compared the mutants, and which it tuned (:func:`_picked_line`)."""
    picked = [m for m in tuning["tuned_mutants"] if m["subprogram"] != "combined"]
    by_flops = tuning.get("screened_by_flops", 0)
    return (f"screen: {tuning['screened_mutants']} mutants compared from their fusion "
            f"regions ({tuning['screened_mutants'] - by_flops} timed untuned, {by_flops} by "
            f"FLOPs: kernels too large to time untuned, or Winograd and window forms)"
            + _picked_line(picked) + _evidence_words(tuning.get("evidence") or {}))


def _evidence_words(evidence: dict) -> str:
    """The kinds' record on this target that weighed the ranking.

    >>> _evidence_words({"extents": {"won": 3, "tuned": 5, "odds": 0.571},
    ...                  "space-to-batch": {"won": 0, "tuned": 4, "odds": 0.167}})
    '; ranked by what each kind won tuned on this target: extents 3 of 5, space-to-batch 0 of 4'
    """
    if not evidence:
        return ""
    return ("; ranked by what each kind won tuned on this target: "
            + ", ".join(f"{kind} {e['won']} of {e['tuned']}" for kind, e in evidence.items()))


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
