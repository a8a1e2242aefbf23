"""What tvm_pet writes around a lifted program as plain ONNX: what it keeps outside, and its
operators kept under their Relax names.

A model's program can start after bindings that read no tensor it computes
(:attr:`~tvm_pet.relax.lifted_function.Lifted.outside`): transformers' BERT looks its token ids
up in the embedding table and turns its attention mask into additive float32 values there. To
write the optimized model as ONNX that takes the model's own inputs, :func:`outside_prelude`
writes those bindings as ONNX nodes (a :class:`~tvm_pet.onnx.exporter.Prelude`) for
:func:`~tvm_pet.onnx.exporter.export_model` to put first, and the program's OPAQUE nodes that no
ONNX kind maps from their kept Relax calls. Bindings that read none of the model's inputs
(window indices, causal masks) are computed once with TVM and written as constants; every other
one is one ONNX node of the same meaning, or a small fixed group (:data:`ELEMENTWISE`,
:data:`WITH_ATTRIBUTES`); any other operator raises :class:`~tvm_pet.errors.UnsupportedOperator`
naming it, and the optimized model is then not written as ONNX (``optimize`` says why). What is
written is still checked: ``optimize`` keeps the file only when onnxruntime's outputs on it
match ``optimized.so``'s.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tvm
from tvm import relax

from tvm_pet.errors import UnsupportedOperator
from tvm_pet.ir.builder import unused_name
from tvm_pet.ir.node import Node, Program
from tvm_pet.ir.ops import Op
from tvm_pet.onnx.exporter import Prelude
from tvm_pet.io import quiet_native_stderr
from tvm_pet.relax.lifted_function import Lifted, OpaqueBinding, substitute
from tvm_pet.relax.relax_types import const_ints, ints, static_shape
from tvm_pet.tune.targets import resolve_target

#: Relax operators that are the ONNX operator of the same meaning on the same operands
#: (numpy broadcasting in both). ``divide`` is written for floats alone (:data:`WITH_ATTRIBUTES`).
ELEMENTWISE = {
    "relax.add": "Add", "relax.subtract": "Sub", "relax.multiply": "Mul",
    "relax.less": "Less", "relax.greater": "Greater", "relax.equal": "Equal",
    "relax.less_equal": "LessOrEqual", "relax.greater_equal": "GreaterOrEqual",
    "relax.where": "Where", "relax.logical_and": "And", "relax.logical_or": "Or",
    "relax.logical_not": "Not", "relax.isnan": "IsNaN", "relax.negative": "Neg",
    "relax.maximum": "Max", "relax.minimum": "Min", "relax.abs": "Abs", "relax.sqrt": "Sqrt",
    "relax.exp": "Exp", "relax.log": "Log", "relax.tanh": "Tanh", "relax.sigmoid": "Sigmoid",
    "relax.erf": "Erf", "relax.floor": "Floor", "relax.ceil": "Ceil", "relax.sin": "Sin",
    "relax.cos": "Cos", "relax.power": "Pow",
}


class _Writer:
    """The state of one prelude: the ONNX name of every Relax value, the nodes, the constants."""

    def __init__(self, taken: set[str], opset: int):
        self.taken = set(taken)
        self.opset = opset
        self.names: dict[int, str] = {}
        self.nodes: list[tuple[str, tuple[str, ...], tuple[str, ...], dict]] = []
        self.initializers: dict[str, np.ndarray] = {}

    def fresh(self, hint: str) -> str:
        return unused_name("".join(c if c.isalnum() or c in "_." else "_" for c in hint) or "t",
                           self.taken)

    def const(self, array: np.ndarray, hint: str = "outside_const") -> str:
        name = self.fresh(hint)
        self.initializers[name] = np.asarray(array)
        return name

    def operand(self, expr: relax.Expr) -> str:
        """The ONNX name of a Var, Constant or static shape operand."""
        if expr.__chandle__() in self.names:
            return self.names[expr.__chandle__()]
        if isinstance(expr, relax.Var):
            raise UnsupportedOperator(f"the value {expr} is computed where tvm_pet writes no "
                                      f"ONNX for it")
        if isinstance(expr, tvm.ir.expr.Constant) and isinstance(expr.ty, relax.TensorType):
            self.names[expr.__chandle__()] = self.const(expr.value.numpy())  # written once
            return self.names[expr.__chandle__()]
        if isinstance(expr, relax.ShapeExpr):
            return self.const(np.array(_static_ints(expr), np.int64), "outside_shape")
        raise UnsupportedOperator(f"tvm_pet writes no ONNX for the operand {type(expr).__name__}")

    def call(self, value: relax.Expr, what: str, out: str | None = None) -> str:
        """Emit the ONNX node of one Relax operator call (``what`` names it in errors); its
        output is named ``out`` (default: a fresh name)."""
        if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
            raise UnsupportedOperator(f"tvm_pet writes no ONNX for {what} "
                                      f"({type(value).__name__})")
        op = value.op.name
        if op in ELEMENTWISE:
            op_type, operands, attrs = ELEMENTWISE[op], list(value.args), {}
        elif op in WITH_ATTRIBUTES:
            op_type, operands, attrs = WITH_ATTRIBUTES[op](self, value)
        else:
            raise UnsupportedOperator(f"tvm_pet writes no ONNX for {op}, which computes {what}")
        return self.node(op_type, operands, attrs, out=out)

    def node(self, op_type: str, operands: Sequence, attrs: dict, hint: str = "outside",
             out: str | None = None) -> str:
        """Emit one node; its operands are Relax values, ONNX names or numpy constants."""
        out = out or self.fresh(hint)
        inputs = tuple(a if isinstance(a, str) else self.operand(a)
                       if isinstance(a, relax.Expr) else self.const(a) for a in operands)
        self.nodes.append((op_type, inputs, (out,), attrs))
        return out

    def binding(self, binding: relax.Binding) -> None:
        """A binding kept outside the program."""
        what = f"{binding.var}, outside the program"
        if not isinstance(binding, relax.VarBinding):
            raise UnsupportedOperator(f"tvm_pet writes no ONNX for {what} (a match_cast)")
        name = self.call(binding.value, what, self.fresh(str(binding.var)))
        self.names[binding.var.__chandle__()] = name

    def opaque(self, node: Node, kept: OpaqueBinding | None) -> tuple:
        """The ONNX nodes of an OPAQUE node kept under its Relax name, from its kept call, its
        operands the node's inputs."""
        if kept is None or not kept.fits(node) or len(node.outputs) != 1:
            raise UnsupportedOperator(f"tvm_pet writes no ONNX for `{node.describe()}`")
        inputs = iter(node.inputs)
        for leaf, tree in kept.leaves:
            if not isinstance(tree, str):
                raise UnsupportedOperator(f"tvm_pet writes no ONNX for `{node.describe()}` "
                                          f"(a tuple operand)")
            self.names[leaf.__chandle__()] = next(inputs)
        start = len(self.nodes)
        self.call(kept.expr, f"`{node.describe()}`", node.outputs[0])
        return tuple(self.nodes[start:])


