"""The tune stage: the original's kernels, then those of the most promising mutants.

Steps 1 and 2 of ``tvm-pet optimize`` (:mod:`tvm_pet.pipeline.optimize`), and all of
``tvm-pet tune``. :func:`tune_model` runs four steps in order, each a function from typed
values to typed values:

1. **Tune the original** (:func:`tune_original`). Its kernels are tuned with MetaSchedule
   (``trials`` per task, or within a whole-model ``budget``) into ``tuning_logs/<target>/``;
   records are reused with zero new trials afterwards. This step decides, once, what every
   mutant's tuning gets (:class:`~tvm_pet.pipeline.mutant_budget.MutantBudget`): the trials per
   task the original had, and with ``--charge inside`` the mutants'
   :class:`~tvm_pet.pipeline.mutant_budget.Allowance`.
2. **Screen and rank the mutants** (:func:`screen_and_rank`). The generator lists verified
   mutants per subset; the analytic model keeps the ``screen_per_subset`` cheapest of each
   subset. Each of those is screened from its fusion region (:mod:`tvm_pet.search.region`): the
   kernels it removes and those it adds, timed *untuned* on both sides (compared by FLOPs
   instead where a kernel is too large to time untuned, such as a 3-D convolution), and the
   removed ones' tuned time from the original's records
   (:meth:`~tvm_pet.tune.measured_cost.MeasuredCost.screen`). The plan
   (:func:`~tvm_pet.pipeline.plan.rank_mutants`) ranks them across the whole model by the
   milliseconds they are expected to save and picks the best ``promising``.
3. **Tune the picks** (:func:`tune_picks`), with the same trials per task as the original. They
   are tuned in the whole model, as TVM fuses them there (a mutant's last kernel takes the bias
   and ReLU after it), so that their records match the final build.
4. **Tune the combination** (:func:`tune_combination`). The tuned mutants that beat the
   original by themselves, this run's picks and every other mutant whose kernels hold records
   (from earlier runs, or kernels the picks share), are applied together
   (:func:`~tvm_pet.pipeline.plan.combination`), and that combination, which the search's
   combine step will cost, is tuned as well: so a rerun, whose picks may differ, combines the
   same mutants and tunes nothing new.

With ``--charge inside``, the original's tasks then share what the mutants left of the budget
(:meth:`~tvm_pet.pipeline.mutant_budget.Allowance.top_up`).

The mutants are listed through the run's :class:`~tvm_pet.search.mutant_cache.MutantCache`,
so that the search after this stage does not generate them again.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from tvm_pet.cost.analytic import AnalyticCost
from tvm_pet.ir import im2col
from tvm_pet.ir import winograd as wino
from tvm_pet.ir.node import Program
from tvm_pet.pipeline.kinds import Evidence, offered
from tvm_pet.pipeline.mutant_budget import Allowance, MutantBudget
from tvm_pet.pipeline.options import DriverOptions
from tvm_pet.pipeline.plan import (COMBINED, Pick, Screened, TuningPlan, combination,
                                   combined_pick, outcome, outcomes, rank_mutants)
from tvm_pet.pipeline.toolchain import Toolchain, Tuned, tvm_toolchain
from tvm_pet.search.config import SearchConfig
from tvm_pet.search.moves import aligns_extents
from tvm_pet.search.mutant_cache import MutantCache
from tvm_pet.search.optimizer import Optimizer, operator_subsets
from tvm_pet.search.partition import Subprogram, partition, replace_subprogram
from tvm_pet.search.region import fusion_region


@dataclasses.dataclass(frozen=True)
class TuneSummary:
    """What the tune stage did.

    Args:
        records: the records folder.
        tuning_time_s: seconds the stage took (screening included).
        new_trials: candidates measured, over all tasks.
        tasks: tasks visited, over all tuning calls (None: the stage did not run).
        trials_per_task: the budget per task (None: the stage did not run).
        plan: the mutants tuned besides the original.
        budget: the whole-model budget of the original's tuning (``--budget``), in words; None
            with ``trials`` per task.
        mutant_trials: the new trials of PET's mutant kernels, reported beside the budget (the
            budget is the TVM baseline's; the mutants' tasks get the trials per task the
            original's had).
        inside: with ``--charge inside``, the mutants' allowance
            (:meth:`~tvm_pet.pipeline.mutant_budget.Allowance.to_json`); None when they are
            charged beside the budget.
        original_s: seconds of the tuning calls of the original's kernels (the budget's, and
            with ``--charge inside`` its top-up).
        mutants_s: seconds of the tuning calls of PET's mutants.
            The rest of ``tuning_time_s`` went to generating, lowering and screening mutants.
    """

    records: str
    tuning_time_s: float = 0.0
    new_trials: int = 0
    tasks: int | None = None
    trials_per_task: int | None = None
    plan: TuningPlan = TuningPlan()
    budget: str | None = None
    mutant_trials: int = 0
    inside: dict | None = None
    original_s: float = 0.0
    mutants_s: float = 0.0

    @property
    def screen_s(self) -> float:
        """Seconds of the stage outside its tuning calls: generating, lowering and screening
        the mutants."""
        return max(0.0, self.tuning_time_s - self.original_s - self.mutants_s)

    @property
    def ran(self) -> bool:
        """Whether anything was tuned (``--trials`` above 0)."""
        return self.tasks is not None

    def to_json(self) -> dict:
        """The summary as ``report.json`` (``tuning``) and ``tvm-pet tune`` print it."""
        if not self.ran:
            return {"tuning_time_s": self.tuning_time_s, "new_trials": self.new_trials,
                    "records": self.records}
        return {"records": self.records, "trials_per_task": self.trials_per_task,
                "budget": self.budget, "tasks": self.tasks, "new_trials": self.new_trials,
                "mutant_trials": self.mutant_trials, "tuning_time_s": self.tuning_time_s,
                "screened_mutants": self.plan.screened,
                "screened_by_flops": self.plan.by_flops, "tuned_mutants": self.plan.to_json(),
                # per kind of rewrite: mutants screened and tuned (tvm_pet.pipeline.kinds)
                "offered": self.plan.offered,
                # per kind: won and tuned on this target so far, and the odds ranking used
                "evidence": self.plan.evidence,
                "charge": "beside" if self.inside is None else "inside",
                "inside_budget": self.inside, "original_s": self.original_s,
                "mutants_s": self.mutants_s, "screen_s": self.screen_s}


def tune_model(program: Program, config: SearchConfig, options: DriverOptions,
               toolchain: Toolchain | None = None, mutants: MutantCache | None = None,
               progress: Callable[[str], None] | None = None) -> TuneSummary:
    """Tune the original's kernels and the kernels of the most promising mutants.

    With ``options.budget`` the original's tasks share that whole-model budget (what the TVM
    baseline gets), and the mutants' new tasks are then tuned at the trials per task the
    original's had; their trials are reported beside the budget (``mutant_trials``). With
    ``options.charge`` ``"inside"`` they are charged within it
    (:class:`~tvm_pet.pipeline.mutant_budget.Allowance`): the original first gets the trials
    per task that ``1 - mutant_share`` of the budget pays for, the mutants' new kernels as many
    each while the reserve holds them, and the original's tasks then share what is left, by the
    task scheduler.

    Args:
        program: the model.
        config: the generator's budgets (the search's config).
        options: ``trials`` or ``budget`` (and ``charge``), ``seed``, ``promising``,
            ``screen_per_subset`` and ``screen_ratio``.
        toolchain: the compiler (default: TVM for ``options.target``).
        mutants: the run's generator cache (default: a new one).
        progress: gets a line with trials done and an ETA while a budget is tuned, with the
            subsets screened and an ETA while mutants are screened, and one per mutant tuned.

    Returns:
        A :class:`TuneSummary`: tasks tuned, new trials, seconds, and the tuned mutants.
    """
    if toolchain is None:
        toolchain = tvm_toolchain(options.target, options.records_dir, options.rpc,
                                  run_here=False, prepack=options.prepack)
    stage = Stage(program, config, toolchain, MutantCache() if mutants is None else mutants,
                  progress)
    start = time.perf_counter()
    original = tune_original(stage, options)
    ranked = screen_and_rank(stage, options)
    picked = tune_picks(stage, ranked, original.budget)
    tuned = tune_combination(stage, ranked, picked)
    topped_up = _top_up(stage, tuned.budget)
    evidence = learn_kinds(stage, ranked, picked)
    return _summary(stage, original, ranked, tuned, topped_up, time.perf_counter() - start,
                    evidence)


@dataclasses.dataclass(frozen=True)
class Stage:
    """What every step of the tune stage works on: the model, the generator's budgets and the
    run's generator cache, the compiler, and where progress lines go."""

    program: Program
    config: SearchConfig
    toolchain: Toolchain
    mutants: MutantCache
    progress: Callable[[str], None] | None = None

    def say(self, line: str) -> None:
        """Send ``line`` to ``progress``, if any."""
        if self.progress is not None:
            self.progress(line)


