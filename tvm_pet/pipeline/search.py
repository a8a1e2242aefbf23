"""The search stage: PET's search on the whole model, with the run's cost model: Algorithm 2, or
equality saturation with ``SearchConfig(search="eqsat")`` (:mod:`tvm_pet.search.dispatch`).

Step 3 of ``tvm-pet optimize`` (:mod:`tvm_pet.pipeline.optimize`). With the measured cost
(:class:`tvm_pet.tune.measured_cost.MeasuredCost`, made by the toolchain), candidates are
costed in their fused form, from the fusion region of each rewrite: tuned record times where
they exist; a rewrite to kernels without records that replace tuned ones is set aside untimed,
so an untuned mutant never wins against a tuned original. The mutants come from the
run's generator cache, filled already when the tune stage listed them.
"""
from __future__ import annotations

import dataclasses
import time

from tvm_pet.cost.analytic import AnalyticCost
from tvm_pet.cost.model import CostModel
from tvm_pet.errors import KernelBuildError
from tvm_pet.ir.node import Program
from tvm_pet.pipeline.options import DriverOptions
from tvm_pet.pipeline.toolchain import Toolchain
from tvm_pet.search.config import SearchConfig
from tvm_pet.search.mutant_cache import MutantCache
from tvm_pet.search.dispatch import run_search
from tvm_pet.search.optimizer import Candidate, SearchResult


@dataclasses.dataclass(frozen=True)
class Found:
    """What the search found.

    Args:
        result: the optimizer's result.
        seconds: the search's wall time.
        cost_model: the cost model's name.
        candidates: what the confirm stage times, best first: the best program (when a
            mutant was applied) and the runners-up, near ties included (the measured cost's
            ``spread``), at most ``confirm`` of them.
        set_aside: rewrites the cost model set aside untimed (the measured one: new kernels
            without records, replacing tuned ones).
        unbuildable: rewrites set aside because TVM cannot compile one of their new kernels.
    """

    result: SearchResult
    seconds: float
    cost_model: str
    candidates: tuple[Candidate, ...]
    set_aside: int = 0
    unbuildable: int = 0

    @property
    def near_ties(self) -> int:
        """Candidates costed at or above the original, within the cost model's spread: the
        timing decides them."""
        return sum(map(self.result.is_near_tie, self.candidates))

    def line(self) -> str:
        """What the search found, in one line of the run's progress."""
        ties = f" ({self.near_ties} costed as near ties of the original)" if self.near_ties else ""
        return f"the search found {len(self.candidates)} candidate(s){ties}"


def cost_model(options: DriverOptions, toolchain: Toolchain) -> CostModel:
    """The search's cost model: the toolchain's measured one for ``cost="measured"``, else the
    analytic one."""
    return toolchain.cost_model() if options.cost == "measured" else AnalyticCost()


def search(program: Program, config: SearchConfig, cost: CostModel, mutants: MutantCache,
           confirm: int) -> Found:
    """Run the search and list the candidates worth timing end to end.

    Args:
        program: the model.
        config: the search's budgets.
        cost: the cost model.
        mutants: the run's generator cache.
        confirm: the most candidates to time.

    Returns:
        The search's :class:`Found`.
    """
    start = time.perf_counter()
    try:
        result = run_search(program, config, cost, mutants)
    except KernelBuildError as e:  # the original's own kernels (a candidate's are set aside)
        raise e.in_original() from None
    seconds = time.perf_counter() - start
    best = [Candidate(result.program, result.cost, result.applied)] if result.applied else []
    candidates = (best + result.runners_up)[:confirm]
    return Found(result, seconds, cost.name, tuple(candidates), getattr(cost, "set_aside", 0),
                 getattr(cost, "unbuildable", 0))
