"""Equality saturation (``SearchConfig(search="eqsat")``): the program and every verified mutant
of its subprograms in one egglog e-graph, the post-optimizations as rewrite rules, and
extraction by the project's cost model. :func:`eqsat` is the entry; see
:mod:`tvm_pet.search.eqsat.search` for the design."""
from tvm_pet.search.eqsat.search import EGraphReport, checked, eqsat

__all__ = ["EGraphReport", "checked", "eqsat"]
