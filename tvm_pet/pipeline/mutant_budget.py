"""What the tune stage's mutants get: their trials per task, decided once by the original's
tuning (:class:`MutantBudget`), and with ``--charge inside`` their share of a whole-model budget
(:class:`Allowance`).

Both are frozen: tuning a mutant returns the budget with the allowance charged
(:meth:`Allowance.charged`), so that :mod:`tvm_pet.pipeline.tune` threads one value from step to
step instead of reading ``DriverOptions`` again.

>>> from types import SimpleNamespace as Facts
>>> allowance = Allowance(budget=100, reserve=40, trials_per_task=20)
>>> plan = Facts(tasks=3, own=1, unowned_spatial=1)  # a new pad and a new conv
>>> allowance.affords(plan, 20), allowance.affords(plan, 40)
(True, False)
>>> conv = Facts(workload="conv", records_before=0, new_trials=20)
>>> allowance.charged(Facts(per_task=(conv,))).spent, allowance.spent
(20, 0)
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from tvm_pet.errors import PetError
from tvm_pet.ir.node import Program
from tvm_pet.pipeline.options import DriverOptions, WholeBudget
from tvm_pet.pipeline.toolchain import Toolchain, Tuned


@dataclasses.dataclass(frozen=True)
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

    Args:
        budget: the whole-model budget, in trials.
        reserve: the trials kept for the mutants' new kernels.
        trials_per_task: the original's, and each new kernel's, trials.
        original: the original's kernels (workloads), never charged to the mutants.
        held: ``(workload, trials it holds)`` per new kernel charged so far.
        skipped: mutants not tuned, the reserve not holding them.
    """

    budget: int
    reserve: int
    trials_per_task: int
    original: frozenset[str] = frozenset()
    held: tuple[tuple[str, int], ...] = ()
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
        return sum(trials for _, trials in self.held)

    def affords(self, plan, trials: int) -> bool:
        """Whether the reserve holds the kernels of a mutant's records ``plan`` that have no
        record of the target's own: ``trials`` each for those that reduce, one for the others
        (a pad's search space is exhausted at one trial; what they hold is charged)."""
        spatial = plan.unowned_spatial  # a part of the kernels without own records
        return self.spent + (plan.tasks - plan.own - spatial) * trials + spatial <= self.reserve

    def charged(self, tuned: Tuned) -> "Allowance":
        """This allowance with the new kernels of a mutant's tuning call charged with what they
        hold."""
        held = dict(self.held)
        for t in tuned.per_task:
            if t.workload not in self.original:
                held[t.workload] = t.records_before + t.new_trials
        return dataclasses.replace(self, held=tuple(held.items()))

    def skipping(self) -> "Allowance":
        """This allowance with one more mutant it could not hold."""
        return dataclasses.replace(self, skipped=self.skipped + 1)

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


@dataclasses.dataclass(frozen=True)
class MutantBudget:
    """What each mutant's tuning gets, decided once, by the original's tuning
    (:func:`~tvm_pet.pipeline.tune.tune_original`).

    Args:
        whole: the whole-model budget of the original's tuning (``--budget``), or None.
        trials: trials per task: ``--trials``, or with a whole-model budget the trials per task
            the original's tasks got from it.
        seed: the tuning seed.
        skip: the original's kernels (workloads) a whole-model budget tuned, beside it: a
            mutant's tuning leaves them as the budget left them.
        allowance: with ``--charge inside``, the mutants' reserve and what it holds so far.
    """

    whole: WholeBudget | None
    trials: int
    seed: int
    skip: frozenset[str] = frozenset()
    allowance: Allowance | None = None
