"""The confirm stage: time the search's candidates end to end, and decide by one rule.

Steps 4 and 5 of ``tvm-pet optimize`` (:mod:`tvm_pet.pipeline.optimize`):

4. **Confirm end to end.** Baseline and optimized modules are built by the same toolchain with
   the same records and timed interleaved (A B A B ...) over several rounds. The search's best
   program and its runners-up are timed in turn (``confirm`` candidates in all, the rank test's
   threshold divided among them), since kernel times summed do not always predict the whole
   module. A candidate is kept only when it is faster beyond the noise (:func:`decide`: at
   least 5 % by the medians, and told apart from the baseline by a rank test at p < 0.01); of
   those kept, the one with the largest ratio replaces the original (``confirm_every``; off,
   the first kept). The measured costs that rank the candidates are one timing each, cached:
   conv5x5's three candidates came ranked in both orders from two such caches, and its best
   (x1.7) was third; so the candidates include near ties, programs costed up to the cost
   model's ``spread`` above the original (:data:`tvm_pet.tune.measured_cost.SPREAD`). If none
   is kept, the original is, and the report says so. A candidate
   whose compiled module computes something else than the original (:func:`check_outputs`) is
   refused untimed, and the next one is looked at; its look says why (``refused``). On a CPU,
   a look's rounds are spread over fresh processes (``timing_processes``, 2 by default;
   :mod:`tvm_pet.tune.process_timing`), since a binary's speed can be drawn once per process by
   its address layout; the rule compares the samples within each process (:func:`decide`), and
   each process's ratio is reported (``Look.process_ratios``).
5. **Look again at close calls.** When the optimized module measures faster but not surely so,
   the decision is close: with a tuning budget, both modules are tuned again with a second seed
   and twice the trials per task (equal budgets: MetaSchedule keeps the best record of both
   seeds for each side), rebuilt, and timed again over twice the rounds; without one, they are
   timed again over three times the rounds. Tuning again is bounded: where it would tune more
   than ``second_look_kernels`` kernels (a whole Inception-v3: 63 at 64 trials, about an hour on
   2 cores), the look is timed again over more rounds instead, and a note says so. The second
   look decides, by the same rule. A runner-up after a tuned second look is tuned to the
   baseline's new budget first.
6. **Replicate the keep.** The candidate kept is the best of up to ``confirm`` looks, so its
   ratio is the largest of several noisy ones: on BERT a candidate kept at x1.09 (p = 0.002)
   measured x0.98 in the benchmark's own timing. So before it replaces the original it is
   timed once more against it, in fresh processes, and the same rule must keep it again, at the
   full level ``ALPHA`` (one test of one candidate); otherwise the original is kept
   (``replicate``; the replication's figures are the ones reported, as they were not used to
   choose). The budget keeps a share for it, as for one more candidate.

**Bounded.** With untuned kernels one call of a model can take seconds (resnet18: about 2 s on
2 cores), and a look is rounds x samples x calls of each module. One call of the baseline is
timed first, and every look is planned (:func:`plan_timing`) to fit its share of the
confirmation's budget (``budget_s``: what ``--time-limit`` leaves after the search): fewer calls
per sample, then fewer rounds, never fewer than :func:`fewest_samples` per module, an asked
plan included (below that the rank test cannot keep anything), and less the start of the
look's timing processes (:data:`PROCESS_START_S` each). A runner-up is not timed, and a
second look not taken, when the time left cannot pay for a useful look; the confirmation says
so (``skipped``, ``notes``).

Every look is a :class:`Look`; the stage returns a :class:`Confirmation`.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.stats import mannwhitneyu, norm

from tvm_pet.errors import KernelBuildError, PetError
from tvm_pet.ir.node import Program
from tvm_pet.pipeline.options import Budget, DriverOptions
from tvm_pet.pipeline.progress import Progress
from tvm_pet.pipeline.toolchain import Timed, Toolchain
from tvm_pet.search.optimizer import Candidate
from tvm_pet.verify.agree import outputs_agree

#: Smallest advantage worth replacing the original for (a ratio of medians).
MIN_GAIN = 0.05
#: Largest one-sided Mann-Whitney p-value at which the optimized module counts as faster.
ALPHA = 0.01
#: Fewest samples per module in a look: with 6 against 6 the exact one-sided rank test reaches
#: p = 1/924, below ALPHA shared by three candidates (5 against 5 cannot go below 1/252).
MIN_SAMPLES = 6

#: Seconds one fresh timing process costs before it times (starting Python and TVM, loading
#: both libraries: about 3 s for the CSRNet back end's 35 MB ones), per look spread over
#: processes (:mod:`tvm_pet.tune.process_timing`): the plans leave it out of the time left.
PROCESS_START_S = 3.0

#: A look timed while other processes used over this share of the CPU's time (its cores' time
#: over the look) says so: its ratio may be the machine's (the same limit as kernel costing's,
#: ``tvm_pet.tune.contention.SHARE_LIMIT``, which this layer does not import).
CPU_SHARED_ABOVE = 0.2

#: Fewest samples of the original timed alone when there is nothing to confirm: no rank test
#: decides there, so that look is only as long as its time allows, down to this.
SELF_LOOK_SAMPLES = 2


def fewest_samples(alpha: float) -> int:
    """Fewest samples per module (at least :data:`MIN_SAMPLES`) at which the one-sided rank test
    can reach p < ``alpha``: n against n, its smallest p is 1 / C(2n, n).

    >>> fewest_samples(0.01 / 3), fewest_samples(0.01 / 20)
    (6, 7)
    """
    n = MIN_SAMPLES
    while 1 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


@dataclasses.dataclass(frozen=True)
class TimingPlan:
    """How one look times each module: ``rounds`` interleaved rounds of ``repeat`` samples, each
    the mean of ``number`` calls."""

    rounds: int
    number: int
    repeat: int

    @property
    def samples(self) -> int:
        """Samples per module."""
        return self.rounds * self.repeat

    def seconds(self, call_s: float, modules: int = 2) -> float:
        """Expected seconds: one untimed call per module first, then per round each module's
        samples, after the untimed call ``time_evaluator`` itself makes."""
        return modules * (self.rounds * (self.repeat * self.number + 1) + 1) * call_s


def plan_timing(call_s: float, budget_s: float, rounds: int, number: int,
                repeat: int, fewest: int = MIN_SAMPLES, modules: int = 2) -> TimingPlan:
    """The largest timing of ``modules`` modules (two: a look), up to the asked one, that fits
    ``budget_s``.

    The rule: keep the asked plan when it fits; else fewer calls per sample (down to one); else
    fewer rounds. Never fewer than ``fewest`` samples per module (:func:`fewest_samples`), the
    asked plan included: below that the rank test cannot keep anything. So a look on slow
    untuned kernels is bounded by ``budget_s``, or by the smallest useful look when even that
    is more.

    >>> plan_timing(1e-3, 60.0, 5, 1, 1)  # 5 samples are too few: 6 rounds
    TimingPlan(rounds=6, number=1, repeat=1)
    >>> plan_timing(1e-3, 60.0, 5, 3, 3)
    TimingPlan(rounds=5, number=3, repeat=3)
    >>> plan_timing(2.0, 60.0, 5, 3, 3)
    TimingPlan(rounds=3, number=1, repeat=3)
    >>> plan_timing(2.0, 1.0, 5, 3, 3)
    TimingPlan(rounds=2, number=1, repeat=3)
    """
    least_rounds = math.ceil(fewest / repeat)
    rounds = max(rounds, least_rounds)
    asked = TimingPlan(rounds, number, repeat)
    if call_s <= 0 or asked.seconds(call_s, modules) <= budget_s:
        return asked
    calls = budget_s / (modules * call_s) - 1  # calls per module the budget pays for
    fewer_calls = TimingPlan(rounds, max(1, math.floor((calls / rounds - 1) / repeat)), repeat)
    if fewer_calls.seconds(call_s, modules) <= budget_s:
        return fewer_calls
    return TimingPlan(max(least_rounds, min(rounds, math.floor(calls / (repeat + 1)))), 1, repeat)


@dataclasses.dataclass(frozen=True)
class Decision:
    """The rule's verdict on one timing of baseline against optimized.

    Args:
        keep: keep the optimized module.
        ratio: baseline median over optimized median.
        p_value: the one-sided Mann-Whitney p-value (optimized samples smaller).
        noise: the larger relative interquartile range of the two sample sets.
        close: faster, but not surely (a second look may decide).
        rule: the rule and these figures, in words.
    """

    keep: bool
    ratio: float
    p_value: float
    noise: float
    close: bool
    rule: str

    @property
    def kept(self) -> str:
        """``"optimized"`` or ``"original"``."""
        return "optimized" if self.keep else "original"


def relative_iqr(timing: Timed) -> float:
    """The interquartile range of a timing's samples over its median."""
    return _iqr(timing.samples)


