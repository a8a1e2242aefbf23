"""PETPass: PET as a Relax function pass, and the ``"pet"`` Relax pipeline.

Where it goes: on high-level Relax, before legalization, for example first in a
``tvm.transform.Sequential``. ``tvm.compile(mod, target, relax_pipeline="pet")`` runs it and then
TVM's usual fused pipeline for the target (importing :mod:`tvm_pet.relax` registers ``"pet"``).
Preconditions: static shapes. PET searches the float32 multi-linear regions; an operator it does
not know stays as it was (an opaque boundary of the search), and integer, mask and shape
computations (token ids, attention masks) stay outside the searched program. A function it
cannot read at all is left unchanged and the reason is reported. The report gives, per function,
its coverage (:mod:`tvm_pet.relax.coverage`).

Every rewrite it applies comes from verified (and, where needed, corrected) mutants. As a last
guard, the optimized program is also evaluated in NumPy against the original on random inputs;
on any mismatch the function is left unchanged and the report says so.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import tvm
from tvm import relax

from tvm_pet.cost.model import CostModel
from tvm_pet.errors import PetError
from tvm_pet.relax.coverage import Coverage, coverage
from tvm_pet.search.config import SearchConfig
from tvm_pet.search.dispatch import run_search
from tvm_pet.search.optimizer import SearchResult
from tvm_pet.verify.limits import check_tensor_sizes


def _cost_model(cost, target) -> CostModel:
    if cost is None or cost == "analytic":
        from tvm_pet.cost.analytic import AnalyticCost
        return AnalyticCost()
    if cost == "measured":
        from tvm_pet.tune.measured_cost import MeasuredCost
        return MeasuredCost(target if target is not None else "llvm")
    if isinstance(cost, CostModel):
        return cost
    raise PetError(f"cost must be 'analytic', 'measured' or a CostModel, got {cost!r}")


def outputs_agree(original, optimized, seed: int = 0) -> float | None:
    """Largest relative difference of two programs on random inputs (float64), or None when the
    original cannot be evaluated in NumPy (an operator without a float rule: no check possible)."""
    from tvm_pet.verify.interpreter import evaluate
    rng = np.random.default_rng(seed)
    x = {t.name: rng.standard_normal(t.shape) for t in original.inputs}
    try:
        a = evaluate(original, x, np.float64)
    except PetError:
        return None
    b = evaluate(optimized, x, np.float64)
    worst = 0.0
    for name in original.outputs:
        scale = 1.0 + float(np.abs(a[name]).max(initial=0.0))
        worst = max(worst, float(np.abs(a[name] - b[name]).max(initial=0.0)) / scale)
    return worst


@relax.transform.function_pass(opt_level=0, name="PETPass")
class PETPass:
    """Run PET's search on every Relax function and substitute the cheapest exact program.

    Args:
        target: the target the costs are for (used by the measured cost model).
        config: search budgets (:class:`~tvm_pet.search.config.SearchConfig`).
        cost: ``"analytic"`` (default), ``"measured"`` (kernels built by TVM, tuned records
            used where present), or any :class:`~tvm_pet.cost.model.CostModel`.
        enable: ``False`` makes the pass an identity (the pipeline's switch).
        search: ``"algorithm2"`` or ``"eqsat"`` (equality saturation,
            :mod:`tvm_pet.search.eqsat`): the search to run, in place of ``config.search``.

    After it runs, ``.report`` maps each function name to its search result as JSON (with
    ``changed``, ``coverage`` and, when unchanged, ``reason``); ``.results`` holds the search
    results and ``.coverage`` the :class:`~tvm_pet.relax.coverage.Coverage` of each function.

    Data types and other input it does not rewrite (it never raises on these):

    - PET rewrites float32 computation only. Parameters that are not float32 tensors (token
      ids, masks) and every binding that reads no float32 value the program computes (integer,
      mask and shape computations, embedding lookups) stay outside the searched program, kept
      as they are; the float32 values they produce are inputs of the search. An operator that
      reads a program tensor and is not multi-linear float32 (a cast, an int32 add, a
      comparison, an unknown operator) stays as it is, an opaque boundary of the search.
    - A function with a symbolic or zero-size float32 dimension is left unchanged.
    - A function with a tensor above :data:`~tvm_pet.verify.limits.MAX_TENSOR_ELEMENTS`
      (2**27) elements is left unchanged, so that the search and the verifier stay bounded.

    In each case ``.report[name]["reason"]`` says why.
    """

    def __init__(self, target=None, config: SearchConfig | None = None, cost=None,
                 enable: bool = True, search: str | None = None):
        self.target = target
        self.config = config or SearchConfig()
        if search is not None:
            self.config = dataclasses.replace(self.config, search=search)
        self.cost = cost
        self.enable = enable
        self.report: dict[str, dict] = {}
        self.results: dict[str, SearchResult] = {}
        self.coverage: dict[str, Coverage] = {}

    def transform_function(self, func, mod, ctx):
        if not self.enable or not isinstance(func, relax.Function):
            return func
        from tvm_pet.relax.adapter import from_relax, to_relax
        name = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs \
            else f"function{len(self.report)}"
        try:
            lifted = from_relax(func, mod)
            check_tensor_sizes(lifted.program)
        except PetError as e:
            self._unsearched(func, name, f"not searched: {e}")
            return func
        cost = _cost_model(self.cost, self.target)  # a bad ``cost`` argument raises
        try:
            result = run_search(lifted.program, self.config, cost)
        except PetError as e:  # an expected rejection (e.g. a kernel the cost model cannot build)
            self._unsearched(func, name, f"search stopped: {e}", lifted)
            return func
        self.results[name] = result
        cov = coverage(func, name, lifted, frozenset(s.subprogram for s in result.subsets))
        self.coverage[name] = cov
        entry = {"changed": False, "coverage": cov.to_json(), **result.to_json()}
        self.report[name] = entry
        if result.cost >= result.original_cost or result.program is lifted.program:
            entry["reason"] = "no cheaper exact program found"
            return func
        diff = outputs_agree(lifted.program, result.program, seed=self.config.seed)
        entry["numeric_check_max_rel_diff"] = diff
        if diff is not None and diff > 1e-6:
            entry["reason"] = f"numeric self-check failed (relative difference {diff:.2e})"
            return func
        try:
            new = to_relax(result.program, lifted)
        except PetError as e:
            entry["reason"] = f"cannot emit the optimized program: {e}"
            return func
        entry["changed"] = True
        return new

    def _unsearched(self, func, name: str, reason: str, lifted=None) -> None:
        cov = coverage(func, name, lifted, None)
        self.coverage[name] = cov
        self.report[name] = {"changed": False, "reason": reason, "coverage": cov.to_json()}

    def summary(self) -> list[str]:
        """One coverage line per function (see :meth:`Coverage.summary_line`), with whether
        the function changed."""
        return [f"{cov.summary_line()}; "
                f"{'changed' if self.report[name]['changed'] else 'unchanged'}"
                for name, cov in self.coverage.items()]


def register_pipeline() -> None:
    """Register the ``"pet"`` Relax pipeline (once; later calls do nothing). Importing
    :mod:`tvm_pet.relax` calls it, so this is only needed after the name was removed.

    ``tvm.compile(mod, target, relax_pipeline="pet")`` runs :class:`PETPass` and then
    ``relax.get_default_pipeline(target)``, TVM's fused pipeline for the target.
    ``relax.get_pipeline("pet", enable_pet=False)`` gives the plain pipeline.
    """
    if "pet" in relax.pipeline.PIPELINE_MAP:
        return

    @relax.register_pipeline("pet")
    def _pet_pipeline(enable_pet: bool = True, config: SearchConfig | None = None, cost=None):
        @tvm.transform.module_pass(opt_level=0, name="PetPipeline")
        def _pipeline(mod, ctx):
            target = tvm.target.Target.current()
            passes = [PETPass(target=target, config=config, cost=cost)] if enable_pet else []
            return tvm.transform.Sequential(passes + [relax.get_default_pipeline(target)])(mod)
        return _pipeline
