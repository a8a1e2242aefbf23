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
from fractions import Fraction
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tvm_pet.errors import ModelError, PetError, UnsupportedOperator
from tvm_pet.ir.builder import ProgramBuilder
from tvm_pet.ir.node import Program, Shape
from tvm_pet.ir.ops import ONNX_INPUTS, Op
from tvm_pet.onnx.convert import LINEAR_CONVERTERS, _describe
from tvm_pet.verify.limits import MAX_TENSOR_ELEMENTS

#: Default-domain opsets whose operator semantics this importer follows.
SUPPORTED_OPSETS = range(13, 22)
#: ``doc_string`` prefix of a Constant that the exporter wrote for a FILL of value ``num/den``,
#: so that the exact rational comes back (a float32 value like 1/9 is not exact).
FILL_TAG = "tvm_pet.fill "
#: ``params`` key of an OPAQUE node from a custom domain: ``(domain, version)``.
ONNX_DOMAIN = "onnx_domain"
_DEFAULT_DOMAINS = ("", "ai.onnx")
#: Operators never folded into constants, because each run gives a different result.
RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                        "Multinomial", "Bernoulli"})


def shape_node_value(op_type: str, shape: Sequence[int], attrs: dict):
    """The value of an ONNX ``Shape`` (with its ``start`` and ``end`` attributes) or ``Size``
    node reading a tensor of static ``shape``."""
    dims = np.array(shape, np.int64)
    return dims[attrs.get("start", 0):attrs.get("end", None)] if op_type == "Shape" \
        else np.prod(dims)


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
        raise ModelError(f"input {vi.name!r} is {kind}; {supported} (export the model in "
                         f"float32, or run PETPass on TVM's own import, which leaves other "
                         f"dtypes unchanged)")
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
        default = node.domain in _DEFAULT_DOMAINS
        if default and node.op_type == "Constant" and node.doc_string.startswith(FILL_TAG):
            num, den = (int(v) for v in node.doc_string[len(FILL_TAG):].split("/"))
            shape = tuple(self.inferred[node.output[0]])
            self.b.fill(shape, Fraction(num, den), out=node.output[0])
            return
        attrs = _plain_attrs(node)
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
            self.consts[node.output[0]] = shape_node_value(node.op_type,
                                                           self.shape(node.input[0]), attrs)
            return True
        present = [i for i in node.input if i]
        foldable = node.op_type == "Constant" or (
            present and node.op_type not in RANDOM_OPS
            and all(i in self.consts and self.consts[i].dtype.kind != "f" for i in present))
        if not foldable:
            return False
        for o in node.output:
            shape = self.inferred.get(o)
            if shape is not None and math.prod(shape) > MAX_TENSOR_ELEMENTS:
                raise ModelError(f"{_describe(node)} makes the constant {o!r} of shape "
                                 f"{list(shape)} ({math.prod(shape)} elements); tvm_pet folds "
                                 f"and verifies tensors of at most {MAX_TENSOR_ELEMENTS} "
                                 f"elements: use smaller shapes")
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