@dataclasses.dataclass(frozen=True)
class OriginalTuned:
    """Step 1's result: the original's tuning call, and what each mutant's tuning gets."""

    tuned: Tuned
    budget: MutantBudget


def tune_original(stage: Stage, options: DriverOptions) -> OriginalTuned:
    """Step 1: the original's kernels tuned at ``trials`` per task, or within a whole-model
    ``budget`` (with ``charge`` ``"inside"``, at the allowance's trials per task first); and
    the budget of the mutants' tuning, decided here once."""
    toolchain, program = stage.toolchain, stage.program
    if options.charge == "inside":
        allowance = Allowance.of(toolchain, program, options)
        first = toolchain.tune(toolchain.lower(program), allowance.trials_per_task,
                               seed=options.seed, progress=stage.progress)
        allowance = dataclasses.replace(allowance,
                                        original=frozenset(t.workload for t in first.per_task))
        return OriginalTuned(first, MutantBudget(options.budget, allowance.trials_per_task,
                                                 options.seed, allowance=allowance))
    if options.budget is not None:
        first = toolchain.tune_whole(toolchain.lower(program), options.budget,
                                     seed=options.seed, progress=stage.progress)
        # a mutant's tuning then tops up its new kernels only: the original's keep what the
        # scheduler gave them (topping them up took 20 minutes in swin_t's first mutant, and
        # gave the baseline trials beyond its budget, counted as PET's)
        return OriginalTuned(first, MutantBudget(
            options.budget, max(1, round(first.records_per_task)), options.seed,
            skip=frozenset(t.workload for t in first.per_task)))
    first = toolchain.tune(toolchain.lower(program), options.trials, seed=options.seed,
                           progress=stage.progress)
    return OriginalTuned(first, MutantBudget(None, options.trials, options.seed))