def decide(timings: Mapping[str, Timed], alpha: float = ALPHA) -> Decision:
    """Keep the optimized module only when it wins beyond the noise of the measurement.

    Two conditions, on the interleaved samples of both modules:

    - the baseline's median over the optimized one's exceeds ``1 + MIN_GAIN``;
    - a one-sided Mann-Whitney U test says the optimized samples are smaller at p < ``alpha``
      (``ALPHA``, divided by the number of candidates when several are tried: Bonferroni).

    The rank test asks whether the two sample sets are told apart, whatever the shape of the
    noise. On a small (2-core) machine a run is often slowed by a whole scheduling quantum, so
    samples are bimodal and their interquartile range (up to 40 %, reported as ``noise``) says more
    about that interference than about the medians; ``benchmarks/decision_rule.py`` measures the
    rule on identical binaries (how often it keeps a non-change) and on real candidates.

    **Timed in several processes** (``groups``: :mod:`tvm_pet.tune.process_timing`), each
    process is one draw of the address layout, which can set a binary's speed for the whole
    process, so the samples are compared within each process, never across: the ratio is the
    geometric mean of the processes' ratios of medians, and the rank test is stratified by
    process (:func:`stratified_p`). Pooled, one process where both sides run slow and one where
    both run fast make a ratio of medians anywhere between (an identical pair measured x1.26
    that way, at x1.01 and x0.99 in its processes). And a third condition holds: in no process
    is the optimized module slower than the baseline by more than ``MIN_GAIN`` (ratio below
    ``1 / (1 + MIN_GAIN)``).

    Args:
        timings: ``"baseline"`` and ``"optimized"`` timings.
        alpha: the rank test's level.

    Returns:
        The :class:`Decision`.
    """
    base, opt = timings["baseline"], timings["optimized"]
    groups = list(zip(getattr(base, "groups", ()), getattr(opt, "groups", ())))
    if len(groups) < 2:
        noise = max(relative_iqr(base), relative_iqr(opt))
        ratio = base.median / opt.median
        p_value = float(mannwhitneyu(base.samples, opt.samples, alternative="greater").pvalue)
        keep = ratio > 1 + MIN_GAIN and p_value < alpha
        rule = (f"keep the optimized module only if baseline median / optimized median "
                f"({ratio:.3f}) exceeds {1 + MIN_GAIN:.2f} and a one-sided Mann-Whitney test on "
                f"the interleaved samples says it is faster at p < {alpha:.2g} (p = "
                f"{p_value:.2g}; spread: relative interquartile range up to {noise:.3f})")
        return Decision(keep, ratio, p_value, noise, ratio > 1 and not keep, rule)
    ratios = process_ratios(base, opt)
    ratio = float(np.exp(np.mean(np.log(ratios))))
    p_value = stratified_p(groups)
    noise = max(_iqr(g) for pair in groups for g in pair)
    worst = min(ratios)
    keep = ratio > 1 + MIN_GAIN and p_value < alpha and worst >= 1 / (1 + MIN_GAIN)
    rule = (f"keep the optimized module only if the geometric mean over the {len(groups)} "
            f"timing processes of baseline median / optimized median ({ratio:.3f}) exceeds "
            f"{1 + MIN_GAIN:.2f}, a one-sided Mann-Whitney test stratified by process says it is "
            f"faster at p < {alpha:.2g} (p = {p_value:.2g}), and in no process is it slower than "
            f"1 / {1 + MIN_GAIN:.2f} (slowest: x{worst:.3f}; spread within a process: relative "
            f"interquartile range up to {noise:.3f})")
    return Decision(keep, ratio, p_value, noise, ratio > 1 and not keep, rule)