def outside_prelude(lifted: Lifted, program: Program, opset: int = 17) -> Prelude | None:
    """What ``program`` (lifted from ``lifted``, or a mutant of it) needs written around it as
    plain ONNX: the bindings ``lifted`` keeps outside it, ahead of it, and the nodes of its
    OPAQUE nodes kept under their Relax names (no ONNX kind maps them; torch.export's attention
    guards: ``equal``, ``logical_not``, ``astype``, ``max``), written for ``opset``. None when
    there is neither.

    Raises:
        UnsupportedOperator: a binding, operator, operand or parameter tvm_pet writes no ONNX
            for.
        ShapeError: a parameter without a static shape.
    """
    relax_named = [n for n in program.nodes
                   if n.op is Op.OPAQUE and n.attrs["kind"].startswith("relax.")]
    if not lifted.outside and not lifted.outside_inputs and not relax_named \
            and all(name is not None for name in lifted.input_names):
        return None
    w = _Writer(set(program.shapes) | set(program.weights), opset)
    inputs = []
    for var, name in zip(lifted.params, lifted.input_names):
        if not isinstance(var.ty, relax.TensorType):
            raise UnsupportedOperator(f"the parameter {var} is not a tensor ({var.ty}); ONNX "
                                      f"inputs are tensors")
        shape = static_shape(var.ty, f"the parameter {var}")
        name = name if name is not None else w.fresh(str(var))
        w.names[var.__chandle__()] = name
        inputs.append((name, np.dtype(str(var.ty.dtype)), shape))
    w.names.update({handle: w.const(value) for handle, value in _constants(lifted).items()})
    for binding in lifted.outside:
        if binding.var.__chandle__() not in w.names:
            w.binding(binding)
    for name, expr in lifted.outside_inputs.items():
        w.nodes.append(("Identity", (w.operand(expr),), (name,), {}))
    ahead = len(w.nodes)
    opaque = {n.outputs[0]: w.opaque(n, lifted.opaque.get(n.outputs[0])) for n in relax_named}
    return Prelude(tuple(inputs), tuple(w.nodes[:ahead]), w.initializers, opaque, opset)