@dataclasses.dataclass(frozen=True)
class Ranked:
    """Step 2's result: the mutants screened across the model, and the plan's picks.

    Args:
        screened: what the screen measured of each mutant (``screened[k].index == k``).
        candidates: ``(subprogram, corrected mutant)`` of each, by the same index.
        picks: the mutants to tune (:func:`~tvm_pet.pipeline.plan.rank_mutants`).
    """

    screened: tuple[Screened, ...]
    candidates: tuple[tuple[Subprogram, Program], ...]
    picks: tuple[Pick, ...]


def screen_and_rank(stage: Stage, options: DriverOptions) -> Ranked:
    """Step 2: screen the cheapest mutants of every subset (``screen_per_subset``, and those
    the untuned screen cannot rank), and rank them across the model (``promising``,
    ``screen_ratio``)."""
    program = stage.program
    cost = stage.toolchain.cost_model()
    listing = Optimizer(stage.config, cost, stage.mutants)
    subsets = [(sub, subset) for sub in partition(program)
               for subset in operator_subsets(program, sub, stage.config.max_subset)]
    screened: list[Screened] = []
    candidates: list[tuple] = []  # (subprogram, corrected mutant) per screened mutant
    eta = _Eta(len(subsets), stage.progress)
    for done, (sub, subset) in enumerate(subsets, 1):
        part, found = listing.mutants_of(program, subset, sub.name)
        for row, corrected in _screen_subset(program, cost, sub.name, part, found,
                                             options.screen_per_subset, len(screened)):
            screened.append(row)
            candidates.append((part, corrected))
        eta.update(done, f"{len(screened)} mutants screened")
    evidence = Evidence.load(stage.toolchain.records_dir)
    return Ranked(tuple(screened), tuple(candidates),
                  rank_mutants(screened, options.promising, options.screen_ratio, evidence))


