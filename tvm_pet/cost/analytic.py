"""The default cost model: a roofline estimate per node, without TVM.

Each node costs ``max(flops / peak_flops, bytes_moved / bandwidth) + launch_overhead`` seconds and
a program costs the sum over its nodes. ``flops`` comes from the rule table :data:`FLOPS` (keyed by
:class:`~tvm_pet.ir.ops.Op`); ``bytes_moved`` counts every distinct input read once and every
output written once, in float32. Three kinds of node cost nothing:

* RESHAPE, which is a view of its input;
* FILL, and every multi-linear node whose inputs are all constants (weights, FILL outputs or
  outputs of other such nodes): they are precomputed before the program runs
  (:func:`tvm_pet.search.postopt.precompute_weights` folds them into weights).

The model only *ranks* candidate programs for the optimizer (PET, Algorithm 2); its absolute
numbers are rough. The measured model built on TVM comes later, behind the same
:class:`~tvm_pet.cost.model.CostModel` protocol.

>>> import numpy as np
>>> from tvm_pet.ir import ProgramBuilder
>>> b = ProgramBuilder(); x = b.input("x", (64, 64)); w = b.weight("w", np.ones((64, 64)))
>>> model = AnalyticCost()
>>> model.cost(b.build([b.matmul(x, w)])) > model.launch_overhead
True
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from tvm_pet.ir import im2col, winograd
from tvm_pet.ir.node import Attrs, Node, Program, Shape
from tvm_pet.ir.ops import MULTILINEAR, Op

#: Bytes per tensor element (programs run in float32).
BYTES_PER_ELEMENT = 4

FlopRule = Callable[[Attrs, Sequence[Shape], Sequence[Shape]], float]


def _size(shape: Shape) -> int:
    return math.prod(shape)


def _per_output_element(attrs: Attrs, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    return float(sum(_size(s) for s in outs))


def _no_arithmetic(attrs: Attrs, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    return 0.0


def _conv(attrs: Attrs, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    m = attrs.get("winograd")
    if m:  # the products, and each tile's input and output transforms (by rows then columns,
        # 2a an entry, as both lowerings do by default, or dense a² x a²; and m² x a²)
        c, k, a2 = ins[0][1], ins[1][0], (m + 2) ** 2
        into = 2 * (m + 2) if winograd.SEPARABLE_INPUT or winograd.CHANNELS_LAST else a2
        return 2.0 * winograd.tiles(ins[0], attrs, m) * a2 * (c * k + c * into + k * m * m)
    # one multiply-add per output element, input channel of the group and kernel tap
    return 2.0 * _size(outs[0]) * _size(ins[1][1:])


def _matmul(attrs: Attrs, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    return 2.0 * _size(outs[0]) * ins[0][-1]


def _batchnorm(attrs: Attrs, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    return 2.0 * _size(outs[0])


def _avgpool(attrs: Attrs, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    # a window sum and one division per output element
    return float(_size(outs[0]) * (_size(attrs["kernel"]) + 1))


#: Floating-point operations of one node, by kind: ``rule(attrs, input_shapes, output_shapes)``.
#: Layout kinds do no arithmetic (they cost their memory traffic); OPAQUE operators are costed
#: as element-wise, one operation per output element.
FLOPS: dict[Op, FlopRule] = {
    Op.ADD:               _per_output_element,
    Op.MUL:               _per_output_element,
    Op.CONV:              _conv,
    Op.MATMUL:            _matmul,
    Op.BATCHNORM:         _batchnorm,
    Op.AVGPOOL:           _avgpool,
    Op.CONCAT:            _no_arithmetic,
    Op.SPLIT:             _no_arithmetic,
    Op.SLICE:             _no_arithmetic,
    Op.PAD:               _no_arithmetic,
    Op.TRANSPOSE:         _no_arithmetic,
    Op.RESHAPE:           _no_arithmetic,
    Op.RESHAPE_TRANSPOSE: _no_arithmetic,
    Op.UPDATE:            _no_arithmetic,
    Op.FILL:              _no_arithmetic,
    Op.OPAQUE:            _per_output_element,
}

#: Kinds that cost nothing wherever they appear (a view, a constant).
FREE = frozenset({Op.RESHAPE, Op.FILL})


def constant_tensors(program: Program) -> frozenset[str]:
    """Tensors known before the program runs: weights, FILL outputs, and the outputs of
    multi-linear nodes whose inputs are all constant.

    >>> import numpy as np
    >>> from tvm_pet.ir import ProgramBuilder
    >>> b = ProgramBuilder(); x = b.input("x", (2, 2)); w = b.weight("w", np.ones((2, 2)))
    >>> t = b.transpose(w, (1, 0), out="t")
    >>> sorted(constant_tensors(b.build([b.matmul(x, t)])))
    ['t', 'w']
    """
    known = set(program.weights)
    for node in program.nodes:
        if node.op in MULTILINEAR and all(i in known for i in node.inputs):
            known.update(node.outputs)
    return frozenset(known)


def bytes_moved(program: Program, node: Node) -> int:
    """Bytes a node reads (each distinct input once) and writes, in float32."""
    shapes = program.shapes
    elements = sum(_size(shapes[i]) for i in dict.fromkeys(node.inputs))
    m = node.attrs.get("winograd") if node.op is Op.CONV else None
    if m:  # the transformed filters: (m + 2)² positions a filter instead of its 9 taps
        elements += _size(shapes[node.inputs[1]]) * ((m + 2) ** 2 - 9) // 9
    if node.op is Op.CONV and node.attrs.get("im2col"):  # the windows, written and read back
        elements += 2 * im2col.window_values(shapes[node.inputs[0]], shapes[node.inputs[1]],
                                             node.attrs)
    elements += sum(_size(shapes[o]) for o in node.outputs)
    return elements * BYTES_PER_ELEMENT


class AnalyticCost:
    """A roofline cost model: the :class:`~tvm_pet.cost.model.CostModel` used without TVM.

    Args:
        peak_flops: arithmetic throughput in FLOP/s. The default suits a 2-core AVX-512 CPU.
        bandwidth: memory bandwidth in bytes/s.
        launch_overhead: fixed seconds per kernel (node) launched.

    Only the ranking of programs matters to the optimizer; the measured TVM model replaces this
    one when absolute numbers are needed.
    """

    name = "analytic"

    def __init__(self, peak_flops: float = 100e9, bandwidth: float = 20e9,
                 launch_overhead: float = 5e-6):
        for label, value in (("peak_flops", peak_flops), ("bandwidth", bandwidth)):
            if not value > 0:
                raise ValueError(f"AnalyticCost.{label} must be positive, got {value}")
        if not launch_overhead >= 0:
            raise ValueError(f"AnalyticCost.launch_overhead must be >= 0, got {launch_overhead}")
        self.peak_flops = float(peak_flops)
        self.bandwidth = float(bandwidth)
        self.launch_overhead = float(launch_overhead)

    def __repr__(self) -> str:
        return (f"AnalyticCost(peak_flops={self.peak_flops:g}, bandwidth={self.bandwidth:g}, "
                f"launch_overhead={self.launch_overhead:g})")

    def cost(self, program: Program) -> float:
        """Estimated seconds to run ``program`` once: the sum of :meth:`node_cost`."""
        constants = constant_tensors(program)
        return sum(self._node_cost(program, node, constants) for node in program.nodes)

    def node_cost(self, program: Program, node: Node) -> float:
        """Estimated seconds of one node of ``program`` (0 for views and precomputed nodes)."""
        return self._node_cost(program, node, constant_tensors(program))

    def breakdown(self, program: Program) -> Mapping[str, float]:
        """Seconds per node, keyed by the node's first output (for reports)."""
        constants = constant_tensors(program)
        return {n.outputs[0]: self._node_cost(program, n, constants) for n in program.nodes}

    def _node_cost(self, program: Program, node: Node, constants: frozenset[str]) -> float:
        if node.op in FREE or (node.op in MULTILINEAR and all(o in constants for o in node.outputs)):
            return 0.0
        shapes = program.shapes
        flops = FLOPS[node.op](node.attrs, [shapes[i] for i in node.inputs],
                               [shapes[o] for o in node.outputs])
        traffic = bytes_moved(program, node)
        return max(flops / self.peak_flops, traffic / self.bandwidth) + self.launch_overhead
