"""Lifting: Relax calls to tvm_pet operators, one rule per Relax op name (:data:`LIFT_RULES`).

Every binding becomes one of three things, and no single binding makes the whole function fail:

- **lifted**: a call a rule maps (float32 operands and result) becomes tvm_pet operators;
- **opaque**: any other call that reads a tensor the program computes becomes an OPAQUE node
  that keeps its expression; its kind is the ONNX name where tvm_pet can evaluate it
  (:data:`EVALUABLE_OPAQUE`), else the Relax op name;
- **outside**: a binding that reads no tensor the program computes (integer and shape
  computations on token ids or masks, ``arange``, ``full``, embedding lookups ``take(weight,
  ids)``, ...) is kept verbatim outside the program, as are parameters that are not float32
  tensors. Where a lifted or opaque operator reads a float32 value computed outside, that value
  becomes a program input (the search treats it like any input), so the float32 regions around
  integer inputs are searched.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Union

import numpy as np
import tvm
from tvm import relax

from tvm_pet.errors import PetError, ProgramError, ShapeError, UnsupportedOperator
from tvm_pet.ir.builder import ProgramBuilder, unused_name
from tvm_pet.ir.node import Node, Shape
from tvm_pet.ir.ops import ONNX_INPUTS, Op
from tvm_pet.ops.float_eval import maxpool_ceil_pads
from tvm_pet.relax.lifted_function import Lifted, OpaqueBinding, Tree, flatten, unflatten
from tvm_pet.relax.relax_types import (F32, begins_ends, call_kind, const_ints, float32_or_void, ints,
                                       is_f32, leaf_types, static_shape, template, type_tree)


# --------------------------------------------------------------------------------------- lifting
@dataclasses.dataclass(eq=False)
class _Const:
    """A constant value met while lifting; it becomes a weight on first use as a tensor."""

    array: np.ndarray
    origin: relax.Expr | None = None
    name: str | None = None


@dataclasses.dataclass(eq=False)
class _Outside:
    """A value computed outside the program: a parameter that is not a float32 tensor, a binding
    that reads no program tensor, or a tuple item of one. ``name`` is set when the program reads
    it (it then is a program input)."""

    expr: relax.Expr  # a Var, or a TupleGetItem of one
    ty: object
    name: str | None = None


Value = Union[str, _Const, _Outside, tuple]


class _Lifter:
    """The state of one lift: the builder, the value of every Relax Var, the kept expressions."""

    def __init__(self, func: relax.Function, module: tvm.IRModule | None = None):
        self.func = func
        self.module = module
        attrs = dict(func.attrs) if func.attrs is not None else {}
        self.name = str(attrs.get("global_symbol", "main"))
        self.attrs = attrs
        self.b = ProgramBuilder(self.name)
        self.env: dict[relax.Var, Value] = {}
        self.used: set[str] = set()
        self.consts: dict[int, _Const] = {}
        self.scalars: dict[float, _Const] = {}
        self.opaque: dict[str, OpaqueBinding] = {}
        self.recognised: dict[str, tuple[Node, OpaqueBinding]] = {}
        self.origins: dict[str, tuple[np.ndarray, relax.Expr]] = {}
        self.outside: list[relax.Binding] = []
        self.outside_inputs: dict[str, relax.Expr] = {}
        self.items: dict[tuple[int, int], _Outside] = {}

    # -------------------------------------------------------------------------- names and values
    def fresh(self, hint: str) -> str:
        return unused_name(hint or "t", self.used)

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
        if isinstance(expr, tvm.ir.expr.Constant) and isinstance(expr.ty, relax.TensorType):
            key = expr.__chandle__()
            if key not in self.consts:
                self.consts[key] = self.constant(expr.value.numpy(), expr)
            return self.consts[key]
        if isinstance(expr, relax.Tuple):
            return tuple(self.value_of(f) for f in expr.fields)
        if isinstance(expr, relax.TupleGetItem):
            whole = self.value_of(expr.tuple_value)
            if isinstance(whole, _Outside):
                return self._outside_item(whole, int(expr.index))
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
        if isinstance(value, _Outside):
            return self._outside_input(value)
        raise UnsupportedOperator("a tuple is used where a tensor is expected")

    def tree_of(self, value: Value) -> Tree:
        return tuple(self.tree_of(v) for v in value) if isinstance(value, tuple) else \
            self.name_of(value)

    def shape(self, value: Value) -> Shape:
        if isinstance(value, _Const):
            return tuple(value.array.shape)
        if isinstance(value, _Outside):
            return static_shape(value.ty, str(value.expr))
        return self.b.shapes[value]

    # ----------------------------------------------------------------- values computed outside
    def _outside_item(self, whole: _Outside, index: int) -> _Outside:
        key = (whole.expr.__chandle__(), index)
        if key not in self.items:
            ty = whole.ty.fields[index] if isinstance(whole.ty, relax.TupleType) else None
            self.items[key] = _Outside(relax.TupleGetItem(whole.expr, index), ty)
        return self.items[key]

    def _outside_input(self, value: _Outside) -> str:
        """The program input standing for a float32 tensor computed outside the program."""
        if value.name is None:
            ty = value.ty
            if not isinstance(ty, relax.TensorType) or str(ty.dtype) != F32:
                raise UnsupportedOperator(f"{value.expr} is {ty}, computed outside the program; "
                                          f"tvm_pet programs read float32 tensors only")
            hint = value.expr.name if isinstance(value.expr, relax.Var) else "item"
            value.name = self.b.input(self.fresh(hint), static_shape(ty, str(value.expr)))
            self.outside_inputs[value.name] = value.expr
        return value.name

    def _reads_program(self, expr: relax.Expr) -> bool:
        """True when ``expr`` reads a tensor the program computes (an input or a node output)."""
        if isinstance(expr, relax.Var):
            return _has_name(self.value_of(expr))
        if isinstance(expr, relax.Tuple):
            return any(self._reads_program(f) for f in expr.fields)
        if isinstance(expr, relax.TupleGetItem):
            return self._reads_program(expr.tuple_value)
        if isinstance(expr, relax.Call):
            return any(self._reads_program(a) for a in expr.args)
        return False

    def _keep_outside(self, binding) -> None:
        """Keep ``binding`` verbatim outside the program, except that Vars bound to constants
        (which the lift folded away) are replaced by those constants."""
        var, value = binding.var, self._inline_constants(binding.value)
        if not value.same_as(binding.value):
            binding = (relax.MatchCast(var, value, binding.ty)
                       if isinstance(binding, relax.MatchCast) else relax.VarBinding(var, value))
        self.outside.append(binding)
        self.env[var] = _Outside(var, var.ty)

    def _inline_constants(self, expr: relax.Expr) -> relax.Expr:
        if isinstance(expr, relax.Var):
            value = self.value_of(expr)
            if isinstance(value, _Const):
                return value.origin if value.origin is not None else relax.const(value.array)
            return expr
        if isinstance(expr, relax.Tuple):
            fields = [self._inline_constants(f) for f in expr.fields]
            same = all(a.same_as(b) for a, b in zip(fields, expr.fields))
            return expr if same else relax.Tuple(fields)
        if isinstance(expr, relax.TupleGetItem):
            inner = self._inline_constants(expr.tuple_value)
            return expr if inner.same_as(expr.tuple_value) else relax.TupleGetItem(inner,
                                                                                   expr.index)
        if isinstance(expr, relax.Call):
            args = [self._inline_constants(a) for a in expr.args]
            if all(a.same_as(b) for a, b in zip(args, expr.args)):
                return expr
            return relax.Call(expr.op, args, expr.attrs, expr.ty_args)
        return expr

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
            if isinstance(ty, relax.TensorType) and str(ty.dtype) == F32:
                self.env[p] = self.b.input(self.fresh(p.name),
                                           static_shape(ty, f"parameter {p.name!r}"))
            else:  # token ids, masks, shapes: read by bindings kept outside the program
                self.env[p] = _Outside(p, ty)
        body = self.func.body
        blocks, result = (body.blocks, body.body) if isinstance(body, relax.SeqExpr) else ((), body)
        for block in blocks:
            for binding in block.bindings:
                self.bind(binding)
        if isinstance(result, relax.Call):
            raise UnsupportedOperator("the function returns a call, not a variable: normalize it "
                                      "first (relax.transform.Normalize())")
        try:
            outputs = self.tree_of(self.value_of(result))
        except PetError as e:
            raise type(e)(f"while lifting the function's result: {e}") from None
        program = self.b.build(flatten(outputs))
        params = tuple(self.func.params)
        names = tuple(v if isinstance(v, str) else None for v in (self.env[p] for p in params))
        return Lifted(program, params, names,
                      types.MappingProxyType(self.opaque), types.MappingProxyType(self.origins),
                      outputs, types.MappingProxyType(self.attrs), self.name,
                      tuple(self.outside), types.MappingProxyType(self.outside_inputs),
                      types.MappingProxyType(self.recognised))

    def bind(self, binding) -> None:
        var, value = binding.var, binding.value
        label = f"`{var.name} = {call_kind(value) if isinstance(value, relax.Call) else value}`"
        try:
            if (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
                    and value.op.get_attr("FPurity") is False):
                raise UnsupportedOperator(f"{value.op.name} has side effects; tvm_pet emits one "
                                          f"dataflow block, so it lifts pure calls only")
            reads_program = self._reads_program(value)
            is_call = isinstance(value, relax.Call) and not isinstance(binding, relax.MatchCast)
            if not reads_program and not is_call and _has_outside(self, value):
                self._keep_outside(binding)  # an alias of a value computed outside
                return
            if not reads_program and is_call and not _static_tensors(var.ty):
                self._keep_outside(binding)  # a shape or other non-tensor computation
                return
            tree = type_tree(var.ty, f"binding {var.name!r}")
            for ty in leaf_types(tree):
                static_shape(ty, f"binding {var.name!r}")
            if not is_call:
                self.env[var] = self._alias(var, value)
                return
            result = self._recognised(var, value)
            if result is not None:
                self.env[var] = result
            elif reads_program:
                self.env[var] = self._opaque(var, value, tree)
            else:
                self._keep_outside(binding)
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
        indices = INDEX_OPERANDS.get(call.op.name, ()) if rule is not None else ()
        if rule is None or not is_f32(var) or not all(
                is_f32(a) for k, a in enumerate(call.args) if k not in indices):
            return None
        emitted = len(self.b.nodes)
        result = rule(self, call, var)
        if result is not None:
            self._check(var, result)
            if len(self.b.nodes) == emitted + 1:
                self._keep_call(call, self.b.nodes[-1])
        return result

    def _keep_call(self, call: relax.Call, node: Node) -> None:
        """Keep ``call`` for the one node a rule made of it (:attr:`Lifted.recognised`) when the
        node reads the call's operands, in order, unchanged."""
        names = []
        for arg in call.args:
            value = self.value_of(arg) if isinstance(arg, (relax.Var, tvm.ir.expr.Constant)) \
                else None
            names.append(value if isinstance(value, str) else getattr(value, "name", None))
        if tuple(names) == node.inputs and len(node.outputs) == 1:
            leaves = tuple(zip(call.args, names))
            self.recognised[node.outputs[0]] = (
                node, OpaqueBinding(call, leaves, node.outputs[0], node.op.value))

    def _check(self, var: relax.Var, value: Value) -> None:
        """The lifted shapes must be Relax's: a mismatch is a bug in a rule, never ignored."""
        want = [static_shape(t, var.name) for t in leaf_types(type_tree(var.ty, var.name))]
        leaves = [value] if not isinstance(value, tuple) else list(_flat_values(value))
        have = [self.shape(v) for v in leaves]
        if have != want:
            raise ShapeError(f"tvm_pet computed shapes {[list(s) for s in have]} for "
                             f"{var.name!r}, Relax says {[list(s) for s in want]}")

    def _opaque(self, var: relax.Var, call: relax.Call, tree) -> Tree:
        leaves: list[tuple[relax.Expr, Tree]] = []
        expr = self._collect(call, leaves, set())
        inputs = [n for _, t in leaves for n in flatten(t)]
        if not inputs:
            raise UnsupportedOperator(f"{call_kind(call)} reads no float32 tensor; tvm_pet keeps "
                                      f"opaque operators that read at least one")
        kind, params = _evaluable_kind(call, [self.b.shapes[i] for i in inputs], self.module)
        types_ = leaf_types(tree)
        names = [self.fresh(var.name if len(types_) == 1 else f"{var.name}_{k}")
                 for k in range(len(types_))]
        outputs = unflatten(template(tree), iter(names), tuple)
        shapes = tuple(static_shape(t, var.name) for t in types_)
        self.b.node(Op.OPAQUE, inputs, {"kind": kind, "shapes": shapes, "params": params}, names)
        binding = OpaqueBinding(expr, tuple(leaves), outputs, kind)
        for n in names:
            self.opaque[n] = binding
        return outputs

    def _collect(self, expr: relax.Expr, leaves: list, seen: set) -> relax.Expr:
        """Record the tensor operands of ``expr`` as leaves; returns ``expr`` with Vars bound to
        non-float constants replaced by those constants."""
        if isinstance(expr, relax.Var) or (isinstance(expr, tvm.ir.expr.Constant)
                                           and isinstance(expr.ty, relax.TensorType)
                                           and is_f32(expr)):  # not a FloatImm operand
            value = self.value_of(expr)
            if isinstance(value, _Outside) and not _f32_tensor(value.ty):
                return expr  # kept as it is: the lowering emits it before the program
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