def _constants(lifted: Lifted) -> dict[int, np.ndarray]:
    """The value of every outside tensor binding that reads none of the function's parameters
    (swin_t's window indices: ``arange``, ``add``, ``mod``; a causal mask), by its Var's
    handle: computed once with TVM on this CPU, so that any operator can be written as the
    constant it is. ``{}`` when there is none, or when TVM cannot compute them (each is then
    written as its operator)."""
    dependent = {p.__chandle__() for p in lifted.params}
    fixed = []
    for b in lifted.outside:
        reads = {v.__chandle__() for v in relax.analysis.free_vars(b.value)}
        if isinstance(b, relax.VarBinding) and isinstance(b.var.ty, relax.TensorType) \
                and not reads & dependent:
            fixed.append(b)
        else:
            dependent.add(b.var.__chandle__())
    if not fixed:
        return {}
    bb, renamed = relax.BlockBuilder(), {}
    with bb.function("main", []):
        with bb.dataflow():
            for b in fixed:
                renamed[b.var.__chandle__()] = bb.emit(substitute(b.value, renamed))
            out = bb.emit_output(relax.Tuple([renamed[b.var.__chandle__()] for b in fixed]))
        bb.emit_func_output(out)
    try:
        with quiet_native_stderr():
            executable = tvm.compile(bb.finalize(), target=resolve_target("llvm"))
        values = relax.VirtualMachine(executable, tvm.cpu())["main"]()
    except Exception:  # TVM's own error types: leave them to their ONNX operators
        return {}
    return {b.var.__chandle__(): v.numpy() for b, v in zip(fixed, values)}


def _static_ints(expr: relax.Expr) -> tuple[int, ...]:
    """The integers of a constant Tuple or ShapeExpr operand (a shape, slice bounds)."""
    values = const_ints(expr)
    if values is None:
        raise UnsupportedOperator(f"{expr} is not a constant tuple of integers; tvm_pet writes "
                                  f"static shapes and bounds")
    return values


Rule = Callable[[_Writer, relax.Call], tuple[str, list, dict]]


def _take(w: _Writer, call: relax.Call) -> tuple[str, list, dict]:
    # In bounds, TVM's fast take and ONNX's Gather read the same; out of bounds the first is
    # undefined. Other modes clip or wrap where Gather fails, so they are not written.
    if call.attrs.axis is None or str(call.attrs.mode) != "fast":
        raise UnsupportedOperator(f"tvm_pet writes ONNX Gather only for a take along one axis in "
                                  f"fast mode, not {call}")
    return "Gather", list(call.args), {"axis": int(call.attrs.axis)}


def _strided_slice(w: _Writer, call: relax.Call) -> tuple[str, list, dict]:
    # numpy's slicing in both: ends past the extent clamp, negative indices count from the end
    data, axes, begin, end, *strides = call.args
    return "Slice", [data, *(np.array(_static_ints(t), np.int64)
                             for t in (begin, end, axes, *strides))], {}


def _permute_dims(w: _Writer, call: relax.Call) -> tuple[str, list, dict]:
    rank = len(call.args[0].ty.shape)
    axes = call.attrs.axes
    return "Transpose", list(call.args), {
        "perm": list(range(rank))[::-1] if axes is None else list(ints(axes))}


def _axes(op_type: str) -> Rule:
    def rule(w: _Writer, call: relax.Call) -> tuple[str, list, dict]:
        axes = call.attrs.axis
        if axes is None:
            return op_type, [call.args[0]], {}
        return op_type, [call.args[0], np.array(ints(axes), np.int64)], {}
    return rule


