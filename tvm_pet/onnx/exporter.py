"""Export a tvm_pet :class:`~tvm_pet.ir.Program` as an ONNX model.

Where it sits: the back door of the pipeline, the inverse of :mod:`tvm_pet.onnx.importer`. It is
used to run an optimized program in onnxruntime or to hand it to another tool.

Each IR node becomes one ONNX node, or a small fixed group (:data:`EXPORT_RULES`): BATCHNORM is a
Mul and an Add of reshaped per-channel vectors, RESHAPE_TRANSPOSE is Reshape, Transpose, Reshape,
and UPDATE is a ScatterND whose constant indices list the positions of the strided box. Weights
become float32 initializers; shape operands become int64 initializers.

A model whose program starts after what tvm_pet keeps outside it (token ids, masks: a
:class:`Prelude`, :mod:`tvm_pet.relax.onnx_outside`) is written with those nodes first, so that
the exported model takes the model's own inputs.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tvm_pet.errors import ModelError, UnsupportedOperator
from tvm_pet.ir.node import Node, Program
from tvm_pet.ir.ops import Op, onnx_operands
from tvm_pet.onnx.importer import FILL_TAG, ONNX_DOMAIN, ONNX_INPUTS, SUPPORTED_OPSETS


@dataclasses.dataclass(frozen=True)
class Prelude:
    """ONNX nodes ahead of a program, that compute its inputs from the model's own.

    Attributes:
        inputs: the model's inputs, in order: ``(name, numpy dtype, shape)`` each.
        nodes: ``(op_type, inputs, outputs, attributes)`` each, in order; an attribute that is
            a numpy dtype is written as ONNX's tensor type (``Cast``'s ``to``). Their outputs
            include every program input that is not a model input.
        initializers: constant tensors by name.
        opaque: the nodes that compute each OPAQUE node kept under its Relax name (no ONNX kind
            maps it), by the node's output, in the same form as ``nodes``.
        opset: the default-domain opset the nodes are written for (a reduction's axes are an
            attribute up to 17, an input from 18).
    """

    inputs: tuple[tuple[str, np.dtype, tuple[int, ...]], ...]
    nodes: tuple[tuple[str, tuple[str, ...], tuple[str, ...], Mapping], ...]
    initializers: Mapping[str, np.ndarray]
    opaque: Mapping[str, tuple[tuple[str, tuple[str, ...], tuple[str, ...], Mapping], ...]] = \
        dataclasses.field(default_factory=dict)
    opset: int = 17


def export_model(program: Program, opset: int = 17,
                 prelude: Prelude | None = None) -> onnx.ModelProto:
    """Write a program as an ONNX model with float32 inputs, outputs and initializers.

    Args:
        program: the program; OPAQUE nodes must have a ``kind`` that is an ONNX operator.
        opset: the default-domain opset of the model (13 to 21).
        prelude: nodes that come first and the model inputs they read, where the program's
            inputs are computed from the model's (None: the program's inputs are the model's).

    Returns:
        The model; it passes ``onnx.checker.check_model(model, full_check=True)``.

    Raises:
        ModelError: an unsupported opset.
        UnsupportedOperator: an OPAQUE kind that the opset does not define.

    >>> from tvm_pet.ir import ProgramBuilder
    >>> b = ProgramBuilder(); x = b.input("x", (2, 3)); y = b.add(x, x, out="y")
    >>> [n.op_type for n in export_model(b.build([y])).graph.node]
    ['Add']
    """
    if opset not in SUPPORTED_OPSETS:
        raise ModelError(f"cannot export with opset {opset}; tvm_pet writes opsets "
                         f"{SUPPORTED_OPSETS.start}-{SUPPORTED_OPSETS.stop - 1}")
    if prelude is not None and opset != prelude.opset:
        raise ModelError(f"cannot export with opset {opset}: what tvm_pet writes around the "
                         f"program is written for opset {prelude.opset}")
    return _Exporter(program, opset, prelude).run()


def lowest_opset(program: Program, at_least: int = 17) -> int:
    """The lowest default-domain opset from ``at_least`` that defines every ONNX operator kind
    of the program's OPAQUE nodes (``Gelu`` needs 20); ``at_least`` when none does.

    >>> from tvm_pet.ir import ProgramBuilder
    >>> b = ProgramBuilder(); x = b.input("x", (2, 3)); (y,) = b.opaque("Gelu", [x])
    >>> lowest_opset(b.build([y]))
    20
    """
    kinds = {n.attrs["kind"] for n in program.nodes if n.op is Op.OPAQUE
             and not n.attrs["kind"].startswith("relax.")
             and not dict(n.attrs["params"]).get(ONNX_DOMAIN)}
    for opset in range(at_least, SUPPORTED_OPSETS.stop):
        if all(onnx.defs.has(kind, opset) for kind in kinds):
            return opset
    return at_least


def input_signature(model: onnx.ModelProto) -> list[tuple[tuple[int, ...], str]]:
    """``(shape, numpy dtype name)`` of each graph input of ``model`` that is not an
    initializer, in order.

    >>> from tvm_pet.ir import ProgramBuilder
    >>> b = ProgramBuilder(); x = b.input("x", (2, 3)); y = b.add(x, x, out="y")
    >>> input_signature(export_model(b.build([y])))
    [((2, 3), 'float32')]
    """
    inits = {i.name for i in model.graph.initializer}
    return [(tuple(d.dim_value for d in i.type.tensor_type.shape.dim),
             str(helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)))
            for i in model.graph.input if i.name not in inits]


def save_model(program: Program, path: str | os.PathLike, opset: int = 17) -> None:
    """Export a program (see :func:`export_model`) and write it to ``path``.

    Args:
        program: the program.
        path: the ``.onnx`` file to write.
        opset: the default-domain opset.
    """
    onnx.save(export_model(program, opset), os.fspath(path))


def model_names(model: onnx.ModelProto, inputs: Sequence[str],
                outputs: Sequence[str]) -> dict[str, str]:
    """The names ``model`` gives the tensors that a program imported from it calls ``inputs``
    and ``outputs``: its graph inputs (initializers aside) and its graph outputs, position by
    position. A side whose count differs from the program's gets none; a tensor the model names
    as the program does is left out.

    >>> from onnx import TensorProto
    >>> v = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1])  # noqa: E731
    >>> relu = helper.make_node("Relu", ["input.1"], ["output"])
    >>> m = helper.make_model(helper.make_graph([relu], "g", [v("input.1")], [v("output")]))
    >>> model_names(m, ["input_1"], ["gv"])
    {'input_1': 'input.1', 'gv': 'output'}
    """
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    given = [i.name for i in graph.input if i.name not in inits]
    names: dict[str, str] = {}
    for ours, theirs in ((list(inputs), given), (list(outputs), [o.name for o in graph.output])):
        if len(ours) == len(theirs):
            names |= {a: b for a, b in zip(ours, theirs) if a != b and b}
    return names


def rename_tensors(model: onnx.ModelProto, names: Mapping[str, str]) -> onnx.ModelProto:
    """A copy of ``model`` with each tensor ``names`` maps renamed wherever it appears (graph
    inputs and outputs, nodes, initializers, value infos). A rename is left out where its new
    name is another tensor's that keeps its name, or another rename's.

    >>> from tvm_pet.ir import ProgramBuilder
    >>> b = ProgramBuilder(); x = b.input("x", (2, 3)); y = b.add(x, x, out="y")
    >>> renamed = rename_tensors(export_model(b.build([y])), {"x": "input.1", "y": "x"})
    >>> [i.name for i in renamed.graph.input], [o.name for o in renamed.graph.output]
    (['input.1'], ['x'])
    """
    graph = model.graph
    used = ({i.name for i in graph.input} | {o.name for o in graph.output}
            | {i.name for i in graph.initializer} | {v.name for v in graph.value_info}
            | {t for n in graph.node for t in (*n.input, *n.output)})
    renamed = {old: new for old, new in names.items() if old in used}
    kept = used - set(renamed)
    chosen: dict[str, str] = {}
    for old, new in renamed.items():
        if new not in kept and new not in chosen.values():
            chosen[old] = new
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    for value in (*g.input, *g.output, *g.value_info, *g.initializer):
        value.name = chosen.get(value.name, value.name)
    for node in g.node:
        node.input[:] = [chosen.get(t, t) for t in node.input]
        node.output[:] = [chosen.get(t, t) for t in node.output]
    return out


class _Exporter:
    """The state of one export: emitted ONNX nodes, initializers and extra opset imports."""

    def __init__(self, program: Program, opset: int, prelude: Prelude | None = None):
        self.program = program
        self.opset = opset
        self.prelude = prelude
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, np.ndarray] = dict(program.weights)
        self.domains: dict[str, int] = {}
        self._count = 0
        #: Names the prelude uses, that a new tensor must not take.
        self._taken: set[str] = set()
        if prelude is not None:
            self.initializers.update(prelude.initializers)
            self._taken = {name for node in prelude.nodes for name in node[2]}
            self._taken |= {name for group in prelude.opaque.values() for node in group
                            for name in node[2]}
            self._taken |= {name for name, _, _ in prelude.inputs}

    def fresh(self, hint: str) -> str:
        """A tensor name the program does not use."""
        while True:
            self._count += 1
            name = f"{hint}_{self._count}"
            if name not in self.program.shapes and name not in self.initializers \
                    and name not in self._taken:
                return name

    def const(self, hint: str, value: np.ndarray) -> str:
        """A new initializer; returns its name."""
        name = self.fresh(hint)
        self.initializers[name] = np.asarray(value)
        return name

    def ints(self, hint: str, values: Sequence[int]) -> str:
        """A new int64 vector initializer (a shape, a pads or split-sizes operand)."""
        return self.const(hint, np.array(list(values), np.int64))

    def add(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], domain: str = "",
            **attrs) -> None:
        """Emit one ONNX node."""
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs),
                                           name=f"{op_type}_{len(self.nodes)}", domain=domain,
                                           **attrs))

    def add_plain(self, nodes: Sequence[tuple]) -> None:
        """Emit ``(op_type, inputs, outputs, attributes)`` nodes (a :class:`Prelude`'s)."""
        for op_type, operands, outputs, attrs in nodes:
            self.add(op_type, operands, outputs, **{
                k: helper.np_dtype_to_tensor_dtype(v) if isinstance(v, np.dtype) else v
                for k, v in attrs.items()})

    def run(self) -> onnx.ModelProto:
        """Emit every node and assemble the model."""
        p = self.program
        inputs = [(t.name, np.dtype(np.float32), t.shape) for t in p.inputs]
        if self.prelude is not None:
            inputs = list(self.prelude.inputs)
            self.add_plain(self.prelude.nodes)
        for node in p.nodes:
            EXPORT_RULES[node.op](self, node)
        used = {i for n in self.nodes for i in n.input} | set(p.outputs)
        inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in self.initializers.items()
                 if k in used]
        value = lambda name, dtype, shape: helper.make_tensor_value_info(  # noqa: E731
            name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(shape))
        graph = helper.make_graph(self.nodes, p.name, [value(*spec) for spec in inputs],
                                  [value(o, np.float32, p.shapes[o]) for o in p.outputs], inits)
        opsets = [helper.make_opsetid("", self.opset)]
        opsets += [helper.make_opsetid(d, v) for d, v in self.domains.items()]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="tvm_pet")
        model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
        return model


