"""The Relax edge of tvm_pet: lift a Relax function into a :class:`Program`, lower one back.

Where it sits: between TVM and the engine. The Relax pass lifts each ``main`` with
:func:`from_relax`, optimizes ``lifted.program`` and emits the result with :func:`to_relax`; the
measurement helper compiles standalone programs with :func:`program_to_module`. This is the only
module that spells Relax operator names.

Lifting (one rule per Relax op name in :data:`LIFT_RULES`):

- parameters (static float32 tensors) become program inputs, ``relax.const`` data becomes
  weights (constants only reshaped or transposed are folded into new weights);
- add, multiply, subtract, divide or negate by a constant, conv1d/2d/3d (NC* layouts), matmul,
  permute_dims, reshape-like ops, concat, split, strided_slice, zero nn.pad, avg_pool1d/2d/3d,
  spatial mean, and inference batch_norm (a BATCHNORM with folded scale and shift) become tvm_pet
  ops;
- any other call becomes an OPAQUE node whose original expression is kept in
  :class:`Lifted` and re-emitted unchanged. Its ``kind`` is the ONNX name where tvm_pet can
  evaluate it (:data:`EVALUABLE_OPAQUE`: Relu, Softmax, MaxPool, LayerNormalization, ...), so
  that lifted programs run in :func:`~tvm_pet.verify.interpreter.evaluate`; else the Relax name.

Lowering is :data:`LOWER_RULES`, one rule per :class:`Op`; OPAQUE nodes from tvm_pet's ONNX
importer lower through :data:`OPAQUE_LOWERING` by kind.

>>> import numpy as np
>>> from tvm_pet.ir import ProgramBuilder
>>> b = ProgramBuilder(); x = b.input("x", (1, 4)); y = b.mul(x, b.weight("w", np.ones((1, 4))))
>>> lifted = from_relax(to_relax(b.build([y])))
>>> [n.op.value for n in lifted.program.nodes]
['Mul']
"""
from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Union

import numpy as np
import tvm
from tvm import relax
from tvm.relax.op import nn as rnn

from tvm_pet.errors import PetError, ProgramError, ShapeError, UnsupportedOperator
from tvm_pet.ir.builder import ProgramBuilder
from tvm_pet.ir.node import Node, Program, Shape
from tvm_pet.ir.ops import Op

F32 = "float32"
#: A nested structure of tensor names, like the Relax tuple it stands for.
Tree = Union[str, tuple["Tree", ...]]


# ------------------------------------------------------------------------------- the lifted form
@dataclasses.dataclass(frozen=True, eq=False)
class OpaqueBinding:
    """A Relax expression kept verbatim for an OPAQUE node.

    Attributes:
        expr: the binding's value; its tensor operands are the ``leaves``.
        leaves: each Var or Constant operand with the tree of program tensors it stood for; the
            node's inputs are these trees flattened, in order.
        outputs: the tree of the node's output names (a tuple for a tuple-valued call).
        kind: the node's kind.
    """

    expr: relax.Expr
    leaves: tuple[tuple[relax.Expr, Tree], ...]
    outputs: Tree
    kind: str

    def fits(self, node: Node) -> bool:
        """True when ``node`` still has this binding's kind, input count and outputs."""
        return (node.attrs["kind"] == self.kind and node.outputs == tuple(_flatten(self.outputs))
                and len(node.inputs) == sum(len(_flatten(t)) for _, t in self.leaves))

    def rebuild(self, args: Sequence[relax.Expr]) -> relax.Expr:
        """The kept expression with its leaves replaced by ``args`` (the node's inputs)."""
        items = iter(args)
        mapping = {leaf.__chandle__(): _unflatten(tree, items, relax.Tuple)
                   for leaf, tree in self.leaves}
        return _substitute(self.expr, mapping)


@dataclasses.dataclass(frozen=True, eq=False)
class Lifted:
    """A program lifted from a Relax function, with what :func:`to_relax` needs to rebuild it.

    Attributes:
        program: the tvm_pet program.
        params: the function's parameter Vars, in signature order.
        input_names: the program input each parameter became (same order).
        opaque: the kept expression of every OPAQUE node, by each of its output names.
        constants: the original Relax constant of each weight that came from one.
        outputs: the structure of the function's result, as a tree of program output names.
        attrs: the function's attributes (``num_input``, ``global_symbol``, ...).
        name: the function's global symbol (``"main"`` by default).
    """

    program: Program
    params: tuple[relax.Var, ...]
    input_names: tuple[str, ...]
    opaque: Mapping[str, OpaqueBinding]
    constants: Mapping[str, tuple[np.ndarray, relax.Expr]]
    outputs: Tree
    attrs: Mapping[str, Any]
    name: str = "main"


def _flatten(tree: Tree) -> list[str]:
    return [tree] if isinstance(tree, str) else [n for t in tree for n in _flatten(t)]


def _unflatten(tree: Tree, items: Iterator, make_tuple: Callable) -> Any:
    if isinstance(tree, str):
        return next(items)
    return make_tuple([_unflatten(t, items, make_tuple) for t in tree])


def _substitute(expr: relax.Expr, mapping: Mapping[int, relax.Expr]) -> relax.Expr:
    """``expr`` with every Var or Constant whose handle is in ``mapping`` replaced."""
    if isinstance(expr, (relax.Var, tvm.ir.expr.Constant)):
        return mapping.get(expr.__chandle__(), expr)
    if isinstance(expr, relax.Tuple):
        return relax.Tuple([_substitute(f, mapping) for f in expr.fields])
    if isinstance(expr, relax.TupleGetItem):
        return relax.TupleGetItem(_substitute(expr.tuple_value, mapping), expr.index)
    if isinstance(expr, relax.Call):
        return relax.Call(expr.op, [_substitute(a, mapping) for a in expr.args], expr.attrs,
                          expr.ty_args)
    return expr


