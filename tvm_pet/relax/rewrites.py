"""TVM's own graph rewrites: the baseline that PET is measured against, and runs on top of.

Relax has rewrites that aim at some of the wins PET finds, and TVM's default pipeline runs none
of them. A fair comparison turns them on for both sides, so that a PET win is not just one of
these passes:

====================================  ================================================================
``CanonicalizeBindings``              drop trivial bindings and aliases
``EliminateCommonSubexpr``            compute a repeated expression once
``CombineParallelMatmul``             matmuls sharing their left operand become one wide matmul + split
``ReorderPermuteDimsAfterConcat``     so that transposed weights (``permute_dims``) combine too
``FoldBatchnormToConv2D``             inference batch norm folded into the convolution's weights
``FoldConstant``                      computations on weights done once, at compile time
====================================  ================================================================

Where it goes: on high-level Relax with static shapes, before ``PETPass`` and before legalization.
Precondition of ``CombineParallelMatmul``: it only combines right operands that are function
parameters, and imported models carry their weights as constants. :func:`tvm_rewrites` therefore
turns the constants of each function into parameters, runs the rewrites, and binds the weights
back (``BindParams`` + ``FoldConstant``, which also folds the concatenated weights), so the
result has exactly the parameters it had.

One more rewrite of TVM's changes the data layout rather than the graph: ``ConvertLayout`` puts
every convolution in channels-last form (conv2d NHWC with HWIO kernels, conv3d NDHWC with DHWIO
kernels) and carries that layout through the element-wise ops and pools between them, so that
only the model's inputs and outputs are transposed. PET cannot lift a channels-last convolution,
so :func:`convert_layout` runs *after* PET, when a program is lowered
(:class:`~tvm_pet.relax.frontends.ModuleLowering`): the baseline and every candidate are built,
tuned and costed in the same layout.

``ConvertLayout`` knows no layout for ``nn.pad`` (TVM 0.27 registers none), so a ``Pad -> Conv``
mutant's pad stays in the imported layout between two transposes, and the three fuse into one
copy kernel of their own. Padding the channels-last tensor in place instead (a pattern rewrite
after ``ConvertLayout``, tried on 2026-11-26) measured no better on the CSRNet back end's three
tuning draws (PET / TVM x1.12, x1 and x1.08, against x1.51, x1 and x1.07 with the transposes),
and the shipped NHWC records hold the transposed form's kernels, so the pass stays as TVM has it.
The weights' transposes are folded with numpy (:func:`weights_in_place`): ``FoldConstant`` would
compile a kernel for each, about 0.1 s a weight, paid again for every candidate and region the
search lowers.

One more is TVM's ``FastMathTransform`` (:func:`fast_math`, ``--fast-math``): ``erf``, ``exp``,
``tanh`` and ``softmax`` by TVM's polynomial approximations. TVM 0.27 lowers ``erf`` on a CPU
to a call of libm's scalar ``erff`` per element, which no schedule vectorizes: 128 x 3072 of
them take 5.0 ms on one core here, against 0.09 ms for ``fast_erf``, whose error is within
3.3e-7 of float64's ``erf`` (libm's: 5e-8). ``exp`` is a scalar ``expf`` call too (5x faster
than ``erff``, 5x slower than ``fast_exp``). GELU, SiLU and the sigmoid, which ``torch.export``
imports as operators of their own, are written out first in the operators the pass knows. It
changes numbers, not algebra, so it is off unless asked; asked, it runs like the layout, on
every program as it is lowered, both sides alike.
"""
from __future__ import annotations

import functools
import math
import operator

import numpy as np
import tvm
from tvm import relax

#: The rewrites, in the order they run (the table above): those that need the weights as
#: constants, then those that need them as parameters.
ON_CONSTANTS = ("CanonicalizeBindings", "EliminateCommonSubexpr", "FoldBatchnormToConv2D",
                "FoldConstant")
ON_PARAMETERS = ("CombineParallelMatmul", "ReorderPermuteDimsAfterConcat")
REWRITES = ON_CONSTANTS + ON_PARAMETERS
#: What runs after a rewrite that leaves folded weights and dead bindings behind.
CLEAN_UP = ("FoldConstant", "CanonicalizeBindings", "DeadCodeElimination")
#: What runs after ``ConvertLayout`` and :func:`weights_in_place`: nothing is left to fold (the
#: module is the one :data:`CLEAN_UP` gives, tested), and ``FoldConstant`` costs a quarter of the
#: time of lowering a region to NHWC even when it folds nothing.
LAYOUT_CLEAN_UP = ("CanonicalizeBindings", "DeadCodeElimination")

#: The layouts :func:`convert_layout` can ask ``ConvertLayout`` for, per operator ("NCHW": the
#: layout the frontends import, nothing to convert).
LAYOUTS = {
    "NCHW": {},
    "NHWC": {"relax.nn.conv2d": ["NHWC", "HWIO"], "relax.nn.conv3d": ["NDHWC", "DHWIO"]},
}