def process_ratios(baseline: Timed, optimized: Timed) -> tuple[float, ...]:
    """Baseline median over optimized median in each process the timing was spread over
    (empty for a timing in one process)."""
    return tuple(b / o for b, o in zip(getattr(baseline, "layouts", ()),
                                       getattr(optimized, "layouts", ())))


def stratified_p(groups: Sequence[tuple[Sequence[float], Sequence[float]]]) -> float:
    """The one-sided p-value that the optimized samples are smaller, from ``(baseline,
    optimized)`` sample pairs of several processes: each process's Mann-Whitney U counted
    within that process only, their sum against its normal approximation (van Elteren's test,
    with equal weights).

    >>> fast = [(range(10, 19), range(0, 9)), (range(30, 39), range(20, 29))]
    >>> stratified_p(fast) < 1e-4  # faster in each process, whatever the processes' levels
    True
    >>> stratified_p([(range(0, 9), range(30, 39)), (range(30, 39), range(0, 9))]) > 0.4
    True
    """
    u = mean = var = 0.0
    for b, o in groups:
        n1, n2 = len(b), len(o)
        u += float(mannwhitneyu(list(b), list(o), alternative="greater").statistic)
        mean += n1 * n2 / 2
        var += n1 * n2 * (n1 + n2 + 1) / 12
    return float(norm.sf((u - mean) / math.sqrt(var))) if var > 0 else 1.0


def _iqr(samples: Sequence[float]) -> float:
    """The interquartile range of samples over their median."""
    q1, q3 = np.percentile(samples, [25, 75])
    return float((q3 - q1) / np.median(samples))