ExportRule = Callable[[_Exporter, Node], None]


def _simple(op_type: str, keys: Sequence[tuple[str, str]] = ()) -> ExportRule:
    """A rule for a one-to-one operator whose attributes only change names (IR key, ONNX key)."""
    def rule(ex: _Exporter, node: Node) -> None:
        ex.add(op_type, node.inputs, node.outputs,
               **{onnx_key: node.attrs[key] for key, onnx_key in keys})
    return rule


def _conv(ex: _Exporter, node: Node) -> None:
    a = node.attrs
    kernel = list(ex.program.shapes[node.inputs[1]][2:])
    ex.add("Conv", node.inputs, node.outputs, kernel_shape=kernel, strides=list(a["strides"]),
           pads=list(a["pads"]), dilations=list(a["dilations"]), group=a["groups"])


def _avgpool(ex: _Exporter, node: Node) -> None:
    a = node.attrs
    ex.add("AveragePool", node.inputs, node.outputs, kernel_shape=list(a["kernel"]),
           strides=list(a["strides"]), pads=list(a["pads"]),
           count_include_pad=int(a["count_include_pad"]))


def _channel_vector(ex: _Exporter, name: str, rank: int) -> str:
    """A per-channel vector [C] reshaped to [C, 1, ...] so that it broadcasts over axis 1."""
    shape = ex.program.shapes[name] + (1,) * (rank - 2)
    if name in ex.program.weights:
        return ex.const(name, ex.program.weights[name].reshape(shape))
    out = ex.fresh(name)
    ex.add("Reshape", [name, ex.ints("shape", shape)], [out])
    return out