def _operands_of(op_type: str, what: str, fits: Callable[[str], bool]) -> Rule:
    """``op_type`` on the same operands, when every operand's dtype ``fits`` (``what`` names
    them in the refusal)."""
    def rule(w: _Writer, call: relax.Call) -> tuple[str, list, dict]:
        if not all(fits(str(a.ty.dtype)) for a in call.args):
            raise UnsupportedOperator(f"tvm_pet writes {op_type} only for {what}, not {call}")
        return op_type, list(call.args), {}
    return rule


def _index_tensor(w: _Writer, call: relax.Call) -> tuple[str, list, dict]:
    """``data[i0, i1, ...]`` (numpy's indexing by broadcast integer tensors) as ``GatherND`` of
    the indices broadcast to one shape and stacked on a last axis."""
    data, indices = call.args
    if not isinstance(indices, relax.Tuple):
        raise UnsupportedOperator(f"tvm_pet writes GatherND only for a tuple of indices: {call}")
    shapes = [static_shape(i.ty, "an index") for i in indices.fields]
    shape = np.array(np.broadcast_shapes(*shapes), np.int64)
    stacked = []
    for index in indices.fields:
        name = w.operand(index)
        if str(index.ty.dtype) != "int64":
            name = w.node("Cast", [name], {"to": np.dtype(np.int64)})
        name = w.node("Expand", [name, shape], {})
        stacked.append(w.node("Unsqueeze", [name, np.array([-1], np.int64)], {}))
    return "GatherND", [data, w.node("Concat", stacked, {"axis": -1})], {}


def _reduce(op_type: str) -> Rule:
    # ONNX's ReduceMax and ReduceMin take their axes as an attribute up to opset 17, as an
    # input from 18
    def rule(w: _Writer, call: relax.Call) -> tuple[str, list, dict]:
        axes = None if call.attrs.axis is None else list(ints(call.attrs.axis))
        attrs = {"keepdims": int(bool(call.attrs.keepdims))}
        if axes is None:
            return op_type, [call.args[0]], attrs
        if w.opset >= 18:
            return op_type, [call.args[0], np.array(axes, np.int64)], attrs
        return op_type, [call.args[0]], {**attrs, "axes": axes}
    return rule


def _not_equal(w: _Writer, call: relax.Call) -> tuple[str, list, dict]:
    return "Not", [w.node("Equal", list(call.args), {})], {}


def _concat(w: _Writer, call: relax.Call) -> tuple[str, list, dict]:
    (parts,) = call.args
    if not isinstance(parts, relax.Tuple) or call.attrs.axis is None:
        raise UnsupportedOperator(f"tvm_pet writes ONNX Concat only for a tuple along one axis, "
                                  f"not {call}")
    return "Concat", list(parts.fields), {"axis": int(call.attrs.axis)}


def _rsqrt(w: _Writer, call: relax.Call) -> tuple[str, list, dict]:
    return "Reciprocal", [w.node("Sqrt", list(call.args), {})], {}


#: Relax operators written as ONNX with attributes, extra operands or helper nodes.
WITH_ATTRIBUTES: dict[str, Rule] = {
    "relax.astype": lambda w, c: ("Cast", [c.args[0]], {"to": np.dtype(str(c.attrs.dtype))}),
    "relax.reshape": lambda w, c: ("Reshape", list(c.args), {}),
    "relax.broadcast_to": lambda w, c: ("Expand", list(c.args), {}),
    "relax.take": _take,
    "relax.permute_dims": _permute_dims,
    "relax.strided_slice": _strided_slice,
    "relax.expand_dims": _axes("Unsqueeze"),
    "relax.squeeze": _axes("Squeeze"),
    # bitwise and/or of booleans is the logical one (of integers it needs opset 18)
    "relax.bitwise_and": _operands_of("And", "booleans", lambda dtype: dtype == "bool"),
    "relax.bitwise_or": _operands_of("Or", "booleans", lambda dtype: dtype == "bool"),
    "relax.index_tensor": _index_tensor,
    # integer division rounds by each framework's own rule: written for floats only
    "relax.divide": _operands_of("Div", "floats", lambda dtype: dtype.startswith("float")),
    "relax.not_equal": _not_equal,
    "relax.rsqrt": _rsqrt,
    "relax.concat": _concat,
    "relax.max": _reduce("ReduceMax"),
    "relax.min": _reduce("ReduceMin"),
}
