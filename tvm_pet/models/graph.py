"""A small seeded ONNX graph writer shared by the model builders of :mod:`tvm_pet.models`.

:class:`GraphWriter` appends one ONNX node per call, names the node and its output tensor alike
(``"layer1.0.conv1"``), and draws every weight from one ``np.random.default_rng(seed)`` in the order
the layers are written, so the same seed gives the same initializers. Weights are scaled so that
activations stay O(1): He initialisation for convolutions, ``1/sqrt(fan_in)`` for dense layers,
and batch-norm statistics near the identity.

>>> g = GraphWriter("tiny", seed=0)
>>> y = g.relu("relu", g.conv("conv", "input", 3, 4, kernel=3, pad=1), out="output")
>>> model = g.model({"input": (1, 3, 8, 8)}, ["output"])
>>> [n.op_type for n in model.graph.node]
['Conv', 'Relu']
>>> [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
[1, 4, 8, 8]
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: The ONNX versions every model builder writes.
OPSET, IR_VERSION = 17, 8

IntOrTuple = int | Sequence[int]


def _tuple(value: IntOrTuple, rank: int) -> tuple[int, ...]:
    """``value`` repeated ``rank`` times when it is an int, else as a tuple of that length."""
    out = (value,) * rank if isinstance(value, int) else tuple(value)
    if len(out) != rank:
        raise ValueError(f"expected {rank} values, got {list(out)}")
    return out


class GraphWriter:
    """Writes one ONNX graph node by node, with weights from a seeded generator.

    Every layer method takes the layer ``name`` (used for the node, its output tensor and, with a
    suffix such as ``.weight``, its initializers), the input tensor name(s), and ``out`` to give the
    output tensor another name (e.g. ``"output"``). It returns the output tensor name.

    Args:
        name: the graph's name.
        seed: the seed of ``np.random.default_rng`` that draws every weight.
    """

    def __init__(self, name: str, seed: int = 0):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names: set[str] = set()

    # ------------------------------------------------------------------------------ primitives
    def node(self, op_type: str, name: str, inputs: Sequence[str], out: str | None = None,
             **attrs) -> str:
        """Append a single-output node; returns its output tensor (``out`` or ``name``)."""
        if name in self._names:
            raise ValueError(f"layer name {name!r} is used twice in graph {self.name!r}")
        self._names.add(name)
        output = out or name
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=name, **attrs))
        return output

    def constant(self, name: str, value: np.ndarray) -> str:
        """Add an initializer holding ``value`` as it is (float32 or int64); returns its name."""
        if name in self._names:
            raise ValueError(f"initializer name {name!r} is used twice in graph {self.name!r}")
        self._names.add(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def normal(self, name: str, shape: Sequence[int], std: float, mean: float = 0.0) -> str:
        """A float32 initializer drawn from N(mean, std²)."""
        value = mean + std * self.rng.standard_normal(tuple(shape))
        return self.constant(name, value.astype(np.float32))

    def uniform(self, name: str, shape: Sequence[int], low: float, high: float) -> str:
        """A float32 initializer drawn uniformly from [low, high)."""
        return self.constant(name, self.rng.uniform(low, high, tuple(shape)).astype(np.float32))

    # ---------------------------------------------------------------------------- conv layers
    def conv(self, name: str, x: str, cin: int, cout: int, kernel: IntOrTuple,
             stride: IntOrTuple = 1, pad: IntOrTuple = 0, dilation: IntOrTuple = 1,
             rank: int = 2, bias: bool = False, out: str | None = None) -> str:
        """A ``rank``-D convolution with He-initialised weight ``[cout, cin, *kernel]``.

        Args:
            name, x, out: as for every layer (see the class docstring).
            cin, cout: input and output channels.
            kernel, stride, dilation: an int for every spatial axis, or one value per axis.
            pad: symmetric padding, an int or one value per spatial axis.
            rank: the number of spatial axes (2 for images, 3 for videos).
            bias: add a bias input (small, N(0, 0.01²)).

        Returns:
            The output tensor name.
        """
        k = _tuple(kernel, rank)
        std = math.sqrt(2.0 / (cin * math.prod(k)))
        inputs = [x, self.normal(f"{name}.weight", (cout, cin) + k, std)]
        if bias:
            inputs.append(self.normal(f"{name}.bias", (cout,), 0.01))
        pads = _tuple(pad, rank)
        return self.node("Conv", name, inputs, out, kernel_shape=list(k),
                         strides=list(_tuple(stride, rank)), pads=list(pads + pads),
                         dilations=list(_tuple(dilation, rank)))

    def batchnorm(self, name: str, x: str, channels: int, epsilon: float = 1e-5,
                  gamma: tuple[float, float] = (0.5, 1.0), out: str | None = None) -> str:
        """Inference batch norm with random statistics near the identity.

        Args:
            name, x, out: as for every layer.
            channels: the channel count.
            epsilon: the variance epsilon.
            gamma: the range of the uniformly drawn scales.

        Returns:
            The output tensor name.
        """
        inputs = [x, self.uniform(f"{name}.weight", (channels,), *gamma),
                  self.normal(f"{name}.bias", (channels,), 0.1),
                  self.normal(f"{name}.running_mean", (channels,), 0.1),
                  self.uniform(f"{name}.running_var", (channels,), 0.5, 1.5)]
        return self.node("BatchNormalization", name, inputs, out, epsilon=epsilon)

    def maxpool(self, name: str, x: str, kernel: IntOrTuple, stride: IntOrTuple,
                pad: IntOrTuple = 0, rank: int = 2, out: str | None = None) -> str:
        """Max pooling with symmetric padding."""
        pads = _tuple(pad, rank)
        return self.node("MaxPool", name, [x], out, kernel_shape=list(_tuple(kernel, rank)),
                         strides=list(_tuple(stride, rank)), pads=list(pads + pads))

    def avgpool(self, name: str, x: str, kernel: int, stride: int, pad: int = 0,
                count_include_pad: bool = True, out: str | None = None) -> str:
        """2-D average pooling (PyTorch's default counts the padding)."""
        return self.node("AveragePool", name, [x], out, kernel_shape=[kernel, kernel],
                         strides=[stride, stride], pads=[pad] * 4,
                         count_include_pad=int(count_include_pad))

    # ---------------------------------------------------------------------------- dense layers
    def linear(self, name: str, x: str, fin: int, fout: int, out: str | None = None) -> str:
        """``x @ W + b`` as MatMul then Add, with ``W`` of shape [fin, fout] (any batch axes)."""
        w = self.normal(f"{name}.weight", (fin, fout), 1.0 / math.sqrt(fin))
        b = self.normal(f"{name}.bias", (fout,), 0.01)
        y = self.node("MatMul", f"{name}.matmul", [x, w])
        return self.node("Add", name, [y, b], out)

    def gemm(self, name: str, x: str, fin: int, fout: int, out: str | None = None) -> str:
        """A fully connected layer on [N, fin] as PyTorch exports it: Gemm with transB=1."""
        w = self.normal(f"{name}.weight", (fout, fin), 1.0 / math.sqrt(fin))
        b = self.normal(f"{name}.bias", (fout,), 0.01)
        return self.node("Gemm", name, [x, w, b], out, transB=1)

    def layernorm(self, name: str, x: str, width: int, epsilon: float = 1e-12,
                  out: str | None = None) -> str:
        """LayerNormalization over the last axis with scales near 1 and small shifts."""
        inputs = [x, self.normal(f"{name}.weight", (width,), 0.1, mean=1.0),
                  self.normal(f"{name}.bias", (width,), 0.1)]
        return self.node("LayerNormalization", name, inputs, out, axis=-1, epsilon=epsilon)

    # ------------------------------------------------------------------------ element-wise, shape
    def relu(self, name: str, x: str, out: str | None = None) -> str:
        """Rectified linear unit."""
        return self.node("Relu", name, [x], out)

    def add(self, name: str, x: str, y: str, out: str | None = None) -> str:
        """Element-wise (broadcast) sum."""
        return self.node("Add", name, [x, y], out)

    def scale(self, name: str, x: str, factor: float, out: str | None = None) -> str:
        """``x * factor`` with a scalar initializer ``name.factor`` (a Mul, which PET maps)."""
        return self.node("Mul", name, [x, self.constant(f"{name}.factor", np.float32(factor))], out)

    def concat(self, name: str, xs: Sequence[str], axis: int = 1, out: str | None = None) -> str:
        """Concatenation along ``axis``."""
        return self.node("Concat", name, xs, out, axis=axis)

    def reshape(self, name: str, x: str, shape: Sequence[int], out: str | None = None) -> str:
        """Reshape to a static shape, given as an int64 initializer ``name.shape``."""
        target = self.constant(f"{name}.shape", np.array(shape, np.int64))
        return self.node("Reshape", name, [x, target], out)

    def transpose(self, name: str, x: str, perm: Sequence[int], out: str | None = None) -> str:
        """Axis permutation."""
        return self.node("Transpose", name, [x], out, perm=list(perm))

    # ------------------------------------------------------------------------------ the model
    def model(self, inputs: Mapping[str, Sequence[int]], outputs: Sequence[str],
              doc: str = "") -> onnx.ModelProto:
        """The finished model: opset 17, IR version 8, float32 inputs and outputs.

        Args:
            inputs: graph input names and static shapes.
            outputs: graph output names (tensors written earlier); their shapes are inferred.
            doc: the graph's doc string.

        Returns:
            A model that passes ``onnx.checker.check_model(model, full_check=True)``.
        """
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s))
             for k, s in inputs.items()],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            self.initializers, doc_string=doc)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="tvm_pet.models")
        model.ir_version = IR_VERSION
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        for declared, found in zip(model.graph.output, inferred.graph.output):
            declared.type.CopyFrom(found.type)
        return model