def _batchnorm(ex: _Exporter, node: Node) -> None:
    x, scale, shift = node.inputs
    rank = len(ex.program.shapes[x])
    scaled = ex.fresh(node.output)
    ex.add("Mul", [x, _channel_vector(ex, scale, rank)], [scaled])
    ex.add("Add", [scaled, _channel_vector(ex, shift, rank)], node.outputs)


def _split(ex: _Exporter, node: Node) -> None:
    ex.add("Split", [node.inputs[0], ex.ints("split", node.attrs["sizes"])], node.outputs,
           axis=node.attrs["axis"])


def _slice(ex: _Exporter, node: Node) -> None:
    a = node.attrs
    ends = [b + (k - 1) * s + 1 for b, s, k in zip(a["starts"], a["steps"], a["sizes"])]
    operands = [ex.ints("starts", a["starts"]), ex.ints("ends", ends),
                ex.ints("axes", range(len(ends))), ex.ints("steps", a["steps"])]
    ex.add("Slice", [node.inputs[0], *operands], node.outputs)


def _pad(ex: _Exporter, node: Node) -> None:
    ex.add("Pad", [node.inputs[0], ex.ints("pads", node.attrs["pads"])], node.outputs,
           mode="constant")


def _reshape(ex: _Exporter, node: Node) -> None:
    ex.add("Reshape", [node.inputs[0], ex.ints("shape", node.attrs["shape"])], node.outputs)