# ---------------------------------------------------------------------------- reading Relax types
def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _static(ty, what: str) -> Shape:
    """The static shape of a tensor type; ShapeError for symbolic or unknown shapes."""
    if ty.shape is None:
        raise ShapeError(f"{what} has no known shape ({ty}); tvm_pet needs static shapes")
    try:
        shape = tuple(int(d) for d in ty.shape)
    except TypeError:
        raise ShapeError(f"{what} has the symbolic shape {ty.shape}; tvm_pet needs static shapes "
                         f"(bind the symbolic dims first, e.g. relax.transform.BindSymbolicVars)"
                         ) from None
    if any(d < 1 for d in shape):
        raise ShapeError(f"{what} has the zero-size shape {list(shape)}")
    return shape


def _type_tree(ty, what: str):
    """A tensor type, or a (nested) tuple of them; UnsupportedOperator for anything else."""
    if isinstance(ty, relax.TensorType):
        return ty
    if isinstance(ty, relax.TupleType) and len(ty.fields):
        return tuple(_type_tree(f, what) for f in ty.fields)
    raise UnsupportedOperator(f"{what} has type {ty}; tvm_pet lifts tensors and tuples of tensors")


def _template(tree) -> Tree:
    """A tree of placeholder names shaped like a tree of tensor types."""
    return "t" if isinstance(tree, relax.TensorType) else tuple(_template(f) for f in tree)


def _leaf_types(tree) -> list:
    if isinstance(tree, relax.TensorType):
        return [tree]
    return [t for f in tree for t in _leaf_types(f)]


def _is_f32(expr: relax.Expr) -> bool:
    """True when every tensor in ``expr``'s type is float32 (non-tensor operands pass)."""
    ty = expr.ty
    if isinstance(ty, relax.TensorType):
        return str(ty.dtype) == F32
    if isinstance(ty, relax.TupleType):
        return all(str(f.dtype) == F32 for f in ty.fields if isinstance(f, relax.TensorType))
    return True


def _const_ints(expr: relax.Expr) -> tuple[int, ...] | None:
    """The integers of a constant Tuple or ShapeExpr operand, or None."""
    fields = expr.fields if isinstance(expr, relax.Tuple) else (
        expr.values if isinstance(expr, relax.ShapeExpr) else None)
    if fields is None:
        return None
    try:
        return tuple(int(getattr(f, "value", f)) for f in fields)
    except TypeError:
        return None


def _call_kind(call: relax.Call) -> str:
    op = call.op
    if isinstance(op, tvm.ir.Op):
        return op.name
    if isinstance(op, tvm.ir.GlobalVar):
        return f"call {op.name_hint}"
    return f"call {type(op).__name__}"


def _no_dtype(out_dtype) -> bool:
    return out_dtype is None or str(out_dtype) in ("", F32, "void")


def _pads(padding, nsp: int) -> tuple[int, ...] | None:
    """Relax's padding (begins then ends, or one per axis) as begins + ends."""
    p = _ints(padding)
    return p * 2 if len(p) == nsp else (p if len(p) == 2 * nsp else None)


# --------------------------------------------------------------------------------------- lifting
@dataclasses.dataclass(eq=False)
class _Const:
    """A constant value met while lifting; it becomes a weight on first use as a tensor."""

    array: np.ndarray
    origin: relax.Expr | None = None
    name: str | None = None


Value = Union[str, _Const, tuple]