def _screen_subset(program: Program, cost, name: str, part, found: list[tuple], keep: int,
                   first: int) -> list[tuple[Screened, Program]]:
    """The screen of one subset's mutants ``found`` (``(mutant, corrected mutant)`` pairs of
    subprogram ``name``, cut out as ``part``): the ``keep`` the analytic model finds cheapest
    and those the untuned screen cannot rank (:func:`_cheapest`), each with its corrected
    mutant, numbered from ``first``; none where the fusion region cannot take them."""
    region = fusion_region(program, part) if found else None
    if region is None:  # no mutant, or a region too large: nothing screened
        return []
    aligned = [aligns_extents(part.program, corrected) for _, corrected in found]
    winograd = [wino.uses(corrected) for _, corrected in found]
    windows = [im2col.uses(corrected) for _, corrected in found]
    reserved = [any(flags) for flags in zip(aligned, winograd, windows)]
    rows: list[tuple[Screened, Program]] = []
    for k in _cheapest(found, keep, reserved):
        mutant, corrected = found[k]
        screen = _screen(cost, region, part, corrected, winograd[k] or windows[k])
        if screen is not None:  # a region too large, or not compilable alone: not screened
            rows.append((Screened(name, mutant.ops, screen, first + len(rows), aligned[k],
                                  winograd[k], windows=windows[k]), corrected))
    return rows


@dataclasses.dataclass(frozen=True)
class MutantsTuned:
    """Steps 3 and 4's result: the mutants tuned, and the budget left.

    Args:
        picks: the picks tuned (those the allowance held, with one), the combination's last.
        tuned: ``(subprogram, whole program, corrected mutant)`` of each pick tuned.
        calls: what each tuning call did.
        budget: the mutants' budget after them (the allowance charged).
    """

    picks: tuple[Pick, ...]
    tuned: tuple[tuple[Subprogram, Program, Program], ...]
    calls: tuple[Tuned, ...]
    budget: MutantBudget


def tune_picks(stage: Stage, ranked: Ranked, budget: MutantBudget) -> MutantsTuned:
    """Step 3: each of the plan's picks tuned in place in the whole model (TVM fuses its kernels
    with their neighbours, and those fused kernels are what gets tuned and run), at the
    ``budget``'s trials per task: those tuned before too, topped up to them as the original's
    kernels are (the tuner measures nothing for a task that has them, or whose search ran
    out)."""
    picks: list[Pick] = []
    tuned: list[tuple] = []
    calls: list[Tuned] = []
    for n, pick in enumerate(ranked.picks, 1):
        part, corrected = ranked.candidates[pick.index]
        stage.say(f"mutant {n}/{len(ranked.picks)} ({pick.subprogram}: "
                  f"{' '.join(pick.mutant)}): {pick.reason}")
        whole = replace_subprogram(stage.program, part, corrected)
        call, budget = _tune_mutant(stage, whole, budget)
        if call is not None:
            calls.append(call)
            tuned.append((part, whole, corrected))
            picks.append(pick)
    return MutantsTuned(tuple(picks), tuple(tuned), tuple(calls), budget)