def _reshape_transpose(ex: _Exporter, node: Node) -> None:
    a = node.attrs
    split, moved = ex.fresh(node.output), ex.fresh(node.output)
    ex.add("Reshape", [node.inputs[0], ex.ints("shape", a["split_shape"])], [split])
    ex.add("Transpose", [split], [moved], perm=list(a["perm"]))
    ex.add("Reshape", [moved, ex.ints("shape", a["shape"])], node.outputs)


def _update(ex: _Exporter, node: Node) -> None:
    """UPDATE as ScatterND: indices [*patch_shape, rank] hold the box position of each element."""
    base, patch = node.inputs
    patch_shape = ex.program.shapes[patch]
    grid = np.moveaxis(np.indices(patch_shape, dtype=np.int64), 0, -1)
    steps, starts = (np.array(node.attrs[k], np.int64) for k in ("steps", "starts"))
    indices = grid * steps + starts
    ex.add("ScatterND", [base, ex.const("indices", indices), patch], node.outputs)


def _fill(ex: _Exporter, node: Node) -> None:
    """FILL as a float32 Constant tensor (imported back, it becomes a weight of the same values)."""
    num, den = node.attrs["value"]
    value = np.full(node.attrs["shape"], num / den, np.float32)
    ex.add("Constant", [], node.outputs, value=numpy_helper.from_array(value))
    ex.nodes[-1].doc_string = f"{FILL_TAG}{num}/{den}"


def _opaque(ex: _Exporter, node: Node) -> None:
    if ex.prelude is not None and node.outputs[0] in ex.prelude.opaque:
        ex.add_plain(ex.prelude.opaque[node.outputs[0]])  # written from its kept Relax call
        return
    kind, params = node.attrs["kind"], dict(node.attrs["params"])
    layout = params.pop(ONNX_INPUTS, None)
    domain, version = params.pop(ONNX_DOMAIN, ("", ex.opset))
    if domain:
        ex.domains[domain] = version
    elif kind.startswith("relax."):  # lifted from a Relax module in a form no ONNX kind maps
        raise UnsupportedOperator(f"cannot export `{node.describe()}`: tvm_pet writes no ONNX "
                                  f"operator for the Relax operator {kind!r} in this form")
    elif not onnx.defs.has(kind, ex.opset):
        raise UnsupportedOperator(f"cannot export `{node.describe()}`: ONNX opset {ex.opset} has "
                                  f"no operator {kind!r}; export with a higher opset or replace it")
    inputs = onnx_operands(layout, node.inputs, absent="",
                           const=lambda value: ex.const("const", value))
    attrs = {}
    for key, value in params.items():
        if isinstance(value, tuple) and any(isinstance(v, (tuple, dict)) for v in value) \
                or not isinstance(value, (int, float, str, tuple)):
            raise UnsupportedOperator(f"cannot export parameter {key}={value!r} of "
                                      f"`{node.describe()}` as an ONNX attribute")
        if value != ():
            attrs[key] = list(value) if isinstance(value, tuple) else value
    ex.add(kind, inputs, node.outputs, domain=domain, **attrs)


#: How each operator kind is written in ONNX.
EXPORT_RULES: dict[Op, ExportRule] = {
    Op.ADD: _simple("Add"),
    Op.MUL: _simple("Mul"),
    Op.CONV: _conv,
    Op.MATMUL: _simple("MatMul"),
    Op.BATCHNORM: _batchnorm,
    Op.AVGPOOL: _avgpool,
    Op.CONCAT: _simple("Concat", [("axis", "axis")]),
    Op.SPLIT: _split,
    Op.SLICE: _slice,
    Op.PAD: _pad,
    Op.TRANSPOSE: _simple("Transpose", [("perm", "perm")]),
    Op.RESHAPE: _reshape,
    Op.RESHAPE_TRANSPOSE: _reshape_transpose,
    Op.UPDATE: _update,
    Op.FILL: _fill,
    Op.OPAQUE: _opaque,
}