def _has_name(value: Value) -> bool:
    """True when a lifted value holds a program tensor (an input or a node output)."""
    if isinstance(value, tuple):
        return any(_has_name(v) for v in value)
    return isinstance(value, str)


def _has_outside(lift: _Lifter, expr: relax.Expr) -> bool:
    if isinstance(expr, relax.Var):
        value = lift.value_of(expr)
        return isinstance(value, _Outside) or (isinstance(value, tuple) and any(
            isinstance(v, _Outside) for v in _flat_values(value)))
    if isinstance(expr, relax.Tuple):
        return any(_has_outside(lift, f) for f in expr.fields)
    if isinstance(expr, relax.TupleGetItem):
        return _has_outside(lift, expr.tuple_value)
    return False


def _f32_tensor(ty) -> bool:
    return isinstance(ty, relax.TensorType) and str(ty.dtype) == F32


def _static_tensors(ty) -> bool:
    """True for a tensor, or a tuple of them, of static shape (what the program can hold)."""
    if isinstance(ty, relax.TupleType):
        return len(ty.fields) > 0 and all(_static_tensors(f) for f in ty.fields)
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return False
    try:
        return all(int(d) >= 1 for d in ty.shape)
    except TypeError:
        return False


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
    pads = begins_ends(a.padding, nsp)
    if (str(a.data_layout) != data or str(a.kernel_layout) != kernel or pads is None
            or str(a.out_layout) not in ("", data) or not float32_or_void(a.out_dtype)):
        return None
    return lift.emit(Op.CONV, [x, w], {"strides": ints(a.strides), "pads": pads,
                                       "dilations": ints(a.dilation), "groups": int(a.groups)},
                     var.name)


