"""Import an ONNX model as a tvm_pet :class:`~tvm_pet.ir.Program`.

Where it sits: the front door of the pipeline. Its result goes to the verifier, the optimizer and
the Relax adapter; :mod:`tvm_pet.onnx.exporter` is its inverse.

How a node is imported, in order:

1. ``Constant`` nodes, ``Shape`` and ``Size`` of a tensor, and integer arithmetic over constants
   (``Gather``, ``Concat``, ``Unsqueeze``, ...) are folded into constant values.
2. A default-domain node whose ``op_type`` is in :data:`LINEAR_CONVERTERS` is written with
   multi-linear ops. A converter returns ``None`` when an attribute is outside what those ops
   express (e.g. ``AveragePool`` with ``ceil_mode=1``); the node then stays opaque.
3. Every other node becomes ``OPAQUE`` with ``kind`` = op_type, ``shapes`` from ONNX shape
   inference and ``params`` = its attributes as plain Python values. Constant non-float inputs
   (e.g. the ``starts`` of a reversed ``Slice``) are kept in ``params[ONNX_INPUTS]`` so that the
   exporter can write them back; a custom domain is kept in ``params[ONNX_DOMAIN]``.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tvm_pet.errors import ModelError, PetError, UnsupportedOperator
from tvm_pet.ir.builder import ProgramBuilder
from tvm_pet.ir.node import Program, Shape
from tvm_pet.ir.ops import Op

#: Default-domain opsets whose operator semantics this importer follows.
SUPPORTED_OPSETS = range(13, 22)
#: ``params`` key of an OPAQUE node: one entry per ONNX input, ``("tensor",)`` (the next IR
#: input), ``("absent",)`` or ``("const", dtype, shape, values)``. Present only when needed.
ONNX_INPUTS = "onnx_inputs"
#: ``params`` key of an OPAQUE node from a custom domain: ``(domain, version)``.
ONNX_DOMAIN = "onnx_domain"
_DEFAULT_DOMAINS = ("", "ai.onnx")
#: Operators never folded into constants, because each run gives a different result.
_RANDOM = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                     "Multinomial", "Bernoulli"})


def import_model(model_or_path: onnx.ModelProto | str | os.PathLike, name: str | None = None,
                 require_multilinear: bool = False) -> Program:
    """Import an ONNX model with static shapes and float32 data as a program.

    Args:
        model_or_path: an ``onnx.ModelProto`` or the path of a ``.onnx`` file.
        name: the program's name (default: the graph's name).
        require_multilinear: raise instead of making OPAQUE nodes.

    Returns:
        The program; its inputs, outputs and node outputs keep the model's tensor names.

    Raises:
        ModelError: an unreadable or invalid model, a dynamic or non-float32 input, an
            operator whose output shape cannot be inferred, a non-constant shape operand.
        UnsupportedOperator: with ``require_multilinear``, the first non-linear node.
    """
    model, where = _load(model_or_path)
    model = _validate(model, where)
    return _Importer(model, name or model.graph.name or "onnx_model", require_multilinear).run()


def _load(model_or_path) -> tuple[onnx.ModelProto, str]:
    """Read a model; returns it and a description of where it came from, for messages."""
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path, "the given ModelProto"
    where = f"file {os.fspath(model_or_path)!r}"
    if not os.path.isfile(model_or_path):
        raise ModelError(f"{where} does not exist")
    try:
        return onnx.load(model_or_path), where
    except (DecodeError, ValueError, RuntimeError, OSError) as e:
        raise ModelError(f"{where} is not a valid ONNX model ({type(e).__name__}: {e}); "
                         f"export it again with torch.onnx.export or onnx.save") from None


def _validate(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    """Infer static shapes, then check the model; every failure becomes a :class:`ModelError`.

    Inference comes first so that graph outputs without a declared shape (which onnxruntime
    accepts) pass the checker.
    """
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError) as e:
        raise ModelError(f"ONNX shape inference failed on {where}: {e}") from None
    initializers = {i.name for i in inferred.graph.initializer}
    for vi in inferred.graph.input:
        if vi.name not in initializers:
            _input_shape(vi)
    try:
        onnx.checker.check_model(inferred)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"{where} is not a valid ONNX model: {first} (onnx.checker.check_model "
                         f"tells more)") from None
    _check_opset(inferred)
    return inferred


def _check_opset(model: onnx.ModelProto) -> None:
    version = next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), None)
    if version not in SUPPORTED_OPSETS:
        raise ModelError(f"model uses default-domain opset {version}; tvm_pet imports opsets "
                         f"{SUPPORTED_OPSETS.start}-{SUPPORTED_OPSETS.stop - 1}: convert it with "
                         f"onnx.version_converter.convert_version(model, 17)")


def _describe(node: onnx.NodeProto) -> str:
    label = repr(node.name) if node.name else f"producing {list(node.output)}"
    return f"{node.op_type} node {label}"


_A = onnx.AttributeProto
_PLAIN_ATTRIBUTES = (_A.INT, _A.FLOAT, _A.STRING, _A.INTS, _A.FLOATS, _A.STRINGS)


def _plain_attrs(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes as plain Python values: ints, floats, strings, tuples of them, and
    NumPy arrays for tensor attributes (only ``Constant`` and ``ConstantOfShape`` use those)."""
    out: dict[str, Any] = {}
    for attr in node.attribute:
        if attr.type == _A.TENSOR:
            out[attr.name] = numpy_helper.to_array(attr.t)
            continue
        if attr.type not in _PLAIN_ATTRIBUTES:
            raise ModelError(f"{_describe(node)} has attribute {attr.name!r} of type "
                             f"{_A.AttributeType.Name(attr.type)}; tvm_pet imports int, float, "
                             f"string and tensor attributes only (no subgraphs)")
        value = helper.get_attribute_value(attr)
        if attr.type in (_A.INTS, _A.FLOATS, _A.STRINGS):
            value = tuple(v.decode("utf-8") if isinstance(v, bytes) else v for v in value)
        out[attr.name] = value.decode("utf-8") if isinstance(value, bytes) else value
    return out


