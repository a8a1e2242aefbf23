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
after ``ConvertLayout``) measured no better on the CSRNet back end's three
tuning draws (PET / TVM x1.12, x1 and x1.08, against x1.51, x1 and x1.07 with the transposes),
and the shipped NHWC records hold the transposed form's kernels, so the pass stays as TVM has it.
The weights' transposes are folded with numpy (:func:`weights_in_place`): ``FoldConstant`` would
compile a kernel for each, about 0.1 s a weight, paid again for every candidate and region the
search lowers.

One more is TVM's ``FastMathTransform`` (:func:`fast_math`, ``--fast-math``): ``erf``, ``exp``,
``tanh`` and ``softmax`` by TVM's polynomial approximations. TVM 0.27 lowers ``erf`` on a CPU
to a call of libm's scalar ``erff`` per element, which no schedule vectorizes: 128 x 3072 of
them take 5.0 ms on one core of an AVX-512 CPU, against 0.09 ms for ``fast_erf``, whose error
is within 3.3e-7 of float64's ``erf`` (libm's: 5e-8). ``exp`` is a scalar ``expf`` call too
(5x faster than ``erff``, 5x slower than ``fast_exp``). GELU, SiLU and the sigmoid, which ``torch.export``
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

from tvm_pet.relax.relax_types import known_shape

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
    """The Relax passes of these names, in order; ``FoldConstant`` runs after
    :func:`fold_with_numpy`, which leaves it only what numpy does not fold exactly."""
    passes = []
    for name in names:
        if name == "FoldConstant":
            passes.append(fold_with_numpy)
        passes.append(getattr(relax.transform, name)())
    return tvm.transform.Sequential(passes)


#: Arithmetic on constants that numpy computes exactly as TVM's kernels do: each one IEEE
#: operation per element, correctly rounded, or integers' wrapping arithmetic.
_FLOAT_ARITHMETIC = {"relax.add": np.add, "relax.subtract": np.subtract,
                     "relax.multiply": np.multiply, "relax.divide": np.divide,
                     "relax.sqrt": np.sqrt}
#: ``mod`` is TVM's ``truncmod`` (``topi.mod``), numpy's ``fmod``; ``floor_mod`` numpy's ``mod``.
_INT_ARITHMETIC = {"relax.add": np.add, "relax.subtract": np.subtract,
                   "relax.multiply": np.multiply, "relax.mod": np.fmod,
                   "relax.floor_mod": np.mod}
_FLOATS = ("float32", "float64")
_INTS = ("int32", "int64")
#: Operators that move a constant's elements without computing: their result is the argument
#: in the output's shape (reshaped, transposed or broadcast).
_NUMPY_MOVES = ("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.permute_dims",
                "relax.broadcast_to")
_MOVABLE = _FLOATS + _INTS + ("float16", "int8", "uint8", "bool")


@tvm.transform.module_pass(opt_level=0, name="FoldWithNumpy")
def fold_with_numpy(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Fold the calls on constants that ``FoldConstant`` would fold, where numpy gives the same
    values bit for bit (:func:`_fold`).

    ``FoldConstant`` compiles a kernel for each call it folds: the batch norms that
    ``FoldBatchnormToConv2D`` folds into Inception-v3's 94 convolutions leave 753 such calls,
    37 s of LLVM at every load (2.3 s with this first). What this does not fold is left to
    ``FoldConstant``, which runs after it. Tested: the module is the one ``FoldConstant`` alone
    gives, constants included, on the real models."""
    updated = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            updated[gvar] = _NumpyFolder().visit_expr(func)
    return updated


@relax.expr_functor.mutator
class _NumpyFolder(relax.PyExprMutator):
    """Replace each call that :func:`_fold` folds by its value."""

    def visit_call_(self, op: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(op)
        if not isinstance(op.op, tvm.ir.Op):
            return call
        value = _fold(op, [self._constant(arg) for arg in call.args])
        return call if value is None else relax.const(value, str(value.dtype))

    def _constant(self, expr: relax.Expr) -> tuple[np.ndarray, str] | None:
        """``expr``'s value and dtype where it is a tensor constant (bound to a variable or not)
        or a scalar ``IntImm`` or ``FloatImm`` (TVM 0.27 imports a batch norm's epsilon as
        one); else None."""
        if isinstance(expr, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
            dtype = str(expr.ty.dtype)
            return np.array(expr.value, dtype=dtype), dtype
        if isinstance(expr, relax.Var):
            expr = self.lookup_binding(expr)
        if isinstance(expr, tvm.ir.expr.Constant) and isinstance(expr.ty, relax.TensorType):
            return expr.value.numpy(), str(expr.ty.dtype)
        return None


def _fold(call: relax.Call, args: list) -> np.ndarray | None:
    """The value of ``call`` by numpy, given its ``args`` (each a value and its dtype, or None:
    not a constant), or None where numpy would not give TVM's values exactly: arithmetic
    (:data:`_FLOAT_ARITHMETIC`, :data:`_INT_ARITHMETIC`), the element moves of
    :data:`_NUMPY_MOVES` and ``take`` at indices in range. (``FoldConstant`` leaves ``arange``
    and ``full`` as they are, their arguments not being tensors; so does this.)"""
    name, out = call.op.name, call.ty
    shape = known_shape(out) if isinstance(out, relax.TensorType) else None
    if shape is None:  # unknown, or a symbolic dimension
        return None
    dtype = str(out.dtype)
    if name in _NUMPY_MOVES or name == "relax.take":  # a shape, axes or indices beside it
        if not args or args[0] is None or args[0][1] != dtype or dtype not in _MOVABLE:
            return None
        value = _take(call, args) if name == "relax.take" else _move(call, args[0][0], shape)
    elif None in args or any(a[1] != dtype for a in args):  # not constants, or a cast
        return None
    elif name in _FLOAT_ARITHMETIC and dtype in _FLOATS:
        value = _FLOAT_ARITHMETIC[name](*(a[0] for a in args))
    elif name in _INT_ARITHMETIC and dtype in _INTS:
        values = [a[0] for a in args]
        if name.endswith("mod") and np.any(values[1] == 0):
            return None
        with np.errstate(over="ignore"):
            value = _INT_ARITHMETIC[name](*values)
    else:
        return None
    if value is None or value.shape != shape or str(value.dtype) != dtype:
        return None
    return np.ascontiguousarray(value)


def _move(call: relax.Call, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A call of :data:`_NUMPY_MOVES` on ``value``, whose output has ``shape``."""
    if call.op.name == "relax.permute_dims":
        return np.transpose(value, _axes(call))
    if call.op.name == "relax.broadcast_to":
        return np.broadcast_to(value, shape)
    return value.reshape(shape)  # the elements in their order, in the output's shape


def _take(call: relax.Call, args: list) -> np.ndarray | None:
    """``take`` of a constant at constant indices along an axis, where every index is in range
    (so that its modes agree), by ``np.take``."""
    if len(args) != 2 or args[1] is None or call.attrs.axis is None:
        return None
    (data, _), (indices, _) = args
    axis = int(call.attrs.axis)
    if indices.dtype.kind not in "iu" or indices.size and not (
            0 <= indices.min() and indices.max() < data.shape[axis]):
        return None
    return np.take(data, indices, axis=axis)


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