@dataclasses.dataclass(frozen=True)
class Look:
    """One timing of a candidate against the baseline, and its decision.

    Args:
        what: which look (``"first look"``, ``"runner-up 1"``, ``"second look: ..."``).
        candidate: the candidate's index (0 = the search's best), None when there was none.
        budget: the tuning budget both sides had.
        rounds: interleaved rounds timed.
        decision: the rule's verdict.
        new_trials: trials this look tuned first (None when it tuned nothing).
        tuning_time_s: seconds this look tuned first (None when it tuned nothing).
        number: calls averaged into one sample.
        repeat: samples per module per round.
        seconds: wall time of the timing.
        refused: why the candidate was not timed: its compiled module computes something else
            than the original (None for a timed look).
        process_ratios: the ratio in each fresh process the look's rounds were spread over
            (empty: timed in one process), :mod:`tvm_pet.tune.process_timing`.
        others_share: the share of the CPU other processes used while the look was timed
            (:mod:`tvm_pet.tune.contention`; None where the toolchain does not say).
    """

    what: str
    candidate: int | None
    budget: Budget
    rounds: int
    decision: Decision
    new_trials: int | None = None
    tuning_time_s: float | None = None
    number: int = 1
    repeat: int = 1
    seconds: float = 0.0
    refused: str | None = None
    process_ratios: tuple[float, ...] = ()
    others_share: float | None = None

    @property
    def cpu_shared(self) -> bool:
        """Whether other processes used over :data:`CPU_SHARED_ABOVE` of the CPU while the look
        was timed: its ratio may be the machine's, not the candidate's."""
        return self.others_share is not None and self.others_share > CPU_SHARED_ABOVE

    def to_json(self) -> dict:
        """The look as ``report.json`` lists it (``looks``); a refused one has no figures."""
        out = {"what": self.what, "candidate": self.candidate,
               "trials_per_task": self.budget.trials_per_task, "seed": self.budget.seed}
        if self.new_trials is not None:
            out |= {"new_trials": self.new_trials, "tuning_time_s": self.tuning_time_s}
        d = self.decision
        if self.refused is not None:
            return out | {"rounds": 0, "number": 0, "repeat": 0, "timing_s": 0.0, "ratio": None,
                          "p_value": None, "noise": None, "close": False, "kept": d.kept,
                          "rule": d.rule, "refused": self.refused}
        return out | {"rounds": self.rounds, "number": self.number, "repeat": self.repeat,
                      "timing_s": self.seconds, "ratio": d.ratio, "p_value": d.p_value,
                      "noise": d.noise, "close": d.close, "kept": d.kept, "rule": d.rule,
                      "process_ratios": list(self.process_ratios),
                      "cpu_others_share": self.others_share}


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The original, compiled under a tuning budget, and its outputs on the inputs."""

    module: Any
    executable: Any
    outputs: tuple[np.ndarray, ...]
    budget: Budget
    call_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class Confirmation:
    """What the confirm stage found.

    Args:
        looks: every look, in order.
        timings: the last look's timings (``"baseline"``, ``"optimized"``).
        chosen: the candidate kept, None when the original stays.
        baseline: the original as last built (its executable is the one written out).
        optimized: the last look's optimized executable.
        skipped: candidates not timed: the budget was spent.
        notes: what the budget cut short, in words.
        budget_s: the confirmation's time budget (None: unbounded).
        seconds: the stage's wall time.
        optimized_module: the kept candidate's module, as lowered and built (None when the
            original stays).
        deciding: the look whose timings are ``timings``: the kept candidate's, else the last
            one (None: the last one).
    """

    looks: tuple[Look, ...]
    timings: Mapping[str, Timed]
    chosen: Candidate | None
    baseline: Baseline
    optimized: Any
    skipped: int = 0
    notes: tuple[str, ...] = ()
    budget_s: float | None = None
    seconds: float = 0.0
    optimized_module: Any = None
    deciding: Look | None = None

    def to_json(self) -> dict:
        """The stage's budget and what it cut short (``confirmation`` in ``report.json``)."""
        return {"budget_s": self.budget_s, "time_s": self.seconds,
                "baseline_call_s": self.baseline.call_s, "skipped_candidates": self.skipped,
                "notes": list(self.notes)}

    @property
    def keep(self) -> bool:
        """Whether a candidate replaces the original."""
        return self.chosen is not None

    @property
    def look(self) -> Look:
        """The deciding look: the kept candidate's, else the last one."""
        return self.deciding or self.looks[-1]

    @property
    def rule(self) -> str:
        """The decision rule of the deciding look, in words."""
        return self.look.decision.rule

    @property
    def final(self) -> Any:
        """The executable written as ``optimized.so``: the kept candidate's, or the original's."""
        return self.optimized if self.keep else self.baseline.executable


