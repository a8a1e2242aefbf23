"""The tuning plan: which mutants get their kernels tuned, and why (pure; no TVM).

Tuning every candidate is unaffordable on a CPU (1-3 minutes per kernel at 64 trials), so
``tvm-pet tune`` (and ``optimize --trials N``) tunes the original and only a few mutants per
subset. This module holds the rules; :mod:`tvm_pet.pipeline.tune` applies them with a toolchain.

- :func:`pick_mutants`: per subset, the mutants an earlier run tuned keep their places (the
  untuned screen is noisy, and a rerun must not pick different ones), up to ``promising``; the
  free places go to the mutants whose changed kernels, untuned, take the least time relative to
  the kernels they replace, if at most ``screen_ratio`` times as long.
- :func:`combination`: the tuned mutants that beat the original by themselves, applied together
  (:func:`~tvm_pet.search.optimizer.combine`): the program the search's combine step will cost,
  whose kernels (layouts cancelled between neighbours, new fusions) must be tuned too.

>>> picks = pick_mutants("conv0", [("Conv",), ("Conv", "Transpose")], [False, False],
...                      untuned_ratio=lambda k: [3.0, 0.5][k], promising=2, screen_ratio=2.0)
>>> [(p.mutant, p.untuned_ratio) for p in picks]
[(('Conv', 'Transpose'), 0.5)]
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from tvm_pet.cost.model import CostModel
from tvm_pet.ir.node import Program
from tvm_pet.search.optimizer import combine
from tvm_pet.search.partition import Subprogram

#: The ``subprogram`` of the pick that stands for the combination of the tuned mutants.
COMBINED = "combined"


@dataclasses.dataclass(frozen=True)
class Pick:
    """One mutant chosen for tuning.

    Args:
        subprogram: the subprogram it rewrites (``"combined"`` for the combination).
        mutant: its operators.
        untuned_ratio: what the screen measured (changed kernels' untuned time over the replaced
            ones'); None when it was not screened (tuned by an earlier run, or the combination).
        index: its position among its subset's mutants (-1 for the combination).
    """

    subprogram: str
    mutant: tuple[str, ...]
    untuned_ratio: float | None
    index: int = -1

    @property
    def reason(self) -> str:
        """Why it is tuned, in words."""
        if self.subprogram == COMBINED:
            return "the tuned mutants that improve, applied together"
        if self.untuned_ratio is None:
            return "tuned by an earlier run"
        return f"screened: its changed kernels take x{self.untuned_ratio:.2f} untuned"

    def to_json(self) -> dict:
        """The pick as ``report.json`` and ``tvm-pet tune`` write it."""
        return {"subprogram": self.subprogram, "mutant": list(self.mutant),
                "untuned_ratio": self.untuned_ratio}


@dataclasses.dataclass(frozen=True)
class TuningPlan:
    """The mutants tuned besides the original, in the order they were chosen."""

    picks: tuple[Pick, ...] = ()

    def to_json(self) -> list[dict]:
        """One entry per pick (``tuned_mutants`` of the tuning summary)."""
        return [p.to_json() for p in self.picks]


def pick_mutants(subprogram: str, mutants: Sequence[tuple[str, ...]],
                 tuned_before: Sequence[bool], untuned_ratio: Callable[[int], float],
                 promising: int, screen_ratio: float) -> tuple[Pick, ...]:
    """Choose the mutants of one subset to tune.

    The mutants tuned before come first, at most ``promising`` of them; the remaining places go
    to the other mutants in increasing order of ``untuned_ratio``, each only if its ratio is at
    most ``screen_ratio``. ``untuned_ratio`` is called only when places remain (it measures).

    Args:
        subprogram: the subset's subprogram name.
        mutants: each mutant's operators.
        tuned_before: per mutant, whether all its kernels already have records.
        untuned_ratio: the screen of the mutant at an index.
        promising: places per subset.
        screen_ratio: the screen's threshold.

    Returns:
        The picks, tuned-before ones first, then the screened ones from best to worst.
    """
    done = [k for k, tuned in enumerate(tuned_before) if tuned][:promising]
    picks = [Pick(subprogram, tuple(mutants[k]), None, k) for k in done]
    slots = promising - len(done)
    if slots <= 0:
        return tuple(picks)
    fresh = [k for k in range(len(mutants)) if k not in done]
    ranked = sorted(((untuned_ratio(k), k) for k in fresh), key=lambda r: r[0])
    picks += [Pick(subprogram, tuple(mutants[k]), ratio, k)
              for ratio, k in ranked[:slots] if ratio <= screen_ratio]
    return tuple(picks)


def combination(program: Program, tuned: Sequence[tuple[Subprogram, Program, Program]],
                cost: CostModel) -> Program | None:
    """The tuned mutants that beat the original by themselves, applied together.

    Args:
        program: the original.
        tuned: ``(subprogram, whole program with the mutant in place, corrected mutant)`` per
            tuned mutant.
        cost: the tuned cost model.

    Returns:
        The best improving mutant of each disjoint subset applied together and post-optimized,
        or None when fewer than two subsets improve.
    """
    if len(tuned) < 2:
        return None
    scored = [(cost.cost(whole), part, corrected) for part, whole, corrected in tuned]
    together = combine(program, scored, cost.cost(program))
    return None if together is None else together[0]


def combined_pick(program: Program) -> Pick:
    """The pick that stands for the combination ``program``."""
    return Pick(COMBINED, tuple(n.op.value for n in program.nodes), None)
