"""A small builder for programs, so that tests, importers and rewrites read like the math.

>>> import numpy as np
>>> b = ProgramBuilder("demo")
>>> x = b.input("x", (1, 3, 8, 8))
>>> w = b.weight("w", np.ones((4, 3, 3, 3), np.float32))
>>> y = b.conv(x, w, pads=1)
>>> b.build([y]).shapes[y]
(1, 4, 8, 8)
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from tvm_pet.errors import ShapeError
from tvm_pet.ir.node import Attrs, Node, Program, Shape, TensorSpec
from tvm_pet.ir.ops import Op
from tvm_pet.ir.shapes import SHAPE_RULES


def _per_axis(value: int | Sequence[int], n: int) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else (int(value),) * n


def unused_name(hint: str, taken: set[str]) -> str:
    """``hint``, or ``hint_1``, ``hint_2``, ... : the first not in ``taken``, which it is added
    to.

    >>> taken = {"x"}; unused_name("x", taken), unused_name("x", taken), unused_name("y", taken)
    ('x_1', 'x_2', 'y')
    """
    name, k = hint, 0
    while name in taken:
        k += 1
        name = f"{hint}_{k}"
    taken.add(name)
    return name


class ProgramBuilder:
    """Builds a :class:`Program` node by node; every method returns the new tensor's name."""

    def __init__(self, name: str = "program", prefix: str = "t", reserved: Iterable[str] = ()):
        """Args: the program's name, the prefix of fresh names, and names fresh ones must avoid."""
        self.name = name
        self.prefix = prefix
        self.reserved = set(reserved)
        self.inputs: list[TensorSpec] = []
        self.weights: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []
        self.shapes: dict[str, Shape] = {}
        self._count = 0

    def fresh(self, hint: str | None = None) -> str:
        """A tensor name not used yet."""
        while True:
            self._count += 1
            name = f"{self.prefix}{self._count}" if hint is None else f"{hint}_{self._count}"
            if name not in self.shapes and name not in self.reserved:
                return name

    def input(self, name: str, shape: Sequence[int]) -> str:
        self.inputs.append(TensorSpec(name, tuple(shape)))
        self.shapes[name] = tuple(int(d) for d in shape)
        return name

    def weight(self, name: str, value: np.ndarray) -> str:
        self.weights[name] = np.asarray(value, dtype=np.float32)
        self.shapes[name] = tuple(self.weights[name].shape)
        return name

    def node(self, op: Op, inputs: Sequence[str], attrs: dict | Attrs | None = None,
             outputs: Sequence[str] | None = None) -> tuple[str, ...]:
        """Add any node; returns its outputs. Shapes are checked right away."""
        attrs = Attrs(attrs or {})
        try:
            shapes = SHAPE_RULES[op](attrs, [self.shapes[i] for i in inputs])
        except ShapeError as e:
            raise ShapeError(f"while building {op.value}({', '.join(inputs)}): {e}") from None
        outputs = tuple(outputs) if outputs else tuple(self.fresh() for _ in shapes)
        for o, s in zip(outputs, shapes):
            self.shapes[o] = tuple(s)
        self.nodes.append(Node(op, tuple(inputs), outputs, attrs))
        return outputs

    def _one(self, op: Op, inputs: Sequence[str], attrs=None, out: str | None = None) -> str:
        return self.node(op, inputs, attrs, None if out is None else [out])[0]

    def add(self, a: str, b: str, out: str | None = None) -> str:
        return self._one(Op.ADD, [a, b], out=out)

    def mul(self, a: str, b: str, out: str | None = None) -> str:
        return self._one(Op.MUL, [a, b], out=out)

    def conv(self, x: str, w: str, strides=1, pads=0, dilations=1, groups: int = 1,
             out: str | None = None) -> str:
        """Convolution; ``pads`` is one int, one per axis (symmetric), or begins + ends."""
        nsp = len(self.shapes[x]) - 2
        pads = _per_axis(pads, nsp)
        pads = pads * 2 if len(pads) == nsp else pads
        return self._one(Op.CONV, [x, w], {"strides": _per_axis(strides, nsp), "pads": pads,
                                           "dilations": _per_axis(dilations, nsp),
                                           "groups": groups}, out)

    def matmul(self, a: str, b: str, out: str | None = None) -> str:
        return self._one(Op.MATMUL, [a, b], out=out)

    def batchnorm(self, x: str, scale: str, shift: str, out: str | None = None) -> str:
        return self._one(Op.BATCHNORM, [x, scale, shift], out=out)

    def avgpool(self, x: str, kernel, strides=None, pads=0, count_include_pad: bool = False,
                out: str | None = None) -> str:
        nsp = len(self.shapes[x]) - 2
        kernel = _per_axis(kernel, nsp)
        pads = _per_axis(pads, nsp)
        pads = pads * 2 if len(pads) == nsp else pads
        return self._one(Op.AVGPOOL, [x], {"kernel": kernel, "pads": pads,
                                           "strides": _per_axis(strides or kernel, nsp),
                                           "count_include_pad": bool(count_include_pad)}, out)

    def concat(self, xs: Sequence[str], axis: int, out: str | None = None) -> str:
        return self._one(Op.CONCAT, list(xs), {"axis": axis}, out)

    def split(self, x: str, axis: int, sizes: Sequence[int]) -> tuple[str, ...]:
        return self.node(Op.SPLIT, [x], {"axis": axis, "sizes": tuple(sizes)})

    def slice(self, x: str, starts: Sequence[int], stops: Sequence[int],
              steps: Sequence[int] | None = None, out: str | None = None) -> str:
        """Slice with one start, stop (exclusive) and step per axis."""
        steps = tuple(steps) if steps is not None else (1,) * len(starts)
        sizes = tuple(max(0, -(-(e - b) // s)) for b, e, s in zip(starts, stops, steps))
        return self._one(Op.SLICE, [x], {"starts": tuple(starts), "steps": steps,
                                         "sizes": sizes}, out)

    def pad(self, x: str, pads: Sequence[int], out: str | None = None) -> str:
        """Zero padding; ``pads`` is begins + ends, one per axis each."""
        return self._one(Op.PAD, [x], {"pads": tuple(pads)}, out)

    def transpose(self, x: str, perm: Sequence[int], out: str | None = None) -> str:
        return self._one(Op.TRANSPOSE, [x], {"perm": tuple(perm)}, out)

    def reshape(self, x: str, shape: Sequence[int], out: str | None = None) -> str:
        shape = list(shape)
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            shape[shape.index(-1)] = math.prod(self.shapes[x]) // max(known, 1)
        return self._one(Op.RESHAPE, [x], {"shape": tuple(shape)}, out)

    def reshape_transpose(self, x: str, split_shape: Sequence[int], perm: Sequence[int],
                          shape: Sequence[int], out: str | None = None) -> str:
        return self._one(Op.RESHAPE_TRANSPOSE, [x], {"split_shape": tuple(split_shape),
                                                     "perm": tuple(perm), "shape": tuple(shape)}, out)

    def update(self, base: str, patch: str, starts: Sequence[int], steps: Sequence[int] | None = None,
               out: str | None = None) -> str:
        steps = tuple(steps) if steps is not None else (1,) * len(starts)
        return self._one(Op.UPDATE, [base, patch], {"starts": tuple(starts), "steps": steps}, out)

    def fill(self, shape: Sequence[int], value, out: str | None = None) -> str:
        """A constant tensor whose every element is ``value`` (an int, a Fraction or a float)."""
        from fractions import Fraction
        v = Fraction(value).limit_denominator(1 << 30) if isinstance(value, float) else Fraction(value)
        return self._one(Op.FILL, [], {"shape": tuple(shape), "value": (v.numerator, v.denominator)},
                         out)

    def opaque(self, kind: str, inputs: Sequence[str], shapes: Sequence[Sequence[int]] | None = None,
               params: dict | None = None) -> tuple[str, ...]:
        """A non-linear operator; by default it has one output shaped like its first input."""
        shapes = shapes if shapes is not None else [self.shapes[inputs[0]]]
        return self.node(Op.OPAQUE, inputs, {"kind": kind, "shapes": tuple(map(tuple, shapes)),
                                             "params": params or {}})

    def build(self, outputs: Sequence[str]) -> Program:
        """The finished program, keeping only the weights it uses."""
        used = {i for n in self.nodes for i in n.inputs} | set(outputs)
        weights = {k: v for k, v in self.weights.items() if k in used}
        return Program(tuple(self.inputs), weights, tuple(self.nodes), tuple(outputs), self.name)