def _input_shape(vi: onnx.ValueInfoProto) -> Shape:
    """The shape of a graph input, which must be float32 and static."""
    supported = "tvm_pet imports float32 inputs with static, positive dimensions"
    t = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or t.elem_type != onnx.TensorProto.FLOAT:
        kind = helper.tensor_dtype_to_np_dtype(t.elem_type) if t.elem_type else "not a tensor"
        raise ModelError(f"input {vi.name!r} is {kind}; {supported}")
    if not t.HasField("shape"):
        raise ModelError(f"input {vi.name!r} has no shape; {supported}")
    for axis, d in enumerate(t.shape.dim):
        if not d.HasField("dim_value"):
            label = repr(d.dim_param) if d.dim_param else "unknown"
            raise ModelError(f"input {vi.name!r} has a dynamic dimension ({label}) at axis {axis};"
                             f" {supported}: fix it, e.g. with "
                             f"onnx.tools.update_model_dims.update_inputs_outputs_dims")
        if d.dim_value < 1:
            raise ModelError(f"input {vi.name!r} has a zero-size dimension at axis {axis}; "
                             f"{supported}")
    return tuple(int(d.dim_value) for d in t.shape.dim)


def _static_shape(value_info: onnx.ValueInfoProto) -> Shape | None:
    """The static shape of a value, or None when its rank or a dimension is unknown."""
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = t.shape.dim
    if any(not d.HasField("dim_value") for d in dims):
        return None
    return tuple(int(d.dim_value) for d in dims)


