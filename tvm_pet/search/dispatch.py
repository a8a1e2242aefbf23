"""The one place that picks the search ``SearchConfig.search`` names: Algorithm 2
(:func:`tvm_pet.search.optimizer.optimize`) or equality saturation
(:func:`tvm_pet.search.eqsat.eqsat`). Both take the same inputs and return a
:class:`~tvm_pet.search.optimizer.SearchResult`, so the pipeline, the Relax pass and the
reports do not tell them apart.

>>> from tvm_pet.ir import ProgramBuilder
>>> b = ProgramBuilder(); x = b.input("x", (2, 3))
>>> run_search(b.build([b.add(x, x)])).search
'algorithm2'
"""
from __future__ import annotations

from tvm_pet.cost.model import CostModel
from tvm_pet.ir.node import Program
from tvm_pet.search.config import SearchConfig
from tvm_pet.search.mutant_cache import MutantCache
from tvm_pet.search.optimizer import SearchResult, optimize


def run_search(program: Program, config: SearchConfig = SearchConfig(),
               cost: CostModel | None = None, mutants: MutantCache | None = None
               ) -> SearchResult:
    """Run the search ``config.search`` names on ``program``.

    Args:
        program: the program.
        config: the budgets, and ``search``: ``"algorithm2"`` or ``"eqsat"``.
        cost: the cost model (default: the analytic one).
        mutants: the run's generator cache.

    Returns:
        The search's :class:`~tvm_pet.search.optimizer.SearchResult`.
    """
    if config.search == "eqsat":
        from tvm_pet.search.eqsat import eqsat  # egglog is imported only for this search
        return eqsat(program, config, cost, mutants)
    return optimize(program, config, cost, mutants)