class _Lifter:
    """The state of one lift: the builder, the value of every Relax Var, the kept expressions."""

    def __init__(self, func: relax.Function):
        self.func = func
        attrs = dict(func.attrs) if func.attrs is not None else {}
        self.name = str(attrs.get("global_symbol", "main"))
        self.attrs = attrs
        self.b = ProgramBuilder(self.name)
        self.env: dict[relax.Var, Value] = {}
        self.used: set[str] = set()
        self.consts: dict[int, _Const] = {}
        self.scalars: dict[float, _Const] = {}
        self.opaque: dict[str, OpaqueBinding] = {}
        self.origins: dict[str, tuple[np.ndarray, relax.Expr]] = {}

    # -------------------------------------------------------------------------- names and values
    def fresh(self, hint: str) -> str:
        hint = hint or "t"
        name, k = hint, 0
        while name in self.used:
            k += 1
            name = f"{hint}_{k}"
        self.used.add(name)
        return name

    def constant(self, array: np.ndarray, origin: relax.Expr | None = None) -> _Const:
        """A read-only copy of ``array`` (its dtype kept: folds produce float32 themselves)."""
        array = np.array(array, copy=True)
        array.setflags(write=False)
        return _Const(array, origin)

    def scalar(self, value: float) -> _Const:
        if value not in self.scalars:
            self.scalars[value] = self.constant(np.array(value, np.float32))
        return self.scalars[value]

    def value_of(self, expr: relax.Expr) -> Value:
        """The lifted value of an operand: a tensor name, a pending constant, or a tuple."""
        if isinstance(expr, relax.Var):
            if expr not in self.env:
                raise ProgramError(f"variable {expr.name!r} is used before it is bound")
            return self.env[expr]
        if isinstance(expr, tvm.ir.expr.Constant):
            key = expr.__chandle__()
            if key not in self.consts:
                self.consts[key] = self.constant(expr.value.numpy(), expr)
            return self.consts[key]
        if isinstance(expr, relax.Tuple):
            return tuple(self.value_of(f) for f in expr.fields)
        if isinstance(expr, relax.TupleGetItem):
            whole = self.value_of(expr.tuple_value)
            if not isinstance(whole, tuple):
                raise ProgramError(f"tuple index into a non-tuple value ({expr})")
            return whole[int(expr.index)]
        raise UnsupportedOperator(f"operand {type(expr).__name__} ({expr}) is not a tensor")

    def name_of(self, value: Value) -> str:
        """The program tensor of a single-tensor value (a constant becomes a weight)."""
        if isinstance(value, str):
            return value
        if isinstance(value, _Const):
            if value.array.dtype != np.float32:
                raise UnsupportedOperator(f"a {value.array.dtype} constant is used as tensor data; "
                                          f"tvm_pet programs compute on float32 tensors only")
            if value.name is None:
                value.name = self.b.weight(self.fresh("const"), value.array)
                if value.origin is not None:
                    self.origins[value.name] = (self.b.weights[value.name], value.origin)
            return value.name
        raise UnsupportedOperator("a tuple is used where a tensor is expected")

    def tree_of(self, value: Value) -> Tree:
        return tuple(self.tree_of(v) for v in value) if isinstance(value, tuple) else \
            self.name_of(value)

    def shape(self, value: Value) -> Shape:
        return tuple(value.array.shape) if isinstance(value, _Const) else self.b.shapes[value]

    def arg(self, call: relax.Call, i: int) -> Value:
        return self.value_of(call.args[i])

    def emit(self, op: Op, inputs: Sequence[Value], attrs: dict, hint: str) -> str:
        """Add one single-output node named after ``hint``; returns its output."""
        names = [self.name_of(v) for v in inputs]
        return self.b.node(op, names, attrs, [self.fresh(hint)])[0]

    # ------------------------------------------------------------------------------ the driver
    def run(self) -> Lifted:
        for p in self.func.params:
            ty = p.ty
            what = f"parameter {p.name!r}"
            if not isinstance(ty, relax.TensorType):
                raise UnsupportedOperator(f"{what} has type {ty}; tvm_pet lifts functions of "
                                          f"tensor parameters only")
            if str(ty.dtype) != F32:
                raise UnsupportedOperator(f"{what} is {ty.dtype}; tvm_pet lifts float32 tensors "
                                          f"only")
            self.env[p] = self.b.input(self.fresh(p.name), _static(ty, what))
        body = self.func.body
        blocks, result = (body.blocks, body.body) if isinstance(body, relax.SeqExpr) else ((), body)
        for block in blocks:
            for binding in block.bindings:
                self.bind(binding)
        if isinstance(result, relax.Call):
            raise UnsupportedOperator("the function returns a call, not a variable: normalize it "
                                      "first (relax.transform.Normalize())")
        outputs = self.tree_of(self.value_of(result))
        program = self.b.build(_flatten(outputs))
        params = tuple(self.func.params)
        return Lifted(program, params, tuple(self.env[p] for p in params),
                      types.MappingProxyType(self.opaque), types.MappingProxyType(self.origins),
                      outputs, types.MappingProxyType(self.attrs), self.name)

    def bind(self, binding) -> None:
        var, value = binding.var, binding.value
        label = f"`{var.name} = {_call_kind(value) if isinstance(value, relax.Call) else value}`"
        try:
            if (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
                    and value.op.get_attr("FPurity") is False):
                raise UnsupportedOperator(f"{value.op.name} has side effects; tvm_pet emits one "
                                          f"dataflow block, so it lifts pure calls only")
            tree = _type_tree(var.ty, f"binding {var.name!r}")
            for ty in _leaf_types(tree):
                _static(ty, f"binding {var.name!r}")
            if isinstance(binding, relax.MatchCast) or not isinstance(value, relax.Call):
                self.env[var] = self._alias(var, value)
                return
            result = self._recognised(var, value)
            self.env[var] = result if result is not None else self._opaque(var, value, tree)
        except PetError as e:
            raise type(e)(f"while lifting {label}: {e}") from None

    def _alias(self, var: relax.Var, value: relax.Expr) -> Value:
        if not isinstance(value, (relax.Var, tvm.ir.expr.Constant, relax.Tuple,
                                  relax.TupleGetItem)):
            raise UnsupportedOperator(f"binding {var.name!r} is a {type(value).__name__}; tvm_pet "
                                      f"lifts calls, tuples, constants and variables")
        result = self.value_of(value)
        self._check(var, result)
        return result

    def _recognised(self, var: relax.Var, call: relax.Call) -> Value | None:
        """The lifted value of a call that a rule maps, or None (then it stays opaque)."""
        rule = LIFT_RULES.get(call.op.name) if isinstance(call.op, tvm.ir.Op) else None
        if rule is None or not _is_f32(var) or not all(_is_f32(a) for a in call.args):
            return None
        result = rule(self, call, var)
        if result is not None:
            self._check(var, result)
        return result

    def _check(self, var: relax.Var, value: Value) -> None:
        """The lifted shapes must be Relax's: a mismatch is a bug in a rule, never ignored."""
        want = [_static(t, var.name) for t in _leaf_types(_type_tree(var.ty, var.name))]
        leaves = [value] if not isinstance(value, tuple) else list(_flat_values(value))
        have = [self.shape(v) for v in leaves]
        if have != want:
            raise ShapeError(f"tvm_pet computed shapes {[list(s) for s in have]} for "
                             f"{var.name!r}, Relax says {[list(s) for s in want]}")

    def _opaque(self, var: relax.Var, call: relax.Call, tree) -> Tree:
        leaves: list[tuple[relax.Expr, Tree]] = []
        expr = self._collect(call, leaves, set())
        inputs = [n for _, t in leaves for n in _flatten(t)]
        if not inputs:
            raise UnsupportedOperator(f"{_call_kind(call)} reads no float32 tensor; tvm_pet keeps "
                                      f"opaque operators that read at least one")
        kind, params = _evaluable_kind(call, [self.b.shapes[i] for i in inputs])
        types_ = _leaf_types(tree)
        names = [self.fresh(var.name if len(types_) == 1 else f"{var.name}_{k}")
                 for k in range(len(types_))]
        outputs = _unflatten(_template(tree), iter(names), tuple)
        shapes = tuple(_static(t, var.name) for t in types_)
        self.b.node(Op.OPAQUE, inputs, {"kind": kind, "shapes": shapes, "params": params}, names)
        binding = OpaqueBinding(expr, tuple(leaves), outputs, kind)
        for n in names:
            self.opaque[n] = binding
        return outputs

    def _collect(self, expr: relax.Expr, leaves: list, seen: set) -> relax.Expr:
        """Record the tensor operands of ``expr`` as leaves; returns ``expr`` with Vars bound to
        non-float constants replaced by those constants."""
        if isinstance(expr, relax.Var) or (isinstance(expr, tvm.ir.expr.Constant)
                                           and _is_f32(expr)):
            value = self.value_of(expr)
            if isinstance(value, _Const) and value.array.dtype != np.float32:
                if value.origin is None:
                    raise UnsupportedOperator(f"{expr} is a computed {value.array.dtype} constant")
                return value.origin
            if expr.__chandle__() not in seen:
                seen.add(expr.__chandle__())
                leaves.append((expr, self.tree_of(value)))
            return expr
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self._collect(f, leaves, seen) for f in expr.fields])
        if isinstance(expr, relax.TupleGetItem):
            return relax.TupleGetItem(self._collect(expr.tuple_value, leaves, seen), expr.index)
        if isinstance(expr, relax.Call):
            return relax.Call(expr.op, [self._collect(a, leaves, seen) for a in expr.args],
                              expr.attrs, expr.ty_args)
        return expr