class _Importer:
    """The state of one import: constants, inferred types and shapes, and the program builder."""

    def __init__(self, model: onnx.ModelProto, name: str, require_multilinear: bool):
        graph = model.graph
        self.graph = graph
        self.require_multilinear = require_multilinear
        self.b = ProgramBuilder(name)
        self.consts: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i)
                                              for i in graph.initializer}
        infos = list(graph.input) + list(graph.value_info) + list(graph.output)
        self.types = {v.name: v.type.tensor_type.elem_type for v in infos}
        self.inferred = {v.name: _static_shape(v) for v in infos}
        self.used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        self.reserved = (set(self.consts) | set(self.types)
                         | {o for n in graph.node for o in n.output})
        self.domains = {o.domain: o.version for o in model.opset_import}
        self._scalars: dict[float, str] = {}
        self._count = 0

    # ----------------------------------------------------------------------------- names, values
    def fresh(self, hint: str) -> str:
        """A tensor name used neither by the model nor by the program so far."""
        while True:
            self._count += 1
            name = f"{hint or 't'}_{self._count}"
            if name not in self.reserved and name not in self.b.shapes:
                return name

    def shape(self, name: str) -> Shape:
        """The static shape of a tensor of the program or a constant."""
        if name in self.b.shapes:
            return self.b.shapes[name]
        if name in self.consts:
            return tuple(self.consts[name].shape)
        raise ModelError(f"tensor {name!r} is not defined (it is produced by no imported node)")

    def tensor(self, name: str, node: onnx.NodeProto) -> str:
        """The program tensor for a data operand; a float constant becomes a weight on first use."""
        if name in self.b.shapes:
            return name
        if name in self.consts and self.consts[name].dtype.kind == "f":
            return self.b.weight(name, self.consts[name])
        if name in self.consts:
            raise ModelError(f"{_describe(node)} uses the {self.consts[name].dtype} constant "
                             f"{name!r} as data; tvm_pet programs compute on float32 tensors only")
        raise ModelError(f"{_describe(node)} reads {name!r}, which no imported node produces "
                         f"(an optional output such as Dropout's mask is not imported)")

    def const(self, node: onnx.NodeProto, index: int, required: bool = True) -> np.ndarray | None:
        """The constant value of input ``index``; None for an absent optional input."""
        if index >= len(node.input) or not node.input[index]:
            if required:
                raise ModelError(f"{_describe(node)} lacks its input {index}")
            return None
        name = node.input[index]
        if name not in self.consts:
            raise ModelError(f"{_describe(node)} needs input {index} ({name!r}) to be a constant "
                             f"(an initializer or a foldable shape computation); tvm_pet imports "
                             f"static-shape models only")
        return self.consts[name]

    def weight(self, hint: str, value: np.ndarray) -> str:
        """A new weight with a fresh name."""
        return self.b.weight(self.fresh(hint), np.asarray(value, np.float32))

    def scalar(self, value: float) -> str:
        """A shared scalar weight (for Sub's -1 and Gemm's alpha and beta)."""
        if value not in self._scalars:
            self._scalars[value] = self.weight("scalar", np.float32(value))
        return self._scalars[value]

    def emit(self, op: Op, inputs: Sequence[str], attrs: dict, out: str | None, hint: str) -> str:
        """Add one single-output node; ``out=None`` names it freshly from ``hint``."""
        return self.b.node(op, inputs, attrs, [out or self.fresh(hint)])[0]

    # ------------------------------------------------------------------------------ the driver
    def run(self) -> Program:
        """Import inputs, every node and the outputs; return the program."""
        for vi in self.graph.input:
            if vi.name not in self.consts:
                self.b.input(vi.name, _input_shape(vi))
        for node in self.graph.node:
            try:
                self._node(node)
            except PetError as e:
                if _describe(node) in str(e):
                    raise
                raise type(e)(f"while importing {_describe(node)}: {e}") from None
        outputs = [o.name for o in self.graph.output]
        for o in outputs:
            if o in self.b.shapes:
                continue
            if o not in self.consts or self.consts[o].dtype.kind != "f":
                raise ModelError(f"graph output {o!r} is not a float32 tensor of the program; "
                                 f"tvm_pet programs compute on float32 tensors only")
            self.b.weight(o, self.consts[o])
        return self.b.build(outputs)

    def _node(self, node: onnx.NodeProto) -> None:
        attrs = _plain_attrs(node)
        default = node.domain in _DEFAULT_DOMAINS
        if default and self._fold(node, attrs):
            return
        convert = LINEAR_CONVERTERS.get(node.op_type) if default else None
        if convert is None or convert(self, node, attrs) is None:
            self._opaque(node, attrs)
        for o in node.output:
            want = self.inferred.get(o)
            if o in self.b.shapes and want is not None and want != self.b.shapes[o]:
                raise ModelError(f"{_describe(node)}: tvm_pet computed shape "
                                 f"{list(self.b.shapes[o])} for {o!r}, ONNX infers {list(want)}")

    def _fold(self, node: onnx.NodeProto, attrs: dict) -> bool:
        """Fold a constant computation into :attr:`consts`; False when it is not one.

        ``Shape`` and ``Size`` read static shapes; ``Constant`` and nodes whose inputs are all
        non-float constants (shape arithmetic) run in ONNX's reference evaluator.
        """
        static = node.input and (node.input[0] in self.b.shapes or node.input[0] in self.consts)
        if node.op_type in ("Shape", "Size") and static:
            shape = np.array(self.shape(node.input[0]), np.int64)
            self.consts[node.output[0]] = (shape[attrs.get("start", 0):attrs.get("end", None)]
                                           if node.op_type == "Shape" else np.prod(shape))
            return True
        present = [i for i in node.input if i]
        foldable = node.op_type == "Constant" or (
            present and node.op_type not in _RANDOM
            and all(i in self.consts and self.consts[i].dtype.kind != "f" for i in present))
        if not foldable:
            return False
        try:
            evaluator = ReferenceEvaluator(node, opsets=self.domains)
            values = evaluator.run(None, {i: self.consts[i] for i in present})
        except Exception as e:  # the reference evaluator raises many kinds; report, never hide
            raise ModelError(f"cannot fold the constant computation of {_describe(node)}: "
                             f"{type(e).__name__}: {e}") from None
        for o, value in zip(node.output, values):
            if o:
                self.consts[o] = np.asarray(value)
        return True

    def _opaque(self, node: onnx.NodeProto, attrs: dict) -> None:
        """Import ``node`` as an OPAQUE operator with inferred output shapes."""
        if self.require_multilinear:
            raise UnsupportedOperator(
                f"{_describe(node)} cannot be imported as a multi-linear operator (op type "
                f"{node.op_type!r}; only {', '.join(sorted(LINEAR_CONVERTERS))} can, with "
                f"the attributes their converters handle): remove it or import without "
                f"require_multilinear")
        for k, v in attrs.items():
            if isinstance(v, np.ndarray):
                raise ModelError(f"{_describe(node)} has tensor attribute {k!r}; tvm_pet keeps "
                                 f"only int, float and string attributes of opaque operators")
        params = dict(attrs)
        inputs, layout = self._opaque_inputs(node)
        if any(entry[0] != "tensor" for entry in layout):
            params[ONNX_INPUTS] = tuple(layout)
        if node.domain not in _DEFAULT_DOMAINS:
            params[ONNX_DOMAIN] = (node.domain, self.domains.get(node.domain, 1))
        outputs = self._opaque_outputs(node)
        shapes = tuple(self.inferred[o] for o in outputs)
        self.b.node(Op.OPAQUE, inputs, {"kind": node.op_type, "shapes": shapes, "params": params},
                    outputs)

    def _opaque_outputs(self, node: onnx.NodeProto) -> list[str]:
        """The outputs an OPAQUE node keeps: trailing absent or unused non-float ones are dropped
        (e.g. MaxPool's Indices); each kept one must be float32 with a static shape."""
        outputs = list(node.output)
        def droppable(o: str) -> bool:
            return not o or (o not in self.used and self.types.get(o) != onnx.TensorProto.FLOAT)

        while outputs and droppable(outputs[-1]):
            outputs.pop()
        for o in outputs:
            if not o or self.inferred.get(o) is None:
                raise ModelError(f"cannot infer a static shape for output {o!r} of "
                                 f"{_describe(node)}; give the model static shapes (e.g. a "
                                 f"value_info entry for it)")
            if self.types.get(o) != onnx.TensorProto.FLOAT:
                raise ModelError(f"output {o!r} of {_describe(node)} is not float32; tvm_pet "
                                 f"programs compute on float32 tensors only")
            if any(d < 1 for d in self.inferred[o]):
                raise ModelError(f"output {o!r} of {_describe(node)} has zero-size shape "
                                 f"{list(self.inferred[o])}")
        return outputs

    def _opaque_inputs(self, node: onnx.NodeProto) -> tuple[list[str], list[tuple]]:
        inputs, layout = [], []
        for name in node.input:
            if not name:
                layout.append(("absent",))
            elif name in self.consts and self.consts[name].dtype.kind != "f":
                v = self.consts[name]
                layout.append(("const", v.dtype.name, tuple(v.shape), tuple(v.ravel().tolist())))
            else:
                inputs.append(self.tensor(name, node))
                layout.append(("tensor",))
        while layout and layout[-1] == ("absent",):
            layout.pop()
        if not inputs:
            raise ModelError(f"{_describe(node)} has no float tensor input; tvm_pet cannot keep "
                             f"an operator that only reads integer constants")
        return inputs, layout