def _matmul(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    a, b = lift.arg(call, 0), lift.arg(call, 1)
    if len(lift.shape(a)) < 2 or len(lift.shape(b)) < 2 or not float32_or_void(call.attrs.out_dtype):
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
    shape = static_shape(var.ty, var.name)
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
    types_ = leaf_types(type_tree(var.ty, var.name))
    sizes = tuple(static_shape(t, var.name)[axis] for t in types_)
    names = [lift.fresh(f"{var.name}_{k}") for k in range(len(sizes))]
    return lift.b.node(Op.SPLIT, [lift.name_of(x)], {"axis": axis, "sizes": sizes}, names)


def _strided_slice(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    x = lift.arg(call, 0)
    shape = lift.shape(x)
    axes, begin, end = (const_ints(call.args[i]) for i in (1, 2, 3))
    strides = const_ints(call.args[4]) if len(call.args) > 4 else (1,) * len(axes or ())
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


def _take(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    """take at constant indices in range and evenly spaced upwards (a scalar, or ``[i, i + s,
    ...]`` with ``s >= 1``): a strided SLICE along the axis, then for a scalar index a RESHAPE
    dropping it (ViT's query, key and value picked out of one projection by index)."""
    x, indices = lift.arg(call, 0), call.args[1]
    if call.attrs.axis is None or not isinstance(indices, tvm.ir.expr.Constant):
        return None
    index = indices.value.numpy()
    flat = index.ravel().astype(np.int64)
    shape = lift.shape(x)
    axis = int(call.attrs.axis) % len(shape)
    if index.dtype.kind not in "iu" or index.ndim > 1 or not flat.size \
            or flat.min() < 0 or flat.max() >= shape[axis]:
        return None  # out of range: TVM's modes (fast, clip, wrap) differ there
    step = int(flat[1] - flat[0]) if flat.size > 1 else 1
    if step < 1 or np.any(np.diff(flat) != step):
        return None
    out_shape = static_shape(var.ty, var.name)
    if isinstance(x, _Const):
        return lift.constant(np.take(x.array, index, axis=axis))
    starts, steps, sizes = [0] * len(shape), [1] * len(shape), list(shape)
    starts[axis], steps[axis], sizes[axis] = int(flat[0]), step, int(flat.size)
    sliced = lift.emit(Op.SLICE, [x], {"starts": tuple(starts), "steps": tuple(steps),
                                       "sizes": tuple(sizes)},
                       var.name if index.ndim else f"{var.name}_slice")
    return sliced if index.ndim else lift.emit(Op.RESHAPE, [sliced], {"shape": out_shape},
                                               var.name)


def _pad(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    a = call.attrs
    width = ints(a.pad_width)
    if str(a.pad_mode) != "constant" or float(a.pad_value) != 0.0 or min(width, default=0) < 0:
        return None
    return lift.emit(Op.PAD, [lift.arg(call, 0)], {"pads": width[0::2] + width[1::2]}, var.name)


def _call_tir_pad(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    """A ``call_tir`` that TVM's ONNX frontend makes of a constant ``Pad`` (``emit_te`` of
    ``topi.nn.pad``; swin_t's pads to whole windows) lifts as PAD when its function is, structure
    for structure, what ``te.create_prim_func`` makes of ``topi.nn.pad`` of zero with widths its
    shapes allow (each axis's growth split every way, at most :data:`PAD_SPLITS` tries); any other
    ``call_tir`` stays opaque."""
    called = _called_function(call, lift.module, 1)
    if called is None:
        return None
    func, (x,) = called
    before_shape = static_shape(x.ty, "the padded tensor")
    growth = [o - i for o, i in zip(static_shape(var.ty, var.name), before_shape)]
    if len(growth) != len(before_shape) or min(growth) < 0 or \
            math.prod(g + 1 for g in growth) > PAD_SPLITS:
        return None
    from tvm import te, topi
    a = te.placeholder(list(x.ty.shape.values), "float32", name="A")  # int64, as Relax's
    for before in itertools.product(*(range(g + 1) for g in growth)):
        after = [g - b for g, b in zip(growth, before)]
        if _made_by_te(func, [a, topi.nn.pad(a, list(before), after, 0.0)]):
            return lift.emit(Op.PAD, [lift.value_of(x)], {"pads": list(before) + after},
                             var.name)
    return None


#: The most pad-width splits :func:`_call_tir_pad` tries.
PAD_SPLITS = 256


def _avg_pool(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    x = lift.arg(call, 0)
    a, nsp = call.attrs, len(lift.shape(x)) - 2
    data = _CONV_LAYOUTS.get(nsp, (None,))[0]
    kernel, pads = ints(a.pool_size), begins_ends(a.padding, nsp)
    if (str(a.layout) != data or str(a.out_layout) not in ("", data) or bool(a.ceil_mode)
            or any(d != 1 for d in ints(a.dilation)) or pads is None
            or any(p >= k for p, k in zip(pads, kernel * 2))):
        return None
    return lift.emit(Op.AVGPOOL, [x], {"kernel": kernel, "strides": ints(a.strides),
                                       "pads": pads,
                                       "count_include_pad": bool(a.count_include_pad)}, var.name)


def _adaptive_avg_pool(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    """An adaptive average pool whose output sizes divide the input's is a plain average pool
    (kernel = stride = input / output); torch emits it for ``AdaptiveAvgPool2d``."""
    x = lift.arg(call, 0)
    a, shape = call.attrs, lift.shape(x)
    nsp = len(shape) - 2
    data = _CONV_LAYOUTS.get(nsp, (None,))[0]
    out = static_shape(var.ty, var.name)
    if (str(a.layout) != data or str(a.out_layout) not in ("", data)
            or any(i % o for i, o in zip(shape[2:], out[2:]))):
        return None
    kernel = tuple(i // o for i, o in zip(shape[2:], out[2:]))
    if all(k == 1 for k in kernel):
        return x
    return lift.emit(Op.AVGPOOL, [x], {"kernel": kernel, "strides": kernel, "pads": (0,) * 2 * nsp,
                                       "count_include_pad": False}, var.name)


def _same_shape(lift: _Lifter, call: relax.Call, var: relax.Var) -> Value | None:
    """broadcast_to its own shape, astype float32 to float32: the operand itself."""
    x = lift.arg(call, 0)
    return x if lift.shape(x) == static_shape(var.ty, var.name) else None


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


#: Operands that are integer indices, by Relax operator (every other operand of a recognised
#: call must be float32).
INDEX_OPERANDS: dict[str, tuple[int, ...]] = {"relax.take": (1,), "relax.call_tir": (0,)}

#: How each recognised Relax operator becomes tvm_pet ops. A rule returns None when an attribute
#: is outside what tvm_pet expresses; the call then stays opaque.
LIFT_RULES: dict[str, LiftRule] = {
    "relax.call_tir": _call_tir_pad,
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
    "relax.take": _take,
    "relax.nn.pad": _pad,
    "relax.nn.avg_pool1d": _avg_pool,
    "relax.nn.avg_pool2d": _avg_pool,
    "relax.nn.avg_pool3d": _avg_pool,
    "relax.mean": _mean,
    "relax.nn.adaptive_avg_pool1d": _adaptive_avg_pool,
    "relax.nn.adaptive_avg_pool2d": _adaptive_avg_pool,
    "relax.nn.adaptive_avg_pool3d": _adaptive_avg_pool,
    "relax.broadcast_to": _same_shape,
    "relax.astype": _same_shape,
    "relax.nn.batch_norm": _batch_norm,
}


# --------------------------------------------------------------- opaque operators tvm_pet can run
def _maxpool_params(call: relax.Call, shapes: list[Shape]) -> dict | None:
    a, nsp = call.attrs, len(shapes[0]) - 2
    pads = begins_ends(a.padding, nsp)
    if (str(a.layout) != _CONV_LAYOUTS.get(nsp, (None,))[0] or pads is None
            or any(d != 1 for d in ints(a.dilation)) or str(a.out_layout) not in ("", a.layout)):
        return None
    params = {"kernel_shape": ints(a.pool_size), "strides": ints(a.strides), "pads": pads}
    if not bool(a.ceil_mode):
        return params
    params["ceil_mode"] = 1  # torchvision's squeezenet1_1 and GoogLeNet pool so
    try:
        maxpool_ceil_pads(params, shapes[0][2:])
    except UnsupportedOperator:  # a window of padding only: stays under its Relax name
        return None
    return params


def _layernorm_params(call: relax.Call, shapes: list[Shape]) -> dict | None:
    a, rank = call.attrs, len(shapes[0])
    axes = sorted(int(d) % rank for d in a.axes)
    if not (bool(a.center) and bool(a.scale)) or not axes or axes != list(range(axes[0], rank)):
        return None
    return {"axis": axes[0], "epsilon": float(a.epsilon)}


def _clip_params(call: relax.Call, shapes: list[Shape]) -> dict | None:
    """relax.clip's bounds (PrimValues) as ONNX Clip's constant inputs (MobileNetV3's
    hard-swish and hard-sigmoid)."""
    bounds = [getattr(arg, "value", None) for arg in call.args[1:3]]  # FloatImm in TVM 0.27
    if not all(isinstance(b, (int, float)) for b in bounds):
        return None  # a bound computed at run time
    return {ONNX_INPUTS: (("tensor",), *(("const", "float32", (), (float(b),)) for b in bounds))}


def _where_params(call: relax.Call, shapes: list[Shape]) -> dict | None:
    """relax.where as ONNX Where when its condition and both values are program tensors, in
    that order (torch.onnx's ``Where(IsNaN(softmax), 0, softmax)`` after attention): a condition
    computed outside the program is not among the node's inputs, so it stays opaque."""
    return {} if len(shapes) == 3 else None


#: Operands that are boolean conditions, by Relax operator (every other operand of an evaluable
#: opaque call must be float32).
CONDITION_OPERANDS: dict[str, tuple[int, ...]] = {"relax.where": (0,)}


def _operands_fit(kind: str, call: relax.Call) -> bool:
    conditions = CONDITION_OPERANDS.get(kind, ())
    return all(str(getattr(a.ty, "dtype", "")) == "bool" if k in conditions else is_f32(a)
               for k, a in enumerate(call.args))


#: Relax operators lifted as OPAQUE nodes of an ONNX kind that tvm_pet's float evaluation knows
#: (see :data:`tvm_pet.ops.float_eval.OPAQUE_FLOAT`): ``(kind, params(call, input shapes))``;
#: params None keeps the Relax name as the kind.
EVALUABLE_OPAQUE: dict[str, tuple[str, Callable[[relax.Call, list[Shape]], dict | None]]] = {
    "relax.nn.relu": ("Relu", lambda c, s: {}),
    "relax.clip": ("Clip", _clip_params),
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
    "relax.isnan": ("IsNaN", lambda c, s: {}),
    "relax.where": ("Where", _where_params),
}


#: The TE operators a ``call_tir`` function is matched against (:func:`_call_tir_kind`), by the
#: ONNX kind it is lifted as.
CALL_TIR_KINDS = {"Max": "maximum", "Min": "minimum"}


def _call_tir_kind(call: relax.Call, module: tvm.IRModule | None) -> str | None:
    """The ONNX kind of a ``call_tir`` of a tensor and a float32 scalar whose function is,
    structure for structure, what ``te.create_prim_func`` makes of ``topi.maximum`` (or
    ``minimum``) of them: TVM's ONNX frontend emits ``Clip`` so (``emit_te``; MobileNetV2's
    ReLU6). None for any other ``call_tir``, or without the module holding its function."""
    called = _called_function(call, module, 2)
    if called is None:
        return None
    func, operands = called
    x, bound = (o.ty for o in operands)
    if not all(isinstance(t, relax.TensorType) and str(t.dtype) == "float32" for t in (x, bound)) \
            or not isinstance(x.shape, relax.ShapeExpr) or bound.ndim != 0:
        return None
    from tvm import te, topi
    for kind, name in CALL_TIR_KINDS.items():
        a = te.placeholder(list(x.shape.values), "float32", name="A")
        b = te.placeholder((), "float32", name="B")
        if _made_by_te(func, [a, b, getattr(topi, name)(a, b)]):
            return kind
    return None


def _called_function(call: relax.Call, module: tvm.IRModule | None, operands: int
                     ) -> tuple[tvm.tirx.PrimFunc, tuple[relax.Expr, ...]] | None:
    """The function of ``module`` a ``call_tir`` of ``operands`` tensors calls, with those
    operands; None for another call, or without the module holding its function."""
    if module is None or not isinstance(call.args[1], relax.Tuple):
        return None
    gv, fields = call.args[0], tuple(call.args[1].fields)
    if not isinstance(gv, tvm.ir.GlobalVar) or gv not in module.functions \
            or len(fields) != operands:
        return None
    return module[gv], fields


def _made_by_te(func: tvm.tirx.PrimFunc, tensors: list) -> bool:
    """True when ``func`` is, structure for structure, what ``te.create_prim_func`` makes of
    ``tensors`` (as ``BlockBuilder.emit_te`` makes it)."""
    import tvm_ffi
    from tvm import te
    made = te.create_prim_func(tensors, index_dtype_override="int64")
    return tvm_ffi.structural_equal(func, made.without_attr("global_symbol"), map_free_vars=True)


def _evaluable_kind(call: relax.Call, shapes: list[Shape],
                    module: tvm.IRModule | None = None) -> tuple[str, dict]:
    kind = call_kind(call)
    matched = _call_tir_kind(call, module) if kind.startswith("relax.call_tir(") else None
    if matched is not None:
        return matched, {}
    entry = EVALUABLE_OPAQUE.get(kind) if _operands_fit(kind, call) else None
    params = entry[1](call, shapes) if entry is not None else None
    return (kind, {}) if params is None else (entry[0], params)