@dataclasses.dataclass(frozen=True)
class _Bench:
    """What every look shares: the toolchain, the options, the inputs, the rank test's level,
    the time left (``deadline``, a ``time.perf_counter`` value) and the progress lines."""

    toolchain: Toolchain
    options: DriverOptions
    inputs: tuple[np.ndarray, ...]
    alpha: float
    deadline: float = math.inf
    progress: Progress = Progress()

    def left(self) -> float:
        """Seconds left of the confirmation's budget."""
        return max(0.0, self.deadline - time.perf_counter())

    def plan(self, call_s: float, rounds: int, share: int) -> TimingPlan:
        """The timing of a look asked for ``rounds``, on ``1 / share`` of the time left, less
        the start of its timing processes (:meth:`start_s`)."""
        return plan_timing(call_s, max(0.0, self.left() / max(1, share) - self.start_s()),
                           rounds, self.options.timing_number, self.options.timing_repeat,
                           fewest_samples(self.alpha))

    def start_s(self) -> float:
        """Seconds a look's fresh timing processes take to start: :data:`PROCESS_START_S` each
        where the toolchain spreads a look over processes (``timing_processes`` above 1), else
        none."""
        processes = getattr(self.toolchain, "timing_processes", 1)
        return processes * PROCESS_START_S if processes > 1 else 0.0

    def look(self, baseline: Baseline, optimized: Any, plan: TimingPlan, what: str,
             candidate: int | None, budget: Budget, tuned: Sequence = ()
             ) -> tuple[Look, Mapping[str, Timed]]:
        """Time ``baseline`` and ``optimized`` interleaved by ``plan`` and decide; ``tuned`` is
        what was tuned for this look (its trials and seconds go into the look)."""
        start = time.perf_counter()
        label = (f"timing the original against candidate {candidate}" if candidate is not None
                 else "timing the original")
        alone = optimized is baseline.executable  # the same binary: timed once, for both sides
        executables = {"baseline": baseline.executable} | ({} if alone else
                                                           {"optimized": optimized})
        with self.progress.step(f"{label} ({what}): {plan.rounds} rounds x {plan.repeat} "
                                f"samples x {plan.number} calls",
                                plan.seconds(baseline.call_s, len(executables))):
            timings = self.toolchain.time(executables, self.inputs, rounds=plan.rounds,
                                          number=plan.number, repeat=plan.repeat)
        if alone:
            timings = {"baseline": timings["baseline"], "optimized": timings["baseline"]}
        ratios = process_ratios(timings["baseline"], timings["optimized"])
        return Look(what, candidate, budget, plan.rounds, decide(timings, self.alpha),
                    **_tuning_of(tuned),
                    number=plan.number, repeat=plan.repeat,
                    seconds=time.perf_counter() - start, process_ratios=ratios,
                    others_share=getattr(timings["baseline"], "others_share", None)), timings


@dataclasses.dataclass(frozen=True)
class _Trial:
    """One candidate's latest look, with what was built for it."""

    look: Look
    timings: Mapping[str, Timed]
    module: Any
    baseline: Baseline
    optimized: Any


def confirm(program: Program, candidates: Sequence[Candidate], toolchain: Toolchain,
            options: DriverOptions, inputs: Sequence[np.ndarray], *,
            budget_s: float | None = None, progress: Progress = Progress()) -> Confirmation:
    """Time the candidates against the original, best first, and keep the fastest of those the
    rule keeps (module steps 4 and 5; with ``confirm_every`` off, the first one kept), within
    ``budget_s``.

    Args:
        program: the original.
        candidates: the search's best program and runners-up, best first (empty when the
            search applied no mutant).
        toolchain: the compiler.
        options: timing rounds, number and repeat, ``trials``, ``seed``, ``second_look``.
        inputs: the model's inputs, in the compiled module's order.
        budget_s: seconds for the timing (None: the asked timings, unbounded).
        progress: where the steps are announced.

    Returns:
        The :class:`Confirmation`.
    """
    start = time.perf_counter()
    deadline = math.inf if budget_s is None else start + budget_s
    inputs = tuple(inputs)
    baseline = _build_baseline(program, toolchain, inputs, options.first_look_budget(), progress)
    bench = _Bench(toolchain, options, inputs, ALPHA / max(1, len(candidates)), deadline,
                   progress)
    if not candidates:
        return _timed(_nothing_to_confirm(baseline, bench), start, budget_s)
    looks: list[Look] = []
    notes: list[str] = []
    trial: _Trial | None = None  # the latest candidate's look
    kept: tuple[_Trial, Candidate] | None = None  # the fastest candidate kept so far
    reserve = 1 if options.replicate else 0  # the replication's share of the time left
    for index, candidate in enumerate(candidates):
        if kept is not None and not options.confirm_every:
            break
        if trial is not None and _cannot_pay(bench, baseline.call_s,
                                             len(candidates) - index + reserve):
            notes.append(f"{len(candidates) - index} runner(s)-up not timed: the budget of "
                         f"{budget_s:.0f} s was spent")
            if kept is not None:
                return _timed(_replicated(kept, bench, looks, notes,
                                          skipped=len(candidates) - index), start, budget_s)
            return _timed(_ending(trial, looks, notes, skipped=len(candidates) - index),
                          start, budget_s)
        # a close call after a keep gets no second look: it would tune both sides again
        latest, baseline = _candidate_looks(index, candidate, baseline, bench,
                                            len(candidates) - index + reserve, looks, notes,
                                            second=options.second_look and kept is None)
        if latest is None:
            continue  # refused: the next candidate, or the original
        trial = latest
        if trial.look.decision.keep and (kept is None or
                                         trial.look.decision.ratio > kept[0].look.decision.ratio):
            kept = (trial, candidate)
    if kept is not None:
        return _timed(_replicated(kept, bench, looks, notes), start, budget_s)
    if trial is None:  # every candidate was refused: the original is kept, timed alone
        alone = _nothing_to_confirm(baseline, bench, "every candidate was refused (its compiled "
                                    "module computes something else, or TVM cannot compile "
                                    "it): the original is kept")
        return _timed(dataclasses.replace(alone, looks=(*looks, *alone.looks),
                                          notes=tuple(notes)), start, budget_s)
    return _timed(_ending(trial, looks, notes), start, budget_s)