def tune_combination(stage: Stage, ranked: Ranked, picked: MutantsTuned) -> MutantsTuned:
    """Step 4: the tuned mutants that beat the original by themselves, the picks and the others
    whose kernels hold records (:func:`_also_tuned`), applied together
    (:func:`~tvm_pet.pipeline.plan.combination`) and tuned in the whole model; ``picked`` with
    the combination's pick and call added (as it was where there is none, or the allowance
    cannot hold it)."""
    also = _also_tuned(stage, ranked, {p.index for p in picked.picks})
    combined = combination(stage.program, picked.tuned + also, stage.toolchain.cost_model())
    if combined is None:
        return picked
    call, budget = _tune_mutant(stage, combined, picked.budget)
    if call is None:
        return dataclasses.replace(picked, budget=budget)
    return MutantsTuned(picked.picks + (combined_pick(combined),), picked.tuned,
                        picked.calls + (call,), budget)


def learn_kinds(stage: Stage, ranked: Ranked, picked: MutantsTuned) -> Evidence:
    """Step 5: each mutant tuned, screened again on its new records, and how it compared (its
    kind, tuned time over replaced time) kept in the records folder with the outcomes of the
    mutants screened with records already (:class:`~tvm_pet.pipeline.kinds.Evidence`), so that
    later runs on this target tune first the kinds that win here. Returns the evidence kept."""
    cost, found = None, []
    for pick in picked.picks:
        if pick.subprogram == COMBINED:
            continue
        part, corrected = ranked.candidates[pick.index]
        cost = stage.toolchain.cost_model() if cost is None else cost
        screen = _screen(cost, fusion_region(stage.program, part), part, corrected,
                         wino.uses(corrected) or im2col.uses(corrected))
        if screen is not None and (o := outcome(screen, pick.mutant)) is not None:
            found.append(o)
    learned = Evidence().adding(outcomes(ranked.screened)).adding(found)
    if learned.outcomes:
        return learned.save(stage.toolchain.records_dir)
    return Evidence.load(stage.toolchain.records_dir)


def _top_up(stage: Stage, budget: MutantBudget) -> Tuned | None:
    """With ``--charge inside``: the original's tasks tuned up to the budget less what the
    mutants' new kernels hold (:meth:`~tvm_pet.pipeline.mutant_budget.Allowance.top_up`); else
    None."""
    if budget.allowance is None:
        return None
    return budget.allowance.top_up(stage.toolchain, stage.program, budget.seed, stage.progress)


def _summary(stage: Stage, original: OriginalTuned, ranked: Ranked, mutants: MutantsTuned,
             topped_up: Tuned | None, seconds: float, evidence: Evidence) -> TuneSummary:
    """The stage's summary, from its steps' results, the ``seconds`` it took and the kinds'
    ``evidence`` on this target."""
    rest = [original.tuned] + ([] if topped_up is None else [topped_up])
    mutant_trials = sum(c.new_trials for c in mutants.calls)
    budget = mutants.budget
    return TuneSummary(records=str(stage.toolchain.records_dir), tuning_time_s=seconds,
                       new_trials=sum(r.new_trials for r in rest) + mutant_trials,
                       tasks=original.tuned.tasks + sum(c.tasks for c in mutants.calls),
                       trials_per_task=budget.trials,
                       plan=TuningPlan(mutants.picks, len(ranked.screened),
                                       sum(s.screen.basis == "flops" for s in ranked.screened),
                                       offered(ranked.screened, mutants.picks),
                                       evidence.to_json()),
                       budget=None if budget.whole is None else str(budget.whole),
                       mutant_trials=mutant_trials,
                       inside=None if budget.allowance is None else budget.allowance.to_json(),
                       original_s=sum(r.wall_s for r in rest),
                       mutants_s=sum(c.wall_s for c in mutants.calls))


