"""PETPass: PET as a Relax function pass, and the ``"pet"`` Relax pipeline.

Where it goes: on high-level Relax, before legalization, for example first in a
``tvm.transform.Sequential``. ``tvm.compile(mod, target, relax_pipeline="pet")`` runs it and then
TVM's usual fused pipeline for the target. Preconditions: static shapes, float32 data. A function
it cannot read is left unchanged and the reason is reported; an operator it does not know stays
as it was (an opaque boundary of the search).

Every rewrite it applies comes from verified (and, where needed, corrected) mutants. As a last
guard, the optimized program is also evaluated in NumPy against the original on random inputs;
on any mismatch the function is left unchanged and the report says so.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from tvm_pet.cost.model import CostModel
from tvm_pet.errors import PetError
from tvm_pet.search.config import SearchConfig
from tvm_pet.search.optimizer import SearchResult, optimize
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

    After it runs, ``.report`` maps each function name to its search result as JSON (with
    ``changed`` and, when unchanged, ``reason``); ``.results`` holds the search results.

    Data types and other input it does not rewrite (it never raises on these):

    - PET rewrites float32 computation only. A function with a parameter that is not a float32
      tensor (float16, bfloat16, int32, ..., or not a tensor) is left unchanged whole. Inside a
      float32 function, an operator that reads or produces another dtype (a cast to float16, an
      int32 add) stays as it is, an opaque boundary of the search, like an unknown operator.
    - A function with a symbolic or zero-size dimension is left unchanged.
    - A function with a tensor above :data:`~tvm_pet.verify.limits.MAX_TENSOR_ELEMENTS`
      (2**27) elements is left unchanged, so that the search and the verifier stay bounded.

    In each case ``.report[name]["reason"]`` says why.
    """

    def __init__(self, target=None, config: SearchConfig | None = None, cost=None,
                 enable: bool = True):
        self.target = target
        self.config = config or SearchConfig()
        self.cost = cost
        self.enable = enable
        self.report: dict[str, dict] = {}
        self.results: dict[str, SearchResult] = {}

    def transform_function(self, func, mod, ctx):
        if not self.enable or not isinstance(func, relax.Function):
            return func
        from tvm_pet.relax.adapter import from_relax, to_relax
        name = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs \
            else f"function{len(self.report)}"
        try:
            lifted = from_relax(func)
            check_tensor_sizes(lifted.program)
        except PetError as e:
            self.report[name] = {"changed": False, "reason": f"not searched: {e}"}
            return func
        cost = _cost_model(self.cost, self.target)  # a bad ``cost`` argument raises
        try:
            result = optimize(lifted.program, self.config, cost)
        except PetError as e:  # an expected rejection (e.g. a kernel the cost model cannot build)
            self.report[name] = {"changed": False, "reason": f"search stopped: {e}"}
            return func
        self.results[name] = result
        entry = {"changed": False, **result.to_json()}
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


def register_pipeline() -> None:
    """Register the ``"pet"`` Relax pipeline (once; later calls do nothing).

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