def _candidate_looks(index: int, candidate: Candidate, baseline: Baseline, bench: _Bench,
                     share: int, looks: list[Look], notes: list[str], *, second: bool
                     ) -> tuple[_Trial | None, Baseline]:
    """Candidate ``index``'s first look and, at a close call when ``second``, its second look
    (module steps 4 and 5), on ``1 / share`` of the time left; each look is appended to
    ``looks``, and a refusal or a second look the time cannot pay for to ``notes``.

    Returns:
        The candidate's latest look (None when it was refused), and the baseline later
        candidates meet (a second look tunes it again).
    """
    first = _first_look(index, candidate, baseline, bench, share)
    looks.append(first.look)
    if first.look.refused is not None:
        notes.append(first.look.decision.rule)
        return None, baseline
    if not (first.look.decision.close and second):
        return first, baseline
    again = _second_look(index, first, bench, share, notes)
    if again is None:
        notes.append(f"candidate {index}: a close call, but the time left pays for no more "
                     f"samples than the first look: no second look")
        return first, baseline
    looks.append(again.look)
    if again.look.refused is not None:
        notes.append(again.look.decision.rule)
        return None, again.baseline
    return again, again.baseline


def _replicated(kept: tuple[_Trial, Candidate], bench: _Bench, looks: list[Look],
                notes: list[str], skipped: int = 0) -> Confirmation:
    """The confirmation once the kept candidate is timed again against the original (module
    docstring, step 6): kept when the rule keeps it again at the full level ``ALPHA``, else the
    original. Without ``replicate``, or when the time left cannot pay for the smallest useful
    look, it is kept on its one look, and a note says so."""
    trial, candidate = kept
    if not bench.options.replicate:
        return _ending(trial, looks, notes, candidate, skipped)
    index, again = trial.look.candidate, dataclasses.replace(bench, alpha=ALPHA)
    if _cannot_pay(again, trial.baseline.call_s, 1):
        notes.append(f"candidate {index}: kept on its one look; the time left pays for no "
                     f"replication")
        return _ending(trial, looks, notes, candidate, skipped)
    plan = again.plan(trial.baseline.call_s, bench.options.timing_rounds, 1)
    look, timings = again.look(trial.baseline, trial.optimized, plan,
                               "replication: the kept candidate timed again", index,
                               trial.baseline.budget)
    looks.append(look)
    replication = _Trial(look, timings, trial.module, trial.baseline, trial.optimized)
    if look.decision.keep:
        return _ending(replication, looks, notes, candidate, skipped)
    notes.append(f"candidate {index}: kept by its look (x{trial.look.decision.ratio:.3f}) but "
                 f"not by its replication (x{look.decision.ratio:.3f}): the original is kept")
    return _ending(replication, looks, notes, None, skipped)


def _ending(trial: _Trial, looks: list[Look], notes: list[str], chosen: Candidate | None = None,
            skipped: int = 0) -> Confirmation:
    """The confirmation after ``trial``, the latest candidate's look: ``chosen`` kept or not."""
    return Confirmation(tuple(looks), trial.timings, chosen, trial.baseline, trial.optimized,
                        skipped, tuple(notes),
                        optimized_module=None if chosen is None else trial.module,
                        deciding=trial.look)


