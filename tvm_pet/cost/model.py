"""The cost-model Protocol the optimizer uses, and what a tuning screen learns of a rewrite."""
from __future__ import annotations

import dataclasses
import math
from typing import Protocol, runtime_checkable

from tvm_pet.ir.node import Program


@runtime_checkable
class CostModel(Protocol):
    """Estimates the run time of a program, in seconds. Lower is better.

    A model may set ``additive = False`` when the cost of a program is not the sum of its
    subprograms' costs (the measured model: TVM fuses kernels across subprogram borders); the
    optimizer then costs every candidate as a whole program. Without the attribute, costs are
    taken as additive and only the replaced subprogram is costed.

    A model whose costs are measured once each may set ``spread`` (at least 1): a program costed
    up to ``spread`` times the original's cost may still be faster when run, so the optimizer
    lists such near ties among its runners-up, for an end-to-end confirmation to decide (the
    measured model: :data:`tvm_pet.tune.measured_cost.SPREAD`). Without the attribute, only
    programs costed below the original are listed.
    """

    name: str

    def cost(self, program: Program) -> float:
        """Estimated seconds to run ``program`` once."""
        ...


@dataclasses.dataclass(frozen=True)
class RewriteScreen:
    """What the tuning screen learns of one rewrite from the kernels it changes.

    Attributes:
        replaced_s: seconds per run of the kernels the rewrite removes, as the model costs them
            (the original's tuning records where they exist).
        untuned_ratio: untuned time of the kernels the rewrite adds over the untuned time of
            those it removes (``inf`` when it removes none): how the mutant's kernels compare
            before either side is tuned.
        tuned_s: seconds per run of the kernels the rewrite adds, from their tuning records,
            when every one has records already (an earlier run tuned the mutant); else None.
        new_kernels: keys of the kernels the rewrite adds (structural hashes): two rewrites
            that add the same kernels are tuned by tuning either.
        basis: what ``untuned_ratio`` compares: ``"untuned"``, the kernels' untuned times
            measured; ``"flops"``, their floating-point operations (kernels too large to time
            untuned).
    """

    replaced_s: float
    untuned_ratio: float
    tuned_s: float | None = None
    new_kernels: frozenset = frozenset()
    basis: str = "untuned"

    @property
    def tuned(self) -> bool:
        """Every kernel the rewrite adds has tuning records."""
        return self.tuned_s is not None

    @property
    def expected_saving_s(self) -> float:
        """Seconds per run the rewrite saves once its kernels are tuned: measured from the
        records when they are, else the replaced kernels' time scaled by the untuned ratio
        (``-inf`` when it replaces nothing).

        >>> round(RewriteScreen(replaced_s=0.010, untuned_ratio=0.6).expected_saving_s, 6)
        0.004
        >>> round(RewriteScreen(0.010, 0.6, tuned_s=0.007).expected_saving_s, 6)
        0.003
        """
        if self.tuned_s is not None:
            return self.replaced_s - self.tuned_s
        if math.isinf(self.untuned_ratio):
            return -math.inf
        return self.replaced_s * (1.0 - self.untuned_ratio)
