"""Options of the application: what ``tvm-pet optimize`` and ``tvm-pet tune`` are asked to do.

:class:`DriverOptions` holds the end-to-end choices (target, tuning budget, screen, timing,
confirmation); the search's own budgets stay in :class:`~tvm_pet.search.config.SearchConfig`,
re-exported here so that a caller of the application needs one import.

>>> DriverOptions(trials=8).second_look_budget()
Budget(trials_per_task=16, seed=1)
"""
from __future__ import annotations

import dataclasses

from tvm_pet.search.config import SearchConfig


@dataclasses.dataclass(frozen=True)
class Budget:
    """A tuning budget: MetaSchedule trials per task, and the tuning seed."""

    trials_per_task: int
    seed: int


@dataclasses.dataclass(frozen=True)
class DriverOptions:
    """Options of :func:`~tvm_pet.pipeline.optimize.optimize` and
    :func:`~tvm_pet.pipeline.tune.tune_model`.

    Args:
        target: a target spec (``"llvm"``, ``"cuda"``, ...).
        trials: MetaSchedule trials per task; 0 uses the records as they are.
        records_dir: the tuning records folder (default ``tuning_logs/<target>``).
        rpc: ``"host:port:key"`` of an RPC tracker to measure on.
        cost: ``"measured"`` (TVM kernel times) or ``"analytic"``: the search's cost model.
        promising: mutants tuned per subset (the screen's best).
        screen_ratio: largest untuned time of a mutant's changed kernels over the replaced
            ones for it to be tuned.
        timing_rounds: interleaved rounds of a first look.
        timing_number: calls averaged into one timing sample.
        timing_repeat: samples per module per round.
        seed: the tuning seed and the seed of the random inputs.
        second_look: look again at close calls.
        confirm: candidates timed end to end, best first, before the original is kept.
    """

    target: str = "llvm"
    trials: int = 0
    records_dir: str | None = None
    rpc: str | None = None
    cost: str = "measured"
    promising: int = 2
    screen_ratio: float = 2.0
    timing_rounds: int = 5
    timing_number: int = 3
    timing_repeat: int = 3
    seed: int = 0
    second_look: bool = True
    confirm: int = 3

    def budget(self) -> Budget:
        """The tuning budget of the first look: ``trials`` per task with ``seed``."""
        return Budget(self.trials, self.seed)

    def second_look_budget(self) -> Budget:
        """The budget of a second look: twice the trials, the next seed (0 trials: no tuning)."""
        if self.trials > 0:
            return Budget(2 * self.trials, self.seed + 1)
        return Budget(0, self.seed)


__all__ = ["Budget", "DriverOptions", "SearchConfig"]