def _timed(confirmation: Confirmation, start: float, budget_s: float | None) -> Confirmation:
    return dataclasses.replace(confirmation, budget_s=budget_s,
                               seconds=time.perf_counter() - start)


def _cannot_pay(bench: _Bench, call_s: float, candidates_left: int) -> bool:
    """True when the time left cannot pay for the smallest useful look of the next candidate
    (its build check and :func:`fewest_samples` samples of both modules)."""
    repeat = bench.options.timing_repeat
    fewest = fewest_samples(bench.alpha)
    smallest = (TimingPlan(math.ceil(fewest / repeat), 1, repeat).seconds(call_s) + call_s
                + bench.start_s())
    return bench.left() / candidates_left < smallest


def _build_baseline(program: Program, toolchain: Toolchain, inputs: tuple[np.ndarray, ...],
                    budget: Budget, progress: Progress = Progress()) -> Baseline:
    """The original compiled, its outputs as TVM builds it (the reference of every check), and
    the seconds of one call (what the looks are planned on)."""
    with progress.step("building the original"):
        module = toolchain.lower(program)
        try:
            executable = toolchain.build(module)
        except KernelBuildError as e:
            raise e.in_original() from None
    toolchain.run(executable, inputs)  # the first call allocates; the second is timed
    start = time.perf_counter()
    outputs = tuple(toolchain.run(executable, inputs))
    call_s = time.perf_counter() - start
    progress.note(f"one call of the original takes {call_s:.3g} s")
    return Baseline(module, executable, outputs, budget, call_s)


def _nothing_to_confirm(baseline: Baseline, bench: _Bench,
                        rule: str = "the search applied no mutant: the original is kept"
                        ) -> Confirmation:
    """No candidate to time (the search applied no mutant, or every candidate was refused): the
    original is kept. It is timed once, as the one side of a look whose other side is the same
    timing (the ratio 1, the spread its own). Nothing is decided by that timing, so it fits the
    time left down to :data:`SELF_LOOK_SAMPLES` samples, not the rank test's fewest of each of
    two modules (on slow untuned kernels, as a real model's at ``--trials 0``, that was a minute
    of timing)."""
    options = bench.options
    plan = plan_timing(baseline.call_s, bench.left(), options.timing_rounds,
                       options.timing_number, min(options.timing_repeat, SELF_LOOK_SAMPLES),
                       SELF_LOOK_SAMPLES, modules=1)
    look, timings = bench.look(baseline, baseline.executable, plan, "first look", None,
                               baseline.budget)
    decision = dataclasses.replace(look.decision, keep=False, close=False, rule=rule)
    return Confirmation((dataclasses.replace(look, decision=decision),), timings, None, baseline,
                        baseline.executable)


def _first_look(index: int, candidate: Candidate, baseline: Baseline, bench: _Bench,
                share: int) -> _Trial:
    """Build candidate ``index``, check its outputs, and time it against ``baseline`` on
    ``1 / share`` of the time left."""
    toolchain, options = bench.toolchain, bench.options
    what = "first look" if index == 0 else f"runner-up {index}"
    with bench.progress.step(f"building candidate {index}"):
        module = toolchain.lower(candidate.program)
        tuned = []
        if baseline.budget.trials_per_task != options.trials:
            # the baseline was tuned again for an earlier close call: equal budgets for this one
            tuned = [toolchain.tune(module, baseline.budget.trials_per_task,
                                    seed=baseline.budget.seed, progress=bench.progress.note)]
        try:
            optimized = toolchain.build(module)
        except KernelBuildError as err:
            return _Trial(_refused(index, what, baseline.budget, str(err), tuned), {}, module,
                          baseline, None)
    refused = _refusal(baseline.outputs, toolchain.run(optimized, bench.inputs), index, what,
                       baseline.budget, tuned)
    if refused is not None:
        return _Trial(refused, {}, module, baseline, optimized)
    plan = bench.plan(baseline.call_s, options.timing_rounds, share)
    look, timings = bench.look(baseline, optimized, plan, what, index, baseline.budget, tuned)
    return _Trial(look, timings, module, baseline, optimized)


