"""What tvm_pet keeps outside a lifted program, written as ONNX nodes ahead of it.

A model's program can start after bindings that read no tensor it computes
(:attr:`~tvm_pet.relax.lifted_function.Lifted.outside`): transformers' BERT looks its token ids
up in the embedding table and turns its attention mask into additive float32 values there. To
write the optimized model as ONNX that takes the model's own inputs, :func:`outside_prelude`
writes those bindings as ONNX nodes (a :class:`~tvm_pet.onnx.exporter.Prelude`) for
:func:`~tvm_pet.onnx.exporter.export_model` to put first. Each binding is one ONNX node of the
same meaning (:data:`ELEMENTWISE`, :data:`WITH_ATTRIBUTES`); any other raises
:class:`~tvm_pet.errors.UnsupportedOperator` naming it, and the optimized model is then not
written as ONNX (``optimize`` says why). What is written is still checked: ``optimize`` keeps the
file only when onnxruntime's outputs on it match ``optimized.so``'s.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tvm
from tvm import relax

from tvm_pet.errors import UnsupportedOperator
from tvm_pet.ir.node import Program
from tvm_pet.onnx.exporter import Prelude
from tvm_pet.relax.lifted_function import Lifted
from tvm_pet.relax.relax_types import static_shape

#: Relax operators that are the ONNX operator of the same meaning on the same operands
#: (numpy broadcasting in both). ``divide`` is left out: on integers the two round differently.
ELEMENTWISE = {
    "relax.add": "Add", "relax.subtract": "Sub", "relax.multiply": "Mul",
    "relax.less": "Less", "relax.greater": "Greater", "relax.equal": "Equal",
    "relax.less_equal": "LessOrEqual", "relax.greater_equal": "GreaterOrEqual",
    "relax.where": "Where", "relax.logical_and": "And", "relax.logical_or": "Or",
    "relax.logical_not": "Not", "relax.isnan": "IsNaN", "relax.negative": "Neg",
}


class _Writer:
    """The state of one prelude: the ONNX name of every Relax value, the nodes, the constants."""

    def __init__(self, taken: set[str]):
        self.taken = set(taken)
        self.names: dict[int, str] = {}
        self.nodes: list[tuple[str, tuple[str, ...], tuple[str, ...], dict]] = []
        self.initializers: dict[str, np.ndarray] = {}

    def fresh(self, hint: str) -> str:
        hint = "".join(c if c.isalnum() or c in "_." else "_" for c in hint) or "t"
        name, k = hint, 0
        while name in self.taken:
            k += 1
            name = f"{hint}_{k}"
        self.taken.add(name)
        return name

    def const(self, array: np.ndarray, hint: str = "outside_const") -> str:
        name = self.fresh(hint)
        self.initializers[name] = np.asarray(array)
        return name

    def operand(self, expr: relax.Expr) -> str:
        """The ONNX name of a Var, Constant or static shape operand."""
        if isinstance(expr, relax.Var):
            if expr.__chandle__() not in self.names:
                raise UnsupportedOperator(f"the value {expr} is computed where tvm_pet writes no "
                                          f"ONNX for it")
            return self.names[expr.__chandle__()]
        if isinstance(expr, tvm.ir.expr.Constant) and isinstance(expr.ty, relax.TensorType):
            return self.const(expr.value.numpy())
        if isinstance(expr, relax.ShapeExpr):
            return self.const(np.array(_ints(expr.values), np.int64), "outside_shape")
        raise UnsupportedOperator(f"tvm_pet writes no ONNX for the operand {type(expr).__name__}")

    def binding(self, binding: relax.Binding) -> None:
        value = binding.value
        if not isinstance(binding, relax.VarBinding) or not isinstance(value, relax.Call) \
                or not isinstance(value.op, tvm.ir.Op):
            raise UnsupportedOperator(f"tvm_pet writes no ONNX for the binding {binding.var} "
                                      f"kept outside its program ({type(value).__name__})")
        op = value.op.name
        if op in ELEMENTWISE:
            op_type, operands, attrs = ELEMENTWISE[op], list(value.args), {}
        elif op in WITH_ATTRIBUTES:
            op_type, operands, attrs = WITH_ATTRIBUTES[op](value)
        else:
            raise UnsupportedOperator(f"tvm_pet writes no ONNX for {op}, which computes "
                                      f"{binding.var} outside its program")
        out = self.fresh(str(binding.var))
        inputs = tuple(self.operand(a) if isinstance(a, relax.Expr) else self.const(a)
                       for a in operands)
        self.nodes.append((op_type, inputs, (out,), attrs))
        self.names[binding.var.__chandle__()] = out


def outside_prelude(lifted: Lifted, program: Program) -> Prelude | None:
    """The bindings ``lifted`` keeps outside its program as ONNX nodes ahead of ``program`` (a
    program lifted from it, or a mutant of one); None when the program's inputs are the
    function's parameters, so there is nothing to put first.

    Raises:
        UnsupportedOperator: a binding, operand or parameter tvm_pet writes no ONNX for.
        ShapeError: a parameter without a static shape.
    """
    if not lifted.outside and not lifted.outside_inputs \
            and all(name is not None for name in lifted.input_names):
        return None
    w = _Writer(set(program.shapes) | set(program.weights))
    inputs = []
    for var, name in zip(lifted.params, lifted.input_names):
        if not isinstance(var.ty, relax.TensorType):
            raise UnsupportedOperator(f"the parameter {var} is not a tensor ({var.ty}); ONNX "
                                      f"inputs are tensors")
        shape = static_shape(var.ty, f"the parameter {var}")
        name = name if name is not None else w.fresh(str(var))
        w.names[var.__chandle__()] = name
        inputs.append((name, np.dtype(str(var.ty.dtype)), shape))
    for binding in lifted.outside:
        w.binding(binding)
    for name, expr in lifted.outside_inputs.items():
        w.nodes.append(("Identity", (w.operand(expr),), (name,), {}))
    return Prelude(tuple(inputs), tuple(w.nodes), w.initializers)


def _ints(values: Sequence) -> list[int]:
    try:
        return [int(v) for v in values]
    except TypeError:
        raise UnsupportedOperator(f"the shape {list(values)} is symbolic; tvm_pet writes "
                                  f"static shapes") from None


Rule = Callable[[relax.Call], tuple[str, list, dict]]


def _take(call: relax.Call) -> tuple[str, list, dict]:
    # In bounds, TVM's fast take and ONNX's Gather read the same; out of bounds the first is
    # undefined. Other modes clip or wrap where Gather fails, so they are not written.
    if call.attrs.axis is None or str(call.attrs.mode) != "fast":
        raise UnsupportedOperator(f"tvm_pet writes ONNX Gather only for a take along one axis in "
                                  f"fast mode, not {call}")
    return "Gather", list(call.args), {"axis": int(call.attrs.axis)}


def _strided_slice(call: relax.Call) -> tuple[str, list, dict]:
    # numpy's slicing in both: ends past the extent clamp, negative indices count from the end
    data, axes, begin, end, *strides = call.args
    return "Slice", [data, *(np.array(_tuple_ints(t), np.int64)
                             for t in (begin, end, axes, *strides))], {}


def _tuple_ints(expr: relax.Expr) -> list[int]:
    if isinstance(expr, relax.Tuple):  # of integer immediates
        return _ints([getattr(f, "value", f) for f in expr.fields])
    if isinstance(expr, relax.ShapeExpr):
        return _ints(expr.values)
    raise UnsupportedOperator(f"tvm_pet writes ONNX Slice only for constant bounds, not {expr}")


def _permute_dims(call: relax.Call) -> tuple[str, list, dict]:
    rank = len(call.args[0].ty.shape)
    axes = call.attrs.axes
    return "Transpose", list(call.args), {
        "perm": list(range(rank))[::-1] if axes is None else _ints(axes)}


def _axes(op_type: str) -> Rule:
    def rule(call: relax.Call) -> tuple[str, list, dict]:
        axes = call.attrs.axis
        if axes is None:
            return op_type, [call.args[0]], {}
        return op_type, [call.args[0], np.array(_ints(axes), np.int64)], {}
    return rule


#: Relax operators written as one ONNX operator with attributes or extra operands.
WITH_ATTRIBUTES: dict[str, Rule] = {
    "relax.astype": lambda c: ("Cast", [c.args[0]], {"to": np.dtype(str(c.attrs.dtype))}),
    "relax.reshape": lambda c: ("Reshape", list(c.args), {}),
    "relax.broadcast_to": lambda c: ("Expand", list(c.args), {}),
    "relax.take": _take,
    "relax.permute_dims": _permute_dims,
    "relax.strided_slice": _strided_slice,
    "relax.expand_dims": _axes("Unsqueeze"),
    "relax.squeeze": _axes("Squeeze"),
}