def _flat_values(value: tuple) -> Iterator:
    for v in value:
        yield from (_flat_values(v) if isinstance(v, tuple) else (v,))


# ----------------------------------------------------------------------------- the lifting rules
LiftRule = Callable[[_Lifter, relax.Call, relax.Var], Union[Value, None]]


def _binary(op: Op, fold: Callable) -> LiftRule:
    def rule(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value:
        a, b = lift.arg(call, 0), lift.arg(call, 1)
        if isinstance(a, _Const) and isinstance(b, _Const):
            return lift.constant(fold(a.array, b.array).astype(np.float32))
        return lift.emit(op, [a, b], {}, var.name)
    return rule


def _subtract(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value:
    a, b = lift.arg(call, 0), lift.arg(call, 1)
    if isinstance(a, _Const) and isinstance(b, _Const):
        return lift.constant(a.array - b.array)
    negated = lift.constant(-b.array) if isinstance(b, _Const) else \
        lift.emit(Op.MUL, [b, lift.scalar(-1.0)], {}, f"{var.name}_neg")
    return lift.emit(Op.ADD, [a, negated], {}, var.name)


def _divide(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    a, b = lift.arg(call, 0), lift.arg(call, 1)
    if not isinstance(b, _Const) or isinstance(a, _Const):
        return None  # division by a tensor is not multi-linear
    with np.errstate(divide="ignore"):
        inverse = lift.constant((1 / b.array).astype(np.float32))
    return lift.emit(Op.MUL, [a, inverse], {}, var.name)


def _negative(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value:
    return lift.emit(Op.MUL, [lift.arg(call, 0), lift.scalar(-1.0)], {}, var.name)


_CONV_LAYOUTS = {1: ("NCW", "OIW"), 2: ("NCHW", "OIHW"), 3: ("NCDHW", "OIDHW")}


def _conv(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    x, w = lift.arg(call, 0), lift.arg(call, 1)
    a, nsp = call.attrs, len(lift.shape(x)) - 2
    data, kernel = _CONV_LAYOUTS.get(nsp, (None, None))
    pads = _pads(a.padding, nsp)
    if (str(a.data_layout) != data or str(a.kernel_layout) != kernel or pads is None
            or str(a.out_layout) not in ("", data) or not _no_dtype(a.out_dtype)):
        return None
    return lift.emit(Op.CONV, [x, w], {"strides": _ints(a.strides), "pads": pads,
                                       "dilations": _ints(a.dilation), "groups": int(a.groups)},
                     var.name)


def _matmul(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    a, b = lift.arg(call, 0), lift.arg(call, 1)
    if len(lift.shape(a)) < 2 or len(lift.shape(b)) < 2 or not _no_dtype(call.attrs.out_dtype):
        return None
    return lift.emit(Op.MATMUL, [a, b], {}, var.name)


def _permute_dims(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value:
    x = lift.arg(call, 0)
    rank = len(lift.shape(x))
    axes = call.attrs.axes
    perm = tuple(range(rank))[::-1] if axes is None else tuple(int(d) % rank for d in axes)
    if isinstance(x, _Const):
        return lift.constant(np.transpose(x.array, perm))
    return lift.emit(Op.TRANSPOSE, [x], {"perm": perm}, var.name)


def _reshape(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value:
    """reshape, expand_dims, squeeze and flatten: the target is the binding's static shape."""
    x = lift.arg(call, 0)
    shape = _static(var.ty, var.name)
    if isinstance(x, _Const):
        return lift.constant(x.array.reshape(shape))
    return x if lift.shape(x) == shape else lift.emit(Op.RESHAPE, [x], {"shape": shape}, var.name)


def _concat(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    parts = lift.arg(call, 0)
    if not isinstance(parts, tuple) or call.attrs.axis is None:
        return None
    rank = len(lift.shape(parts[0]))
    if len(parts) == 1:
        return parts[0]
    return lift.emit(Op.CONCAT, list(parts), {"axis": int(call.attrs.axis) % rank}, var.name)


def _split(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value:
    x = lift.arg(call, 0)
    axis = int(call.attrs.axis) % len(lift.shape(x))
    types_ = _leaf_types(_type_tree(var.ty, var.name))
    sizes = tuple(_static(t, var.name)[axis] for t in types_)
    names = [lift.fresh(f"{var.name}_{k}") for k in range(len(sizes))]
    return lift.b.node(Op.SPLIT, [lift.name_of(x)], {"axis": axis, "sizes": sizes}, names)


def _strided_slice(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    x = lift.arg(call, 0)
    shape = lift.shape(x)
    axes, begin, end = (_const_ints(call.args[i]) for i in (1, 2, 3))
    strides = _const_ints(call.args[4]) if len(call.args) > 4 else (1,) * len(axes or ())
    if None in (axes, begin, end, strides) or any(s < 1 for s in strides):
        return None  # dynamic bounds or a reversed slice
    starts, steps, sizes = [0] * len(shape), [1] * len(shape), list(shape)
    for axis, b, e, s in zip(axes, begin, end, strides):
        axis %= len(shape)
        n = shape[axis]
        b, e = (min(max(v + n if v < 0 else v, 0), n) for v in (b, e))  # clamp like Relax
        starts[axis], steps[axis], sizes[axis] = b, s, max(0, -(-(e - b) // s))
    if min(sizes) < 1:
        return None
    return lift.emit(Op.SLICE, [x], {"starts": tuple(starts), "steps": tuple(steps),
                                     "sizes": tuple(sizes)}, var.name)


def _pad(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    a = call.attrs
    width = _ints(a.pad_width)
    if str(a.pad_mode) != "constant" or float(a.pad_value) != 0.0 or min(width, default=0) < 0:
        return None
    return lift.emit(Op.PAD, [lift.arg(call, 0)], {"pads": width[0::2] + width[1::2]}, var.name)


def _avg_pool(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    x = lift.arg(call, 0)
    a, nsp = call.attrs, len(lift.shape(x)) - 2
    data = _CONV_LAYOUTS.get(nsp, (None,))[0]
    kernel, pads = _ints(a.pool_size), _pads(a.padding, nsp)
    if (str(a.layout) != data or str(a.out_layout) not in ("", data) or bool(a.ceil_mode)
            or any(d != 1 for d in _ints(a.dilation)) or pads is None
            or any(p >= k for p, k in zip(pads, kernel * 2))):
        return None
    return lift.emit(Op.AVGPOOL, [x], {"kernel": kernel, "strides": _ints(a.strides),
                                       "pads": pads,
                                       "count_include_pad": bool(a.count_include_pad)}, var.name)


def _mean(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    """A mean over every spatial axis (ONNX's GlobalAveragePool) is an average pool."""
    x = lift.arg(call, 0)
    shape = lift.shape(x)
    rank = len(shape)
    axes = range(rank) if call.attrs.axis is None else sorted(int(d) % rank
                                                              for d in call.attrs.axis)
    if rank not in (3, 4, 5) or list(axes) != list(range(2, rank)):
        return None
    keep = bool(call.attrs.keepdims)
    pooled = lift.emit(Op.AVGPOOL, [x], {"kernel": shape[2:], "strides": shape[2:],
                                         "pads": (0,) * 2 * (rank - 2),
                                         "count_include_pad": False},
                       var.name if keep else f"{var.name}_pool")
    return pooled if keep else lift.emit(Op.RESHAPE, [pooled], {"shape": shape[:2]}, var.name)


def _batch_norm(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    """Inference batch_norm with constant statistics: x * scale[c] + shift[c]; the tuple's
    items 1 and 2 are the moving mean and variance, unchanged."""
    x, gamma, beta, mean, variance = (lift.arg(call, i) for i in range(5))
    a = call.attrs
    rank = len(lift.shape(x))
    if (bool(a.training) or rank < 2 or int(a.axis) % rank != 1
            or not all(isinstance(v, _Const) for v in (gamma, beta, mean, variance))):
        return None
    g = gamma.array.astype(np.float64) if bool(a.scale) else 1.0
    scale = g / np.sqrt(variance.array.astype(np.float64) + float(a.epsilon))
    shift = (beta.array.astype(np.float64) if bool(a.center) else 0.0) - mean.array * scale
    out = lift.emit(Op.BATCHNORM, [x, lift.constant(scale.astype(np.float32)),
                                   lift.constant(shift.astype(np.float32))], {}, var.name)
    return (out, mean, variance)


#: How each recognised Relax operator becomes tvm_pet ops. A rule returns None when an attribute
#: is outside what tvm_pet expresses; the call then stays opaque.
LIFT_RULES: dict[str, LiftRule] = {
    "relax.add": _binary(Op.ADD, np.add),
    "relax.multiply": _binary(Op.MUL, np.multiply),
    "relax.subtract": _subtract,
    "relax.divide": _divide,
    "relax.negative": _negative,
    "relax.nn.conv1d": _conv,
    "relax.nn.conv2d": _conv,
    "relax.nn.conv3d": _conv,
    "relax.matmul": _matmul,
    "relax.permute_dims": _permute_dims,
    "relax.reshape": _reshape,
    "relax.expand_dims": _reshape,
    "relax.squeeze": _reshape,
    "relax.flatten": _reshape,
    "relax.concat": _concat,
    "relax.split": _split,
    "relax.strided_slice": _strided_slice,
    "relax.nn.pad": _pad,
    "relax.nn.avg_pool1d": _avg_pool,
    "relax.nn.avg_pool2d": _avg_pool,
    "relax.nn.avg_pool3d": _avg_pool,
    "relax.mean": _mean,
    "relax.nn.batch_norm": _batch_norm,
}


# --------------------------------------------------------------- opaque operators tvm_pet can run
def _maxpool_params(call: relax.Call, shapes: list[Shape]) -> dict | None:
    a, nsp = call.attrs, len(shapes[0]) - 2
    pads = _pads(a.padding, nsp)
    if (str(a.layout) != _CONV_LAYOUTS.get(nsp, (None,))[0] or bool(a.ceil_mode) or pads is None
            or any(d != 1 for d in _ints(a.dilation)) or str(a.out_layout) not in ("", a.layout)):
        return None
    return {"kernel_shape": _ints(a.pool_size), "strides": _ints(a.strides), "pads": pads}


def _layernorm_params(call: relax.Call, shapes: list[Shape]) -> dict | None:
    a, rank = call.attrs, len(shapes[0])
    axes = sorted(int(d) % rank for d in a.axes)
    if not (bool(a.center) and bool(a.scale)) or not axes or axes != list(range(axes[0], rank)):
        return None
    return {"axis": axes[0], "epsilon": float(a.epsilon)}


#: Relax operators lifted as OPAQUE nodes of an ONNX kind that tvm_pet's float evaluation knows
#: (see :data:`tvm_pet.ops.float_eval.OPAQUE_FLOAT`): ``(kind, params(call, input shapes))``;
#: params None keeps the Relax name as the kind.
EVALUABLE_OPAQUE: dict[str, tuple[str, Callable[[relax.Call, list[Shape]], dict | None]]] = {
    "relax.nn.relu": ("Relu", lambda c, s: {}),
    "relax.sigmoid": ("Sigmoid", lambda c, s: {}),
    "relax.tanh": ("Tanh", lambda c, s: {}),
    "relax.exp": ("Exp", lambda c, s: {}),
    "relax.erf": ("Erf", lambda c, s: {}),
    "relax.nn.gelu": ("Gelu", lambda c, s: {}),
    "relax.nn.softmax": ("Softmax", lambda c, s: {"axis": int(c.attrs.axis)}),
    "relax.nn.max_pool1d": ("MaxPool", _maxpool_params),
    "relax.nn.max_pool2d": ("MaxPool", _maxpool_params),
    "relax.nn.max_pool3d": ("MaxPool", _maxpool_params),
    "relax.nn.layer_norm": ("LayerNormalization", _layernorm_params),
}


def _evaluable_kind(call: relax.Call, shapes: list[Shape]) -> tuple[str, dict]:
    kind = _call_kind(call)
    entry = EVALUABLE_OPAQUE.get(kind) if all(_is_f32(a) for a in call.args) else None
    params = entry[1](call, shapes) if entry is not None else None
    return (kind, {}) if params is None else (entry[0], params)


# -------------------------------------------------------------------------------------- lowering
class _Lowerer:
    """Emits one program as a Relax function with a BlockBuilder, in one dataflow block."""

    def __init__(self, program: Program, lifted: Lifted | None):
        self.p, self.lifted = program, lifted
        self.bb = relax.BlockBuilder()
        self.env: dict[str, relax.Expr] = {}

    def module(self) -> tvm.IRModule:
        params = self._params()
        name = self.lifted.name if self.lifted else "main"
        attrs = dict(self.lifted.attrs) if self.lifted and self.lifted.attrs else None
        with self.bb.function(name, params, attrs=attrs):
            with self.bb.dataflow():
                for node in self.p.nodes:
                    self._node(node)
                out = self.bb.emit_output(self._result())
            self.bb.emit_func_output(out)
        return self.bb.finalize()

    def _params(self) -> list[relax.Var]:
        specs = {t.name: t for t in self.p.inputs}
        if self.lifted is None:
            params = [relax.Var(t.name, relax.TensorType(t.shape, F32)) for t in self.p.inputs]
            self.env.update(zip(specs, params))
            return params
        extra = sorted(set(specs) - set(self.lifted.input_names))
        if extra:
            raise ProgramError(f"program inputs {extra} are not parameters of the lifted function "
                               f"({list(self.lifted.input_names)}); keep the signature")
        for var, name in zip(self.lifted.params, self.lifted.input_names):
            if name in specs and specs[name].shape != _static(var.ty, name):
                raise ShapeError(f"input {name!r} has shape {list(specs[name].shape)}, the "
                                 f"function's parameter {list(_static(var.ty, name))}")
            self.env[name] = var
        return list(self.lifted.params)

    def _result(self) -> relax.Expr:
        outs = list(self.p.outputs)
        tree: Tree = outs[0] if len(outs) == 1 else tuple(outs)
        if self.lifted is not None and _flatten(self.lifted.outputs) == outs:
            tree = self.lifted.outputs
        return _unflatten(tree, iter(self.expr(o) for o in _flatten(tree)), relax.Tuple)

    def expr(self, name: str) -> relax.Expr:
        """The Relax value of a program tensor (a weight becomes a constant on first use)."""
        if name not in self.env:
            if name not in self.p.weights:
                raise ProgramError(f"tensor {name!r} is used before it is defined")
            array = self.p.weights[name]
            origin = self.lifted.constants.get(name) if self.lifted else None
            self.env[name] = origin[1] if origin is not None and origin[0] is array else \
                relax.const(np.asarray(array, np.float32))
        return self.env[name]

    def emit(self, expr: relax.Expr, hint: str) -> relax.Expr:
        hint = "".join(c if c.isalnum() else "_" for c in hint)
        return self.bb.emit(expr, name_hint=hint if hint[:1].isalpha() else f"t_{hint}")

    def shape(self, name: str) -> Shape:
        return self.p.shapes[name]

    def _node(self, node: Node) -> None:
        try:
            results = LOWER_RULES[node.op](self, node, [self.expr(i) for i in node.inputs])
        except PetError as e:
            raise type(e)(f"while lowering `{node.describe()}` to Relax: {e}") from None
        for name, value in zip(node.outputs, results):
            is_var = isinstance(value, relax.Var)
            self.env[name] = value if is_var else self.emit(value, name)


LowerRule = Callable[[_Lowerer, Node, list], list]


def _conv_lower(low: _Lowerer, node: Node, args: list) -> list:
    a, nsp = node.attrs, len(low.shape(node.inputs[0])) - 2
    conv = (rnn.conv1d, rnn.conv2d, rnn.conv3d)[nsp - 1]
    return [conv(args[0], args[1], strides=a["strides"], padding=a["pads"],
                 dilation=a["dilations"], groups=a["groups"])]


def _avgpool_lower(low: _Lowerer, node: Node, args: list) -> list:
    a = node.attrs
    nsp = len(a["kernel"])
    pool = (rnn.avg_pool1d, rnn.avg_pool2d, rnn.avg_pool3d)[nsp - 1]
    return [pool(args[0], pool_size=a["kernel"], strides=a["strides"], padding=a["pads"],
                 dilation=(1,) * nsp, ceil_mode=False,
                 count_include_pad=a["count_include_pad"])]


def _channel(low: _Lowerer, vector: relax.Expr, rank: int) -> relax.Expr:
    return low.emit(relax.op.reshape(vector, (-1,) + (1,) * (rank - 2)), "channel")


def _batchnorm_lower(low: _Lowerer, node: Node, args: list) -> list:
    rank = len(low.shape(node.inputs[0]))
    scaled = low.emit(relax.op.multiply(args[0], _channel(low, args[1], rank)), node.outputs[0])
    return [relax.op.add(scaled, _channel(low, args[2], rank))]


def _split_lower(low: _Lowerer, node: Node, args: list) -> list:
    sizes = node.attrs["sizes"]
    if len(sizes) == 1:
        return [args[0]]
    cuts = [int(c) for c in np.cumsum(sizes)[:-1]]
    parts = low.emit(relax.op.split(args[0], cuts, axis=node.attrs["axis"]), node.outputs[0])
    return [relax.TupleGetItem(parts, k) for k in range(len(sizes))]


def _slice_expr(x: relax.Expr, axis: int, begin: int, end: int, step: int = 1) -> relax.Expr:
    return relax.op.strided_slice(x, [axis], [begin], [end], [step])


def _slice_lower(low: _Lowerer, node: Node, args: list) -> list:
    a, shape = node.attrs, low.shape(node.inputs[0])
    axes = [d for d, (b, s, k) in enumerate(zip(a["starts"], a["steps"], a["sizes"]))
            if (b, s, k) != (0, 1, shape[d])]
    if not axes:
        return [args[0]]
    ends = [a["starts"][d] + (a["sizes"][d] - 1) * a["steps"][d] + 1 for d in axes]
    return [relax.op.strided_slice(args[0], axes, [a["starts"][d] for d in axes], ends,
                                   [a["steps"][d] for d in axes])]


def _pad_lower(low: _Lowerer, node: Node, args: list) -> list:
    pads, rank = node.attrs["pads"], len(low.shape(node.inputs[0]))
    width = [p for d in range(rank) for p in (pads[d], pads[rank + d])]  # (before, after) per axis
    return [rnn.pad(args[0], width, pad_value=0.0)]


def _reshape_transpose_lower(low: _Lowerer, node: Node, args: list) -> list:
    a = node.attrs
    split = low.emit(relax.op.reshape(args[0], a["split_shape"]), f"{node.outputs[0]}_split")
    moved = low.emit(relax.op.permute_dims(split, a["perm"]), f"{node.outputs[0]}_moved")
    return [relax.op.reshape(moved, a["shape"])]


def _update_lower(low: _Lowerer, node: Node, args: list) -> list:
    """``base`` with a strided box overwritten by ``patch``, built from slices, reshapes and
    concats one axis at a time (every piece is static, so it legalizes on any target)."""
    base_shape, patch_shape = low.shape(node.inputs[0]), low.shape(node.inputs[1])
    return [_update_axis(low, args[0], base_shape, args[1], patch_shape, node.attrs["starts"],
                         node.attrs["steps"], 0, node.outputs[0])]


def _update_axis(low: _Lowerer, base: relax.Expr, shape: Shape, patch: relax.Expr,
                 patch_shape: Shape, starts, steps, d: int, hint: str) -> relax.Expr:
    """``base`` (the box's rows on axes < d) with the box's part on axes >= d replaced."""
    if d == len(shape):
        return patch
    n, k, b = shape[d], patch_shape[d], starts[d]
    s = steps[d] if k > 1 else 1
    inner = shape[:d] + (k,) + shape[d + 1:]
    if (b, k, s) == (0, n, 1):
        return _update_axis(low, base, shape, patch, patch_shape, starts, steps, d + 1, hint)
    span = k * s
    extra = max(0, b + span - n)  # a strided box may end before its last step does
    if extra:
        width = [0] * (2 * len(shape))
        width[2 * d + 1] = extra
        base = low.emit(rnn.pad(base, width, pad_value=0.0), f"{hint}_ext")
    total = n + extra
    region = low.emit(_slice_expr(base, d, b, b + span), f"{hint}_region")
    if s == 1:
        new = _update_axis(low, region, inner, patch, patch_shape, starts, steps, d + 1, hint)
    else:
        grouped = low.emit(relax.op.reshape(region, shape[:d] + (k, s) + shape[d + 1:]),
                           f"{hint}_grouped")
        picked = low.emit(relax.op.reshape(_slice_expr(grouped, d + 1, 0, 1), inner),
                          f"{hint}_picked")
        written = _update_axis(low, picked, inner, patch, patch_shape, starts, steps, d + 1, hint)
        column = low.emit(relax.op.reshape(written, shape[:d] + (k, 1) + shape[d + 1:]),
                          f"{hint}_column")
        rest = low.emit(_slice_expr(grouped, d + 1, 1, s), f"{hint}_rest")
        merged = low.emit(relax.op.concat([column, rest], axis=d + 1), f"{hint}_merged")
        new = low.emit(relax.op.reshape(merged, shape[:d] + (span,) + shape[d + 1:]),
                       f"{hint}_strided")
    parts = ([low.emit(_slice_expr(base, d, 0, b), f"{hint}_before")] if b > 0 else []) + [new]
    if b + span < total:
        parts.append(low.emit(_slice_expr(base, d, b + span, total), f"{hint}_after"))
    out = low.emit(relax.op.concat(parts, axis=d), f"{hint}_axis{d}") if len(parts) > 1 else new
    return low.emit(_slice_expr(out, d, 0, n), f"{hint}_trim") if extra else out


def _fill_lower(low: _Lowerer, node: Node, args: list) -> list:
    num, den = node.attrs["value"]
    return [relax.const(np.full(node.attrs["shape"], num / den, dtype=np.float32))]


def _opaque_lower(low: _Lowerer, node: Node, args: list) -> list:
    binding = low.lifted.opaque.get(node.outputs[0]) if low.lifted else None
    if binding is not None and binding.fits(node):
        value = low.emit(binding.rebuild(args), node.outputs[0])
        if isinstance(binding.outputs, str):
            return [value]
        getters = _unflatten(binding.outputs, iter(range(len(node.outputs))), tuple)
        return [relax.TupleGetItem(_path(value, p[:-1]), p[-1]) for p in _paths(getters)]
    kind = node.attrs["kind"]
    if kind not in OPAQUE_LOWERING:
        raise UnsupportedOperator(f"no Relax lowering for the opaque operator {kind!r} without "
                                  f"its original expression; tvm_pet lowers "
                                  f"{sorted(OPAQUE_LOWERING)}")
    shapes = [low.shape(i) for i in node.inputs]
    return [OPAQUE_LOWERING[kind](node.attrs["params"], args, shapes)]


def _paths(tree, prefix=()) -> Iterator[tuple[int, ...]]:
    for k, t in enumerate(tree):
        yield from (_paths(t, prefix + (k,)) if isinstance(t, tuple) else (prefix + (k,),))


def _path(value: relax.Expr, path: tuple[int, ...]) -> relax.Expr:
    for k in path:
        value = relax.TupleGetItem(value, k)
    return value


#: How each tvm_pet operator is emitted in Relax: ``rule(lowerer, node, input exprs) -> one
#: expression per output`` (a rule may emit intermediate bindings itself).
LOWER_RULES: dict[Op, LowerRule] = {
    Op.ADD: lambda low, n, x: [relax.op.add(x[0], x[1])],
    Op.MUL: lambda low, n, x: [relax.op.multiply(x[0], x[1])],
    Op.CONV: _conv_lower,
    Op.MATMUL: lambda low, n, x: [relax.op.matmul(x[0], x[1])],
    Op.BATCHNORM: _batchnorm_lower,
    Op.AVGPOOL: _avgpool_lower,
    Op.CONCAT: lambda low, n, x: [relax.op.concat(x, axis=n.attrs["axis"]) if len(x) > 1
                                  else x[0]],
    Op.SPLIT: _split_lower,
    Op.SLICE: _slice_lower,
    Op.PAD: _pad_lower,
    Op.TRANSPOSE: lambda low, n, x: [relax.op.permute_dims(x[0], n.attrs["perm"])],
    Op.RESHAPE: lambda low, n, x: [relax.op.reshape(x[0], n.attrs["shape"])],
    Op.RESHAPE_TRANSPOSE: _reshape_transpose_lower,
    Op.UPDATE: _update_lower,
    Op.FILL: _fill_lower,
    Op.OPAQUE: _opaque_lower,
}


# ------------------------------------------------------- opaque operators from tvm_pet's importer
def _maxpool_lower(params: Mapping, args: list, shapes: list[Shape]) -> relax.Expr:
    nsp = len(shapes[0]) - 2
    ones = (1,) * nsp
    if any(params.get(k, d) != d for k, d in [("ceil_mode", 0), ("dilations", ones),
                                             ("auto_pad", "NOTSET"), ("storage_order", 0)]):
        raise UnsupportedOperator(f"MaxPool with attributes {dict(params)}: tvm_pet lowers MaxPool "
                                  f"without ceil_mode, dilations or auto_pad only")
    pool = (rnn.max_pool1d, rnn.max_pool2d, rnn.max_pool3d)[nsp - 1]
    return pool(args[0], pool_size=params["kernel_shape"], strides=params.get("strides", ones),
                padding=params.get("pads", (0,) * 2 * nsp), dilation=ones)


def _layernorm_lower(params: Mapping, args: list, shapes: list[Shape]) -> relax.Expr:
    rank = len(shapes[0])
    axis = params.get("axis", -1) % rank
    bias = args[2] if len(args) > 2 else relax.const(np.zeros(shapes[1], np.float32))
    return rnn.layer_norm(args[0], args[1], bias, axes=list(range(axis, rank)),
                          epsilon=params.get("epsilon", 1e-5))


def _gelu_lower(params: Mapping, args: list, shapes: list[Shape]) -> relax.Expr:
    approximate = params.get("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise UnsupportedOperator(f"Gelu with approximate={approximate!r}")
    return (rnn.gelu if approximate == "none" else rnn.gelu_tanh)(args[0])


#: Relax forms of the OPAQUE kinds that tvm_pet's ONNX importer makes, by kind.
OPAQUE_LOWERING: dict[str, Callable[[Mapping, list, list[Shape]], relax.Expr]] = {
    "Relu": lambda p, x, s: rnn.relu(x[0]),
    "Sigmoid": lambda p, x, s: relax.op.sigmoid(x[0]),
    "Tanh": lambda p, x, s: relax.op.tanh(x[0]),
    "Exp": lambda p, x, s: relax.op.exp(x[0]),
    "Erf": lambda p, x, s: relax.op.erf(x[0]),
    "Identity": lambda p, x, s: x[0],
    "Softmax": lambda p, x, s: rnn.softmax(x[0], axis=p.get("axis", -1)),
    "Gelu": _gelu_lower,
    "MaxPool": _maxpool_lower,
    "LayerNormalization": _layernorm_lower,
}


# ------------------------------------------------------------------------------------ public API
def from_relax(func: relax.Function) -> Lifted:
    """Lift a Relax function into a tvm_pet program, keeping what rebuilding it needs.

    Args:
        func: a Relax function with static-shape float32 tensor parameters, e.g. ``mod["main"]``
            of ``relax.frontend.onnx.from_onnx(model)`` (initializers as constants) or one
            written with a BlockBuilder or TVMScript.

    Returns:
        The :class:`Lifted` program; calls no rule maps are OPAQUE nodes with their expression.

    Raises:
        UnsupportedOperator: a non-tensor or non-float32 parameter, or a binding tvm_pet cannot
            represent (a non-tensor value, an operator with no float32 tensor input).
        ShapeError: a symbolic or zero-size shape.
    """
    if not isinstance(func, relax.Function):
        raise UnsupportedOperator(f"from_relax takes a relax.Function, got {type(func).__name__} "
                                  f"(for a module, pass mod['main'])")
    return _Lifter(func).run()


def to_relax(program: Program, lifted: Lifted | None = None) -> relax.Function:
    """Emit ``program`` as a Relax function (one dataflow block).

    Args:
        program: the program to emit.
        lifted: the lift it came from, if any: its parameter Vars, signature order, attributes
            and result structure are kept, and OPAQUE nodes re-emit their original expressions.

    Returns:
        The function, named like the lifted one (``"main"`` otherwise).

    Raises:
        UnsupportedOperator: an OPAQUE node without a kept expression whose kind has no entry in
            :data:`OPAQUE_LOWERING`.
        ProgramError: program inputs that are not parameters of the lifted function.
    """
    mod = _Lowerer(program, lifted).module()
    return mod[lifted.name if lifted else "main"]


def program_to_module(program: Program) -> tvm.IRModule:
    """A module whose ``main`` computes ``program`` (its inputs as parameters, in order).

    >>> from tvm_pet.ir import ProgramBuilder
    >>> b = ProgramBuilder(); x = b.input("x", (2, 3)); y = b.add(x, x)
    >>> [p.name for p in program_to_module(b.build([y]))["main"].params]
    ['x']
    """
    return _Lowerer(program, None).module()