def _second_look(index: int, trial: _Trial, bench: _Bench, share: int,
                 notes: list[str]) -> _Trial | None:
    """A close call looked at again (module docstring, step 5); None when the time left pays
    for no more samples than the first look had. Where tuning both sides again would tune more
    than ``second_look_kernels`` kernels, the look is timed again over more rounds on the same
    records instead, and a note in ``notes`` says so."""
    toolchain, options = bench.toolchain, bench.options
    if options.trials <= 0:
        return _timed_again(index, trial, bench, share, "no tuning budget")
    budget = options.second_look_budget()
    modules = (trial.baseline.module, trial.module)
    kernels = max(toolchain.records_plan(m).tasks for m in modules)
    if kernels > options.second_look_kernels:
        again = _timed_again(index, trial, bench, share,
                             f"{kernels} kernels, too many to tune again")
        if again is not None:
            notes.append(f"candidate {index}: a close call; tuning both sides again would tune "
                         f"{kernels} kernels at {budget.trials_per_task} trials (more than the "
                         f"{options.second_look_kernels} of --second-look-kernels), so the "
                         f"second look timed them again over more rounds on the same records")
        return again
    tuned = [toolchain.tune(m, budget.trials_per_task, seed=budget.seed,
                            progress=bench.progress.note) for m in modules]
    with bench.progress.step(f"building the original and candidate {index} again"):
        base_ex, optimized = (toolchain.build(m) for m in modules)
    baseline = Baseline(trial.baseline.module, base_ex,
                        tuple(toolchain.run(base_ex, bench.inputs)), budget,
                        trial.baseline.call_s)
    what = "second look: both sides tuned again with a second seed"
    refused = _refusal(baseline.outputs, toolchain.run(optimized, bench.inputs), index, what,
                       budget, tuned)
    if refused is not None:
        return _Trial(refused, {}, trial.module, baseline, optimized)
    plan = bench.plan(baseline.call_s, 2 * options.timing_rounds, share)
    look, timings = bench.look(baseline, optimized, plan, what, index, budget, tuned)
    return _Trial(look, timings, trial.module, baseline, optimized)


def _timed_again(index: int, trial: _Trial, bench: _Bench, share: int,
                 why: str) -> _Trial | None:
    """The second look without tuning: the same two executables timed again over three times
    the rounds (None when the time left pays for no more samples than the first look had)."""
    plan = bench.plan(trial.baseline.call_s, 3 * bench.options.timing_rounds, share)
    if plan.samples <= trial.look.rounds * trial.look.repeat:
        return None
    look, timings = bench.look(trial.baseline, trial.optimized, plan,
                               f"second look: timed again over more rounds ({why})", index,
                               trial.baseline.budget)
    return _Trial(look, timings, trial.module, trial.baseline, trial.optimized)


def _refusal(reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray], index: int,
             what: str, budget: Budget, tuned: Sequence = ()) -> Look | None:
    """The look that refuses candidate ``index`` when its compiled module computes something else
    than the original (``check_outputs``); None when it agrees. Nothing is timed."""
    try:
        check_outputs(reference, outputs, index)
    except PetError as err:
        return _refused(index, what, budget, str(err), tuned)
    return None


def _refused(index: int, what: str, budget: Budget, reason: str, tuned: Sequence = ()) -> Look:
    """The look that refuses candidate ``index`` untimed, for ``reason``."""
    decision = Decision(False, math.nan, math.nan, math.nan, False,
                        f"candidate {index} refused, not timed: {reason}")
    return Look(what, index, budget, 0, decision, **_tuning_of(tuned), number=0, repeat=0,
                refused=reason)


def _tuning_of(tuned: Sequence) -> dict:
    """A look's ``new_trials`` and ``tuning_time_s`` from what was tuned for it (none: no keys,
    the look tuned nothing)."""
    if not tuned:
        return {}
    return {"new_trials": sum(s.new_trials for s in tuned),
            "tuning_time_s": sum(s.wall_s for s in tuned)}


def check_outputs(reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                  index: int) -> None:
    """Refuse a candidate whose compiled module computes something else than the original.

    The verifier proved the rewrite, and the records were checked against their kernels
    (:mod:`tvm_pet.tune.record_check`); this guards the lowering and the compiler's build. The
    confirm stage then goes on to the next candidate, or keeps the original.

    Args:
        reference: the original's outputs.
        outputs: candidate ``index``'s outputs on the same inputs.
        index: the candidate's index, for the message.

    Raises:
        PetError: when an output differs beyond float32 rounding
            (:func:`~tvm_pet.verify.agree.outputs_agree`), in shape, or in number.
    """
    if len(outputs) != len(reference):
        raise PetError(f"candidate {index}'s compiled module gives {len(outputs)} output(s) "
                       f"where the original gives {len(reference)} (a compiler fault: please "
                       f"report it)")
    for a, b in zip(reference, outputs):
        if a.shape != b.shape:
            raise PetError(f"candidate {index}'s compiled module gives an output of shape "
                           f"{list(b.shape)} where the original's is {list(a.shape)} (a "
                           f"compiler fault: please report it)")
        if not outputs_agree(a, b):
            raise PetError(f"candidate {index}'s compiled module differs from the original's by "
                           f"{float(np.abs(a - b).max()):.3g} (a compiler fault: please report "
                           f"it)")