@tvm.transform.module_pass(opt_level=0, name="TVMRewrites")
def tvm_rewrites(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Run :data:`REWRITES` on every Relax function of ``mod`` (see the module docstring)."""
    mod = _sequence(ON_CONSTANTS)(mod)
    updated = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    weights = {}
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            updated[gvar], weights[gvar.name_hint] = _constants_as_params(func)
    updated = _sequence(ON_PARAMETERS)(updated)
    for name, bound in weights.items():
        if bound:
            updated = relax.transform.BindParams(name, bound)(updated)
    return _sequence(CLEAN_UP)(updated)


def fast_math(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` after TVM's ``FastMathTransform``: ``erf``, ``exp``, ``tanh`` and ``softmax`` by
    their fast approximations (``topi.fast_erf`` and the like), as TVM defines them.

    TVM's pass knows those four operators only, and ``torch.export`` imports GELU, SiLU and the
    sigmoid as operators of their own, which TVM legalizes to the same scalar ``erf`` and
    ``exp``. So float32 ``nn.gelu``, ``nn.gelu_tanh``, ``nn.silu`` and ``sigmoid`` are first
    written out as TVM's legalization writes them (:data:`_DECOMPOSED`), in the operators the
    pass knows."""
    from tvm.relax.dpl import is_op, wildcard

    def rewriter(call, _matches):
        x = call.args[0]
        if getattr(x.ty, "dtype", None) != "float32":
            return call
        return _DECOMPOSED[call.op.name](x, lambda v: relax.const(v, "float32"))

    # one pass over the module for all four (it runs on every program and region lowered)
    ops = functools.reduce(operator.or_, map(is_op, _DECOMPOSED))
    mod = _rewrite_calls(mod, ops(wildcard()), rewriter)
    return relax.transform.FastMathTransform()(mod)


def _sigmoid(x, c):
    """``1 / (1 + exp(-x))``, as TVM lowers ``sigmoid``."""
    return relax.op.divide(c(1.0), relax.op.add(c(1.0), relax.op.exp(relax.op.negative(x))))


#: Operator -> its float32 decomposition ``f(x, const)``, as TVM's legalization writes it
#: (``relax/transform/legalize_ops/nn.py``, ``topi.sigmoid``).
_DECOMPOSED = {
    "relax.nn.gelu": lambda x, c: relax.op.multiply(x, relax.op.add(c(0.5), relax.op.multiply(
        relax.op.erf(relax.op.multiply(x, c(0.5 ** 0.5))), c(0.5)))),
    "relax.nn.gelu_tanh": lambda x, c: relax.op.multiply(
        relax.op.multiply(c(0.5), x), relax.op.add(c(1.0), relax.op.tanh(relax.op.multiply(
            relax.op.multiply(c(math.sqrt(2.0 / math.pi)), x),
            relax.op.add(c(1.0), relax.op.multiply(relax.op.multiply(c(0.044715), x), x)))))),
    "relax.nn.silu": lambda x, c: relax.op.multiply(x, _sigmoid(x, c)),
    "relax.sigmoid": _sigmoid,
}


def convert_layout(mod: tvm.IRModule, layout: str) -> tvm.IRModule:
    """``mod`` with its convolutions in ``layout`` (a key of :data:`LAYOUTS`) by TVM's
    ``ConvertLayout``, the transposes of its weights folded (:func:`weights_in_place`) and the
    bindings cleaned up; ``mod``
    itself for "NCHW"."""
    if not LAYOUTS[layout]:
        return mod
    return tvm.transform.Sequential([relax.transform.ConvertLayout(LAYOUTS[layout]),
                                     weights_in_place, _sequence(LAYOUT_CLEAN_UP)])(mod)


@tvm.transform.module_pass(opt_level=0, name="WeightsInPlace")
def weights_in_place(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Fold each ``permute_dims`` of a constant (a weight ``ConvertLayout`` transposed) into a
    constant, with numpy."""
    from tvm.relax.dpl import is_const, is_op

    weight = is_const()

    def rewriter(expr, matches):  # the argument may be a variable bound to the constant
        value = matches[weight].value.numpy()
        return relax.const(np.ascontiguousarray(np.transpose(value, _axes(expr))), value.dtype)

    return _rewrite_calls(mod, is_op("relax.permute_dims")(weight), rewriter)


def _rewrite_calls(mod: tvm.IRModule, pattern, rewriter) -> tvm.IRModule:
    """``mod`` with ``rewrite_call(pattern, rewriter, ...)`` run on each Relax function."""
    from tvm.relax.dpl import rewrite_call

    updated = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            updated[gvar] = rewrite_call(pattern, rewriter, func)
    return updated


def _axes(call: relax.Call) -> list[int] | None:
    """The axes of a ``permute_dims`` call (None: reversed, the default)."""
    axes = call.attrs.axes
    return None if axes is None else [int(a) for a in axes]


def _sequence(names: tuple[str, ...]) -> tvm.transform.Pass:
    """The Relax passes of these names, in order."""
    return tvm.transform.Sequential([getattr(relax.transform, name)() for name in names])


def _constants_as_params(func: relax.Function) -> tuple[relax.Function, dict]:
    """Return ``func`` with each tensor constant of rank >= 1 made a new trailing parameter, and
    the parameter -> value map that binds them back."""
    mutator = _ConstantsToParams()
    body = mutator.visit_expr(func.body)
    if not mutator.params:
        return func, {}
    new = relax.Function(list(func.params) + mutator.params, body, func.ret_ty, func.is_pure,
                         func.attrs, func.span)
    return new, dict(zip(mutator.params, mutator.values))


@relax.expr_functor.mutator
class _ConstantsToParams(relax.PyExprMutator):
    """Replace each tensor constant of rank >= 1 by a fresh Var (one per distinct constant)."""

    def __init__(self):
        super().__init__()
        self.params: list = []
        self.values: list[object] = []
        self._seen: dict[int, relax.Var] = {}

    def visit_generic_const_(self, op: tvm.ir.expr.Constant) -> relax.Expr:
        if not isinstance(op.ty, relax.TensorType) or op.ty.ndim < 1:
            return op
        key = op.__chandle__()
        if key not in self._seen:
            var = relax.Var(f"pet_weight{len(self.params)}", op.ty)
            self._seen[key] = var
            self.params.append(var)
            self.values.append(op.value)
        return self._seen[key]
