"""The tune stage: the original's kernels, then those of the most promising mutants.

Steps 1 and 2 of ``tvm-pet optimize`` (:mod:`tvm_pet.pipeline.optimize`), and all of
``tvm-pet tune``:

1. **Tune the original.** Its kernels are tuned with MetaSchedule (``trials`` per task) into
   ``tuning_logs/<target>/``; records are reused with zero new trials afterwards.
2. **Screen cheaply, tune the promising few.** The generator lists verified mutants per subset.
   Each is put in place in the whole model and costed with *untuned* kernels, comparing only the
   kernels it changes; the plan (:func:`~tvm_pet.pipeline.plan.pick_mutants`) chooses which get
   tuned, with the same trials per task as the original. They are tuned in the whole model, as
   TVM fuses them there (a mutant's last kernel takes the bias and ReLU after it), so that their
   records match the final build. Then the tuned mutants that beat the original by themselves
   are applied together (:func:`~tvm_pet.pipeline.plan.combination`), and that combination,
   which the search's combine step will cost, is tuned as well.

The mutants are listed through the run's :class:`~tvm_pet.search.mutant_cache.MutantCache`,
so that the search after this stage does not generate them again.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from tvm_pet.ir.node import Program
from tvm_pet.pipeline.options import DriverOptions
from tvm_pet.pipeline.plan import Pick, TuningPlan, combination, combined_pick, pick_mutants
from tvm_pet.pipeline.toolchain import Toolchain, Tuned, tvm_toolchain
from tvm_pet.search.config import SearchConfig
from tvm_pet.search.mutant_cache import MutantCache
from tvm_pet.search.optimizer import Optimizer, operator_subsets
from tvm_pet.search.partition import partition, replace_subprogram


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
    """

    records: str
    tuning_time_s: float = 0.0
    new_trials: int = 0
    tasks: int | None = None
    trials_per_task: int | None = None
    plan: TuningPlan = TuningPlan()
    budget: str | None = None
    mutant_trials: int = 0

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
                "tuned_mutants": self.plan.to_json()}


def tune_model(program: Program, config: SearchConfig, options: DriverOptions,
               toolchain: Toolchain | None = None, mutants: MutantCache | None = None,
               progress: Callable[[str], None] | None = None) -> TuneSummary:
    """Tune the original's kernels and the kernels of the most promising mutants.

    With ``options.budget`` the original's tasks share that whole-model budget (what the TVM
    baseline gets), and the mutants' new tasks are then tuned at the trials per task the
    original's had; their trials are reported beside the budget (``mutant_trials``).

    Args:
        program: the model.
        config: the generator's budgets (the search's config).
        options: ``trials`` or ``budget``, ``seed``, ``promising`` and ``screen_ratio``.
        toolchain: the compiler (default: TVM for ``options.target``).
        mutants: the run's generator cache (default: a new one).
        progress: gets a line with trials done and an ETA while a budget is tuned.

    Returns:
        A :class:`TuneSummary`: tasks tuned, new trials, seconds, and the tuned mutants.
    """
    if toolchain is None:
        toolchain = tvm_toolchain(options.target, options.records_dir, options.rpc,
                                  run_here=False)
    mutants = MutantCache() if mutants is None else mutants
    start = time.perf_counter()
    if options.budget is not None:
        first = toolchain.tune_whole(toolchain.lower(program), options.budget,
                                     seed=options.seed, progress=progress)
        options = dataclasses.replace(options, trials=max(1, round(first.records_per_task)))
    else:
        first = _tune(toolchain, program, options)
    picks, tuned, stats = _tune_promising(program, config, options, toolchain, mutants)
    combined = combination(program, tuned, toolchain.cost_model(tuned=True))
    if combined is not None:
        stats.append(_tune(toolchain, combined, options))
        picks.append(combined_pick(combined))
    return TuneSummary(records=str(toolchain.records_dir),
                       tuning_time_s=time.perf_counter() - start,
                       new_trials=first.new_trials + sum(s.new_trials for s in stats),
                       tasks=first.tasks + sum(s.tasks for s in stats),
                       trials_per_task=options.trials, plan=TuningPlan(tuple(picks)),
                       budget=None if options.budget is None else str(options.budget),
                       mutant_trials=sum(s.new_trials for s in stats))


def _tune(toolchain: Toolchain, program: Program, options: DriverOptions) -> Tuned:
    return toolchain.tune(toolchain.lower(program), options.trials, seed=options.seed)


def _tune_promising(program: Program, config: SearchConfig, options: DriverOptions,
                    toolchain: Toolchain, mutants: MutantCache
                    ) -> tuple[list[Pick], list[tuple], list[Tuned]]:
    """Screen every subset's mutants and tune the plan's picks.

    Returns:
        The picks; ``(subprogram, whole program, corrected mutant)`` per mutant tuned now or
        before; and what each tuning call did.
    """
    untuned = toolchain.cost_model(tuned=False)
    listing = Optimizer(config, untuned, mutants)
    picks: list[Pick] = []
    tuned: list[tuple] = []
    stats: list[Tuned] = []
    for sub in partition(program):
        for subset in operator_subsets(program, sub, config.max_subset):
            part, found = listing.mutants_of(program, subset, sub.name)
            # each mutant in place in the whole model: TVM fuses its kernels with their
            # neighbours, and those fused kernels are what gets tuned and run
            wholes = [replace_subprogram(program, part, corrected) for _, corrected in found]
            if not wholes:
                continue
            chosen = pick_mutants(sub.name, [m.ops for m, _ in found],
                                  [toolchain.tuned_before(w) for w in wholes],
                                  lambda k: untuned.changed_ratio(program, wholes[k]),
                                  options.promising, options.screen_ratio)
            for pick in chosen:
                if pick.untuned_ratio is not None:  # screened now: not tuned yet
                    stats.append(_tune(toolchain, wholes[pick.index], options))
                tuned.append((part, wholes[pick.index], found[pick.index][1]))
            picks += chosen
    return picks, tuned, stats