def _tune_mutant(stage: Stage, program: Program,
                 budget: MutantBudget) -> tuple[Tuned | None, MutantBudget]:
    """Tune a mutant in the whole model (``program``) at the ``budget``'s trials per task; with
    an allowance, only where its reserve holds the mutant's kernels without records of their
    own. Returns the call (None where it was not tuned) and the budget after it (the allowance
    charged, or counting one more mutant not tuned)."""
    module = stage.toolchain.lower(program)
    allowance = budget.allowance
    if allowance is not None and not allowance.affords(stage.toolchain.records_plan(module),
                                                       budget.trials):
        stage.say(f"not tuned: its new kernels at {budget.trials} trials each (one for a pad "
                  f"or copy) do not fit what is left of the mutants' reserve "
                  f"({allowance.reserve - allowance.spent} of {allowance.reserve} trials)")
        return None, dataclasses.replace(budget, allowance=allowance.skipping())
    call = stage.toolchain.tune(module, budget.trials, seed=budget.seed, progress=stage.progress,
                                skip=budget.skip)
    if allowance is not None:
        budget = dataclasses.replace(budget, allowance=allowance.charged(call))
    return call, budget


def _also_tuned(stage: Stage, ranked: Ranked, picked: set[int]) -> tuple[tuple, ...]:
    """``(subprogram, whole program, corrected mutant)`` of the screened mutants besides the
    ``picked`` ones whose new kernels all hold records now, and that save time on them: those
    tuned before, and those whose new kernels the picks' tuning gave records (they and the
    tuned-before ones sharing a kernel with a pick are screened again on the new records).

    The combination is made of these and the picks, so that a rerun, whose picks are all tuned
    before and may differ from this run's, combines the same mutants and tunes nothing new:
    made of this run's picks alone, a rerun of CSRNet with ``--winograd`` combined others, whose
    new fused kernels took 710 s (two trials, and a search space spent in a loop).
    """
    program = stage.program
    now = set().union(*(s.screen.new_kernels for s in ranked.screened if s.index in picked))
    cost, also = None, []
    for s in ranked.screened:
        if s.index in picked or not s.screen.new_kernels:
            continue
        part, corrected = ranked.candidates[s.index]
        screen = s.screen
        if screen.new_kernels & now:  # records this run added: screened again on them
            cost = stage.toolchain.cost_model() if cost is None else cost
            screen = _screen(cost, fusion_region(program, part), part, corrected)
        if screen is not None and screen.tuned and screen.expected_saving_s > 0:
            also.append((part, replace_subprogram(program, part, corrected), corrected))
    return tuple(also)


def _screen(cost, region, part, corrected, by_flops: bool = False):
    """The screen of one mutant from its fusion region (``MeasuredCost.screen``; ``by_flops``
    for a mutant with places of its own, whose untuned time ranks nothing), or None where the
    region cannot take it or is not screened (too large, or not compilable alone)."""
    after = region.after(part, corrected)
    return None if after is None else cost.screen(region.before, after, by_flops)


def _cheapest(found: list[tuple], keep: int, reserved: list[bool]) -> list[int]:
    """Positions in ``found`` of the ``keep`` mutants of one subset the analytic model finds
    cheapest, and of those the untuned screen cannot rank (``reserved``: aligning an awkward
    side, :func:`~tvm_pet.search.moves.aligns_extents`, more FLOPs and faster tuned; or by
    Winograd's algorithm), in their order: only these are compiled and timed by the screen."""
    analytic = AnalyticCost()
    order = sorted(range(len(found)), key=lambda k: (analytic.cost(found[k][1]), k))
    return sorted(set(order[:keep]) | {k for k in order[keep:] if reserved[k]})


class _Eta:
    """A progress line with an estimate of the time left, at most every ``every_s`` seconds."""

    def __init__(self, total: int, progress: Callable[[str], None] | None, every_s: float = 15.0):
        self.total, self.progress, self.every_s = total, progress, every_s
        self.start = self.last = time.perf_counter()

    def update(self, done: int, what: str) -> None:
        now = time.perf_counter()
        if self.progress is None or (now - self.last < self.every_s and done < self.total):
            return
        self.last = now
        left = (now - self.start) / done * (self.total - done)
        self.progress(f"screening: {done}/{self.total} subsets, {what}, about {left:.0f} s left")