# ------------------------------------------------------------------------- linear converters
#: ``convert(importer, node, attrs)`` emits the node with multi-linear ops and returns its output
#: name, or returns None (having emitted nothing) when the node must stay opaque.
Converter = Callable[[_Importer, onnx.NodeProto, dict], "str | None"]


def _window_pads(a: dict, spatial: Shape, kernel: Shape, strides: Shape, dilations: Shape) -> Shape:
    """Explicit begins + ends pads of a Conv or pool, resolving ``auto_pad``."""
    mode, n = a.get("auto_pad", "NOTSET"), len(kernel)
    if mode == "NOTSET":
        return tuple(a.get("pads", (0,) * 2 * n))
    if mode == "VALID":
        return (0,) * 2 * n
    begins, ends = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        begins.append(total // 2 if mode == "SAME_UPPER" else total - total // 2)
        ends.append(total - begins[-1])
    return tuple(begins + ends)


def _elementwise(imp: _Importer, node, a):
    x, y = (imp.tensor(i, node) for i in node.input)
    return imp.emit(Op.ADD if node.op_type == "Add" else Op.MUL, [x, y], {}, node.output[0], "")


def _sub(imp: _Importer, node, a):
    x, y = (imp.tensor(i, node) for i in node.input)
    negated = imp.emit(Op.MUL, [y, imp.scalar(-1.0)], {}, None, node.output[0])
    return imp.emit(Op.ADD, [x, negated], {}, node.output[0], "")


def _channel_vector(imp: _Importer, node, name: str, rank: int) -> str:
    """A per-channel vector [C] as a tensor of shape [1, C, 1, ...] of the given rank."""
    if name in imp.consts:
        return imp.weight(name, imp.consts[name].reshape((1, -1) + (1,) * (rank - 2)))
    t = imp.tensor(name, node)
    return imp.emit(Op.RESHAPE, [t], {"shape": (1, imp.shape(t)[0]) + (1,) * (rank - 2)}, None, t)


def _conv(imp: _Importer, node, a):
    x, w = imp.tensor(node.input[0], node), imp.tensor(node.input[1], node)
    kernel = imp.shape(w)[2:]
    ones = (1,) * len(kernel)
    strides, dilations = tuple(a.get("strides", ones)), tuple(a.get("dilations", ones))
    attrs = {"strides": strides, "dilations": dilations, "groups": a.get("group", 1),
             "pads": _window_pads(a, imp.shape(x)[2:], kernel, strides, dilations)}
    out, has_bias = node.output[0], len(node.input) > 2 and bool(node.input[2])
    y = imp.emit(Op.CONV, [x, w], attrs, None if has_bias else out, out)
    if has_bias:
        bias = _channel_vector(imp, node, node.input[2], 2 + len(kernel))
        y = imp.emit(Op.ADD, [y, bias], {}, out, out)
    return y


def _matmul(imp: _Importer, node, a):
    x, y = (imp.tensor(i, node) for i in node.input)
    out = node.output[0]
    if len(imp.shape(x)) >= 2 and len(imp.shape(y)) >= 2:
        return imp.emit(Op.MATMUL, [x, y], {}, out, out)
    if imp.inferred.get(out) is None:
        return None
    if len(imp.shape(x)) == 1:
        x = imp.emit(Op.RESHAPE, [x], {"shape": (1,) + imp.shape(x)}, None, x)
    if len(imp.shape(y)) == 1:
        y = imp.emit(Op.RESHAPE, [y], {"shape": imp.shape(y) + (1,)}, None, y)
    z = imp.emit(Op.MATMUL, [x, y], {}, None, out)
    return imp.emit(Op.RESHAPE, [z], {"shape": imp.inferred[out]}, out, out)


def _gemm(imp: _Importer, node, a):
    x, y = (imp.tensor(i, node) for i in node.input[:2])
    out, has_c = node.output[0], len(node.input) > 2 and bool(node.input[2])
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    if a.get("transA", 0):
        x = imp.emit(Op.TRANSPOSE, [x], {"perm": (1, 0)}, None, x)
    if a.get("transB", 0):
        y = imp.emit(Op.TRANSPOSE, [y], {"perm": (1, 0)}, None, y)
    z = imp.emit(Op.MATMUL, [x, y], {}, None if has_c or alpha != 1.0 else out, out)
    if alpha != 1.0:
        z = imp.emit(Op.MUL, [z, imp.scalar(alpha)], {}, None if has_c else out, out)
    if has_c:
        c = imp.tensor(node.input[2], node)
        if beta != 1.0:
            c = imp.emit(Op.MUL, [c, imp.scalar(beta)], {}, None, c)
        z = imp.emit(Op.ADD, [z, c], {}, out, out)
    return z


def _batchnorm(imp: _Importer, node, a):
    stats = node.input[1:5]
    if a.get("training_mode", 0) or any(node.output[1:]) or not all(s in imp.consts for s in stats):
        return None
    gamma, beta, mean, var = (imp.consts[s].astype(np.float64) for s in stats)
    scale = gamma / np.sqrt(var + a.get("epsilon", 1e-5))
    shift = beta - mean * scale
    x = imp.tensor(node.input[0], node)
    return imp.emit(Op.BATCHNORM, [x, imp.weight(stats[0], scale), imp.weight(stats[1], shift)],
                    {}, node.output[0], "")


def _avgpool(imp: _Importer, node, a):
    kernel = tuple(a["kernel_shape"])
    ones = (1,) * len(kernel)
    if a.get("ceil_mode", 0) or tuple(a.get("dilations", ones)) != ones:
        return None
    x, strides = imp.tensor(node.input[0], node), tuple(a.get("strides", ones))
    pads = _window_pads(a, imp.shape(x)[2:], kernel, strides, ones)
    if any(p >= k for p, k in zip(pads, kernel * 2)):
        return None
    return imp.emit(Op.AVGPOOL, [x], {"kernel": kernel, "strides": strides, "pads": pads,
                                      "count_include_pad": bool(a.get("count_include_pad", 0))},
                    node.output[0], "")


def _global_avgpool(imp: _Importer, node, a):
    x = imp.tensor(node.input[0], node)
    kernel = imp.shape(x)[2:]
    return imp.emit(Op.AVGPOOL, [x], {"kernel": kernel, "strides": (1,) * len(kernel),
                                      "pads": (0,) * 2 * len(kernel), "count_include_pad": False},
                    node.output[0], "")


def _concat(imp: _Importer, node, a):
    xs = [imp.tensor(i, node) for i in node.input]
    return imp.emit(Op.CONCAT, xs, {"axis": a["axis"] % len(imp.shape(xs[0]))}, node.output[0], "")


def _split(imp: _Importer, node, a):
    x = imp.tensor(node.input[0], node)
    axis = a.get("axis", 0) % len(imp.shape(x))
    n, k = imp.shape(x)[axis], len(node.output)
    sizes = imp.const(node, 1, required=False)
    sizes = a.get("split") if sizes is None else sizes
    if sizes is None:
        chunk = -(-n // a.get("num_outputs", k))
        sizes = [chunk] * (k - 1) + [n - chunk * (k - 1)]
    outputs = [o or imp.fresh(x) for o in node.output]
    imp.b.node(Op.SPLIT, [x], {"axis": axis, "sizes": tuple(int(s) for s in sizes)}, outputs)
    return outputs[0]


def _slice_bounds(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX Slice's normalisation of one axis: negative indices count from the end, then clamp."""
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


def _slice(imp: _Importer, node, a):
    shape = imp.shape(node.input[0])
    starts, ends = imp.const(node, 1), imp.const(node, 2)
    axes = imp.const(node, 3, required=False)
    steps = imp.const(node, 4, required=False)
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if any(s <= 0 for s in steps):
        return None  # reversed slices (and the invalid step 0) stay opaque
    begin, step, size = [0] * len(shape), [1] * len(shape), list(shape)
    for ax, s, e, st in zip(axes, starts, ends, steps):
        ax = int(ax) % len(shape)
        b, e = _slice_bounds(shape[ax], int(s), int(e), int(st))
        begin[ax], step[ax], size[ax] = b, int(st), max(0, -(-(e - b) // int(st)))
    if 0 in size:
        raise ModelError(f"{_describe(node)} selects no element ({size}); tvm_pet tensors are "
                         f"non-empty")
    x = imp.tensor(node.input[0], node)
    return imp.emit(Op.SLICE, [x], {"starts": begin, "steps": step, "sizes": size},
                    node.output[0], "")


def _pad(imp: _Importer, node, a):
    has_value = len(node.input) > 2 and bool(node.input[2])
    if a.get("mode", "constant") != "constant" or (has_value and node.input[2] not in imp.consts):
        return None
    value = imp.const(node, 2, required=False)
    if value is not None and value.size and float(value.ravel()[0]) != 0.0:
        return None
    rank = len(imp.shape(node.input[0]))
    pads = [int(p) for p in imp.const(node, 1)]
    axes = imp.const(node, 3, required=False)
    if axes is not None:
        full = [0] * 2 * rank
        for i, ax in enumerate(int(v) % rank for v in axes):
            full[ax], full[rank + ax] = pads[i], pads[len(axes) + i]
        pads = full
    if any(p < 0 for p in pads):
        return None
    return imp.emit(Op.PAD, [imp.tensor(node.input[0], node)], {"pads": pads}, node.output[0], "")


def _transpose(imp: _Importer, node, a):
    x = imp.tensor(node.input[0], node)
    perm = a.get("perm", tuple(reversed(range(len(imp.shape(x))))))
    return imp.emit(Op.TRANSPOSE, [x], {"perm": perm}, node.output[0], "")


def _target_shape(shape: Shape, spec, allowzero: int) -> Shape:
    """ONNX Reshape's target: 0 copies the input dimension (unless allowzero), -1 is inferred."""
    out = [shape[i] if int(d) == 0 and not allowzero else int(d) for i, d in enumerate(spec)]
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = math.prod(shape) // known if known else 0
    return tuple(out)


def _reshape_to(imp: _Importer, node, shape) -> str:
    x = imp.tensor(node.input[0], node)
    return imp.emit(Op.RESHAPE, [x], {"shape": tuple(int(d) for d in shape)}, node.output[0], "")


def _reshape(imp: _Importer, node, a):
    target = _target_shape(imp.shape(node.input[0]), imp.const(node, 1), a.get("allowzero", 0))
    return _reshape_to(imp, node, target)


def _flatten(imp: _Importer, node, a):
    shape = imp.shape(node.input[0])
    axis = a.get("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    return _reshape_to(imp, node, (math.prod(shape[:axis]), math.prod(shape[axis:])))


def _axes_operand(imp: _Importer, node, a) -> list[int] | None:
    axes = imp.const(node, 1, required=False)
    axes = a.get("axes") if axes is None else axes
    return None if axes is None else [int(v) for v in np.ravel(axes)]


def _squeeze(imp: _Importer, node, a):
    shape = imp.shape(node.input[0])
    axes = _axes_operand(imp, node, a)
    if axes is None:
        drop = {i for i, d in enumerate(shape) if d == 1}
    else:
        drop = {v % len(shape) for v in axes}
    return _reshape_to(imp, node, [d for i, d in enumerate(shape) if i not in drop])


def _unsqueeze(imp: _Importer, node, a):
    shape = list(imp.shape(node.input[0]))
    axes = _axes_operand(imp, node, a) or []
    rank = len(shape) + len(axes)
    for ax in sorted(v % rank for v in axes):
        shape.insert(ax, 1)
    return _reshape_to(imp, node, shape)


def _identity(imp: _Importer, node, a):
    return _reshape_to(imp, node, imp.shape(node.input[0]))


def _dropout(imp: _Importer, node, a):
    has_mode = len(node.input) > 2 and bool(node.input[2])
    if has_mode and (node.input[2] not in imp.consts or imp.consts[node.input[2]].any()):
        return None  # training mode (or one known only at run time) stays opaque
    if len(node.output) > 1 and node.output[1] in imp.used:
        return None
    return _identity(imp, node, a)


def _scatter_nd(imp: _Importer, node, a):
    """ScatterND whose constant indices list a strided box: the exporter's form of UPDATE."""
    if a.get("reduction", "none") != "none" or node.input[1] not in imp.consts:
        return None
    index = imp.consts[node.input[1]].astype(np.int64)
    base, patch = imp.shape(node.input[0]), imp.shape(node.input[2])
    if len(patch) != len(base) or index.shape != patch + (len(base),):
        return None
    starts = index[(0,) * len(base)]
    steps = [int(index[tuple(int(j == d) for j in range(len(base)))][d] - starts[d]) if k > 1 else 1
             for d, k in enumerate(patch)]
    grid = np.moveaxis(np.indices(patch), 0, -1) * steps + starts
    if (not np.array_equal(grid, index) or any(s < 1 for s in steps) or (starts < 0).any()
            or any(b + (k - 1) * s >= n for b, k, s, n in zip(starts, patch, steps, base))):
        return None
    x, y = imp.tensor(node.input[0], node), imp.tensor(node.input[2], node)
    return imp.emit(Op.UPDATE, [x, y], {"starts": tuple(int(s) for s in starts), "steps": steps},
                    node.output[0], "")


#: The ONNX operators written with multi-linear ops, by op_type.
LINEAR_CONVERTERS: dict[str, Converter] = {
    "Add": _elementwise, "Mul": _elementwise, "Sub": _sub,
    "Conv": _conv, "MatMul": _matmul, "Gemm": _gemm,
    "BatchNormalization": _batchnorm, "AveragePool": _avgpool, "GlobalAveragePool": _global_avgpool,
    "Concat": _concat, "Split": _split, "Slice": _slice, "Pad": _pad, "Transpose": _transpose,
    "Reshape": _reshape, "Flatten": _flatten, "Squeeze": _squeeze, "Unsqueeze": _unsqueeze,
    "Identity": _identity, "Dropout": _dropout, "ScatterND": _scatter_nd,
}
