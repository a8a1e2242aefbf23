"""The tune stage: the original's kernels, then those of the most promising mutants.

Steps 1 and 2 of ``tvm-pet optimize`` (:mod:`tvm_pet.pipeline.optimize`), and all of
``tvm-pet tune``:

1. **Tune the original.** Its kernels are tuned with MetaSchedule (``trials`` per task) into
   ``tuning_logs/<target>/``; records are reused with zero new trials afterwards.
2. **Screen cheaply, tune the promising few.** The generator lists verified mutants per subset;
   the analytic model keeps the ``screen_per_subset`` cheapest of each subset. Each of those is
   screened from its fusion region (:mod:`tvm_pet.search.region`): the kernels it removes and
   those it adds, timed *untuned* on both sides (compared by FLOPs instead where a kernel is too
   large to time untuned, such as a 3-D convolution), and the removed ones' tuned time from the
   original's records (:meth:`~tvm_pet.tune.measured_cost.MeasuredCost.screen`). The plan
   (:func:`~tvm_pet.pipeline.plan.rank_mutants`) ranks them across the whole model by the
   milliseconds they are expected to save and picks the best ``promising``, tuned with the same
   trials per task as the original. Untuned, a rewrite's kernels often time like the replaced
   ones, and tuned they do not; so an optional **second screen** (``second_screen``, off by
   default) first short-tunes that many more mutants (those whose new kernels replace the most
   time across the model, at ``screen_trials`` per task), and the plan ranks them by what they
   save tuned. They are tuned in the whole model, as TVM fuses them there (a mutant's last
   kernel takes the bias and ReLU after it), so that their records match the final build.
   Then the tuned mutants that beat the original by themselves, this run's picks and every
   other mutant whose kernels hold records (from earlier runs, or kernels the picks share), are
   applied together (:func:`~tvm_pet.pipeline.plan.combination`), and that combination, which
   the search's combine step will cost, is tuned as well: so a rerun, whose picks may differ,
   combines the same mutants and tunes nothing new.

The mutants are listed through the run's :class:`~tvm_pet.search.mutant_cache.MutantCache`,
so that the search after this stage does not generate them again.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

from tvm_pet.cost.analytic import AnalyticCost
from tvm_pet.errors import PetError
from tvm_pet.ir import im2col
from tvm_pet.ir import winograd as wino
from tvm_pet.ir.node import Program
from tvm_pet.pipeline.options import DriverOptions, WholeBudget
from tvm_pet.pipeline.plan import (Pick, Screened, TuningPlan, combination, combined_pick,
                                   rank_mutants, short_list)
from tvm_pet.pipeline.toolchain import Toolchain, Tuned, tvm_toolchain
from tvm_pet.search.config import SearchConfig
from tvm_pet.search.moves import aligns_extents
from tvm_pet.search.mutant_cache import MutantCache
from tvm_pet.search.optimizer import Optimizer, operator_subsets
from tvm_pet.search.partition import partition, replace_subprogram
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
            original's had, the second screen's ``screen_trials``).
        screen_trials: trials per task of the second screen.
        inside: with ``--charge inside``, the mutants' allowance (:meth:`Allowance.to_json`);
            None when they are charged beside the budget.
        original_s: seconds of the tuning calls of the original's kernels (the budget's, and
            with ``--charge inside`` its top-up).
        mutants_s: seconds of the tuning calls of PET's mutants (the second screen's too).
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
    screen_trials: int = 0
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
                "screened_by_flops": self.plan.by_flops, "short_tuned": self.plan.short_tuned,
                "screen_trials": self.screen_trials, "tuned_mutants": self.plan.to_json(),
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
    ``options.charge`` ``"inside"`` they are charged within it (:class:`Allowance`): the
    original first gets the trials per task that ``1 - mutant_share`` of the budget pays for,
    the mutants' new kernels as many each while the reserve holds them, and the original's
    tasks then share what is left, by the task scheduler.

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
    mutants = MutantCache() if mutants is None else mutants
    start = time.perf_counter()
    first, options, allowance = _tune_original(toolchain, program, options, progress)
    picks, tuned, stats, screened, short = _tune_promising(program, config, options, toolchain,
                                                           mutants, progress, allowance)
    combined = combination(program, tuned, toolchain.cost_model())
    if combined is not None:
        combined_stats = _tune_mutant(toolchain, combined, options.trials, options, progress,
                                      allowance)
        if combined_stats is not None:
            stats.append(combined_stats)
            picks.append(combined_pick(combined))
    rest = [] if allowance is None else [allowance.top_up(toolchain, program, options.seed,
                                                          progress)]
    mutant_trials = sum(s.new_trials for s in stats)
    return TuneSummary(records=str(toolchain.records_dir),
                       tuning_time_s=time.perf_counter() - start,
                       new_trials=first.new_trials + mutant_trials + sum(r.new_trials
                                                                          for r in rest),
                       tasks=first.tasks + sum(s.tasks for s in stats),
                       trials_per_task=options.trials,
                       plan=TuningPlan(tuple(picks), len(screened),
                                       sum(s.screen.basis == "flops" for s in screened), short),
                       budget=None if options.budget is None else str(options.budget),
                       mutant_trials=mutant_trials,
                       screen_trials=options.second_screen_trials,
                       inside=None if allowance is None else allowance.to_json(),
                       original_s=sum(r.wall_s for r in [first, *rest]),
                       mutants_s=sum(s.wall_s for s in stats))


def _tune_original(toolchain: Toolchain, program: Program, options: DriverOptions,
                   progress: Callable[[str], None] | None
                   ) -> tuple[Tuned, DriverOptions, "Allowance | None"]:
    """Step 1: the original's kernels tuned at ``trials`` per task, or within a whole-model
    budget; the options with the trials per task the mutants then get, and their allowance
    where they are charged inside the budget."""
    if options.charge == "inside":
        allowance = Allowance.of(toolchain, program, options)
        options = dataclasses.replace(options, trials=allowance.trials_per_task)
        first = _tune(toolchain, program, options, progress)
        allowance.original = frozenset(t.workload for t in first.per_task)
        return first, options, allowance
    if options.budget is not None:
        first = toolchain.tune_whole(toolchain.lower(program), options.budget,
                                     seed=options.seed, progress=progress)
        per_task = max(1, round(first.records_per_task))
        # a mutant's tuning then tops up its new kernels only: the original's keep what the
        # scheduler gave them (topping them up took 20 minutes in swin_t's first mutant, and
        # gave the baseline trials beyond its budget, counted as PET's)
        budgeted = frozenset(t.workload for t in first.per_task)
        return first, dataclasses.replace(options, trials=per_task, budget_tuned=budgeted), None
    return _tune(toolchain, program, options, progress), options, None


@dataclasses.dataclass
class Allowance:
    """PET's mutants charged inside a whole-model budget in trials (``--charge inside``).

    The original's kernels first get the same trials per task, what ``1 - share`` of the budget
    pays for over its tasks (rounded down: the rest of the budget is the mutants' reserve), so
    that tuning a mutant in the whole model tops up none of them.
    The mutants' new kernels (those of workloads the original lacks) then get as many each,
    one mutant at a time, while the reserve holds its new kernels (estimated at one trial for a
    kernel that does not reduce, a pad or a copy, whose search space MetaSchedule exhausts at
    one); a mutant it cannot hold is not tuned (``skipped``). What the new kernels hold is
    charged, counted from their records (so a second run charges the same without measuring
    anything); the original's tasks then share ``budget`` less that charge, by the task
    scheduler (:meth:`top_up`).
    """

    budget: int
    reserve: int
    trials_per_task: int
    original: frozenset[str] = frozenset()
    held: dict[str, int] = dataclasses.field(default_factory=dict)
    skipped: int = 0

    @classmethod
    def of(cls, toolchain: Toolchain, program: Program, options: DriverOptions) -> "Allowance":
        """The allowance of ``options.budget`` (trials) for ``program``'s kernels."""
        budget = options.budget.trials
        tasks = max(1, toolchain.records_plan(toolchain.lower(program)).tasks)
        # the original's share rounded down to whole trials per task, the rest reserved
        original = int(round(budget * (1 - options.mutant_share), 6))
        per_task = original // tasks
        if per_task < 1:
            raise PetError(f"--budget {budget}: {original} trials for the original "
                           f"({1 - options.mutant_share:.0%} of it) do not give its {tasks} "
                           f"kernels one each; give at least "
                           f"{math.ceil(tasks / (1 - options.mutant_share))}")
        return cls(budget, budget - per_task * tasks, per_task)

    @property
    def spent(self) -> int:
        """Trials the mutants' new kernels hold."""
        return sum(self.held.values())

    def affords(self, plan, trials: int) -> bool:
        """Whether the reserve holds the kernels of a mutant's records ``plan`` that have no
        record of the target's own: ``trials`` each for those that reduce, one for the others
        (a pad's search space is exhausted at one trial; what they hold is charged)."""
        spatial = plan.unowned_spatial  # a part of the kernels without own records
        return self.spent + (plan.tasks - plan.own - spatial) * trials + spatial <= self.reserve

    def charge(self, tuned) -> None:
        """Charge the new kernels of a mutant's tuning call with what they hold."""
        for t in tuned.per_task:
            if t.workload not in self.original:
                self.held[t.workload] = t.records_before + t.new_trials

    def top_up(self, toolchain: Toolchain, program: Program, seed: int,
               progress: Callable[[str], None] | None = None):
        """The original's tasks tuned up to ``budget`` less the charge, by the task scheduler
        (it counts their records: nothing is measured when they hold it already)."""
        return toolchain.tune_whole(toolchain.lower(program),
                                    WholeBudget(trials=max(1, self.budget - self.spent)),
                                    seed=seed, progress=progress)

    def to_json(self) -> dict:
        return {"budget": self.budget, "reserve": self.reserve,
                "trials_per_task": self.trials_per_task, "charged_to_mutants": self.spent,
                "mutants_not_tuned": self.skipped}


def _tune_mutant(toolchain: Toolchain, program: Program, trials: int, options: DriverOptions,
                 progress: Callable[[str], None] | None, allowance: Allowance | None):
    """Tune a mutant in the whole model at ``trials`` per task; with an ``allowance``, only
    where its reserve holds the mutant's kernels without records of their own (else None),
    charged."""
    module = toolchain.lower(program)
    if allowance is not None:
        plan = toolchain.records_plan(module)
        if not allowance.affords(plan, trials):
            allowance.skipped += 1
            if progress is not None:
                progress(f"not tuned: its new kernels at {trials} trials each (one for a pad or "
                         f"copy) do not fit what is left of the mutants' reserve "
                         f"({allowance.reserve - allowance.spent} of {allowance.reserve} trials)")
            return None
    stats = toolchain.tune(module, trials, seed=options.seed, progress=progress,
                           skip=options.budget_tuned)
    if allowance is not None:
        allowance.charge(stats)
    return stats


def _tune(toolchain: Toolchain, program: Program, options: DriverOptions,
          progress: Callable[[str], None] | None = None) -> Tuned:
    return toolchain.tune(toolchain.lower(program), options.trials, seed=options.seed,
                          progress=progress)


def _tune_promising(program: Program, config: SearchConfig, options: DriverOptions,
                    toolchain: Toolchain, mutants: MutantCache,
                    progress: Callable[[str], None] | None = None,
                    allowance: Allowance | None = None
                    ) -> tuple[list[Pick], list[tuple], list[Tuned], list[Screened], int]:
    """Screen the model's mutants, short-tune those the screen cannot rank untuned
    (:func:`_second_screen`), rank them across the model, and tune the plan's picks (those the
    ``allowance`` holds, with one).

    Returns:
        The picks tuned; ``(subprogram, whole program, corrected mutant)`` per mutant tuned now
        or before; what each tuning call did (the second screen's first); the mutants screened;
        and how many the second screen short-tuned.
    """
    cost = toolchain.cost_model()
    listing = Optimizer(config, cost, mutants)
    subsets = [(sub, subset) for sub in partition(program)
               for subset in operator_subsets(program, sub, config.max_subset)]
    screened: list[Screened] = []
    candidates: list[tuple] = []  # (subprogram, corrected mutant) per screened mutant
    eta = _Eta(len(subsets), progress)
    for done, (sub, subset) in enumerate(subsets, 1):
        part, found = listing.mutants_of(program, subset, sub.name)
        region = fusion_region(program, part) if found else None
        aligned = [aligns_extents(part.program, corrected) for _, corrected in found]
        winograd = [wino.uses(corrected) for _, corrected in found]
        windows = [im2col.uses(corrected) for _, corrected in found]
        reserved = [any(flags) for flags in zip(aligned, winograd, windows)]
        for k in _cheapest(found, options.screen_per_subset, reserved):
            mutant, corrected = found[k]
            screen = None if region is None else _screen(cost, region, part, corrected,
                                                         winograd[k] or windows[k])
            if screen is not None:  # a region too large, or not compilable alone: not screened
                screened.append(Screened(sub.name, mutant.ops, screen, len(candidates),
                                         aligned[k], winograd[k], windows=windows[k]))
                candidates.append((part, corrected))
        eta.update(done, f"{len(screened)} mutants screened")
    picks = rank_mutants(screened, options.promising, options.screen_ratio)
    screened, stats = _second_screen(program, screened, candidates, picks, options, toolchain,
                                     progress, allowance)
    short = len(stats)
    if stats:  # ranked again, the short-tuned ones by what they save tuned
        picks = rank_mutants(screened, options.promising, options.screen_ratio)
    kept: list[Pick] = []
    tuned: list[tuple] = []
    for n, pick in enumerate(picks, 1):
        part, corrected = candidates[pick.index]
        if progress is not None:
            progress(f"mutant {n}/{len(picks)} ({pick.subprogram}: {' '.join(pick.mutant)}): "
                     f"{pick.reason}")
        # the mutant in place in the whole model: TVM fuses its kernels with their neighbours,
        # and those fused kernels are what gets tuned and run
        whole = replace_subprogram(program, part, corrected)
        # tuned before too: topped up to this run's trials per task, as the original's kernels
        # are (the tuner measures nothing for a task that has them, or whose search ran out)
        done = _tune_mutant(toolchain, whole, options.trials, options, progress, allowance)
        if done is not None:
            stats.append(done)
            tuned.append((part, whole, corrected))
            kept.append(pick)
    tuned += _also_tuned(program, screened, candidates, {p.index for p in kept}, toolchain)
    return kept, tuned, stats, screened, short


def _also_tuned(program: Program, screened: list[Screened], candidates: list[tuple],
                picked: set[int], toolchain: Toolchain) -> list[tuple]:
    """``(subprogram, whole program, corrected mutant)`` of the screened mutants besides the
    ``picked`` ones whose new kernels all hold records now, and that save time on them: those
    tuned before, and those whose new kernels the picks' tuning gave records (they and the
    tuned-before ones sharing a kernel with a pick are screened again on the new records).

    The combination is made of these and the picks, so that a rerun, whose picks are all tuned
    before and may differ from this run's, combines the same mutants and tunes nothing new:
    made of this run's picks alone, a rerun of CSRNet with ``--winograd`` combined others, whose
    new fused kernels took 710 s (two trials, and a search space spent in a loop).
    """
    now = set().union(*(s.screen.new_kernels for s in screened if s.index in picked))
    cost, also = None, []
    for s in screened:
        if s.index in picked or not s.screen.new_kernels:
            continue
        part, corrected = candidates[s.index]
        screen = s.screen
        if screen.new_kernels & now:  # records this run added: screened again on them
            cost = toolchain.cost_model() if cost is None else cost
            screen = _screen(cost, fusion_region(program, part), part, corrected)
        if screen is not None and screen.tuned and screen.expected_saving_s > 0:
            also.append((part, replace_subprogram(program, part, corrected), corrected))
    return also


def _second_screen(program: Program, screened: list[Screened], candidates: list[tuple],
                   picks: tuple[Pick, ...], options: DriverOptions, toolchain: Toolchain,
                   progress: Callable[[str], None] | None = None,
                   allowance: Allowance | None = None
                   ) -> tuple[list[Screened], list[Tuned]]:
    """Short-tune the mutants the screen cannot tell apart untuned, and screen them again.

    Untuned, a rewrite's new kernels often take what the replaced ones take (``Pad -> Conv`` of
    a dilated conv: x1.02), and tuned they do not (x0.44 on the CSRNet back end). So besides the
    picks, up to ``options.second_screen`` untuned mutants within ``screen_ratio`` are tuned in
    the whole model at ``options.screen_trials`` per task, then screened again on those
    records: those whose new kernels replace the most tuned time across the model first, a
    kernel shared by several layers counted in each (:func:`~tvm_pet.pipeline.plan.short_list`).

    Returns:
        The screened mutants with the short-tuned ones screened again, and what each short
        tuning did (none when there was nothing to short-tune).
    """
    trials = options.second_screen_trials
    short = (short_list(screened, picks, options.second_screen, options.screen_ratio)
             if trials >= 1 else [])
    if not short:
        return screened, []
    stats: list[Tuned] = []
    for n, s in enumerate(short, 1):
        if progress is not None:
            progress(f"second screen {n}/{len(short)} ({s.subprogram}: {' '.join(s.mutant)}): "
                     f"{trials} trials per new kernel")
        part, corrected = candidates[s.index]
        done = _tune_mutant(toolchain, replace_subprogram(program, part, corrected), trials,
                            options, progress, allowance)
        if done is not None:
            stats.append(done)
    cost = toolchain.cost_model()  # the records the short tuning added
    again = list(screened)
    for s in short:
        part, corrected = candidates[s.index]
        screen = _screen(cost, fusion_region(program, part), part, corrected)
        if screen is not None:
            again[s.index] = dataclasses.replace(s, screen=screen)
    return again, stats


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
