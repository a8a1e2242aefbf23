"""Dilated-convolution models, and cost models under which rewriting them pays.

Shared by the tests of the optimizer, ``PETPass``, ``tvm-pet optimize`` and tuning: under the
analytic cost nothing beats a dilated convolution, so these cost models make the search provably
change the model without any tuning.

- :func:`dilated_model`: an ONNX model, one dilated 3x3 convolution and a ReLU;
- :func:`dilated_chain`: a CSRNet-like chain of dilated convolutions, as a program;
- :class:`PenaliseDilation`, :class:`PenaliseDilationAndLayouts`: the cost models.

>>> [n.op_type for n in dilated_model().graph.node]
['Conv', 'Relu']
>>> PenaliseDilation().cost(dilated_chain(layers=1)) > AnalyticCost().cost(dilated_chain(layers=1))
True
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tvm_pet.cost.analytic import AnalyticCost
from tvm_pet.ir import Op, ProgramBuilder


class PenaliseDilation:
    """A cost model under which dilated convolutions are slow (to exercise the optimizer)."""

    name = "penalise-dilation"

    def __init__(self):
        self.base = AnalyticCost()

    def cost(self, program):
        extra = sum(1.0 for n in program.nodes
                    if n.op is Op.CONV and any(d > 1 for d in n.attrs["dilations"]))
        return self.base.cost(program) + extra


class PenaliseDilationAndLayouts(PenaliseDilation):
    """Dilated convs are slow, and so is every layout node: a rewrite of one conv pays only when
    its layouts cancel against a neighbour's."""

    name = "penalise-dilation-and-layouts"

    def cost(self, program):
        layouts = sum(n.op in (Op.RESHAPE, Op.TRANSPOSE, Op.RESHAPE_TRANSPOSE)
                      for n in program.nodes)
        return super().cost(program) + 0.4 * layouts


def dilated_model() -> onnx.ModelProto:
    """An ONNX model: a dilated 3x3 convolution (pad 2) of ``x[1, 8, 12, 12]``, then a ReLU."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[2, 2, 2, 2], dilations=[2, 2]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "dilated", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 8, 12, 12])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 8, 12, 12])], initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def dilated_chain(layers=3, channels=4, size=8):
    """A CSRNet-like back end: dilated 3x3 convs (pad 2) with a bias and a ReLU each."""
    rng = np.random.default_rng(2)
    b = ProgramBuilder("chain")
    h = b.input("x", (1, channels, size, size))
    for k in range(layers):
        h = b.conv(h, b.weight(f"w{k}", rng.standard_normal((channels, channels, 3, 3)) * 0.3),
                   pads=2, dilations=2)
        h = b.add(h, b.weight(f"b{k}", rng.standard_normal((1, channels, 1, 1))))
        (h,) = b.opaque("Relu", [h])
    return b.build([h])
