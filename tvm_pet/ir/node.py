"""Immutable program nodes and programs.

A :class:`Program` is a DAG of :class:`Node` over named tensors with static shapes. Nodes are
frozen; a transformation builds a new program with :meth:`Program.replace` instead of editing one.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import types
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tvm_pet.errors import ProgramError
from tvm_pet.ir import im2col
from tvm_pet.ir import winograd as wino
from tvm_pet.ir.ops import Op

Shape = tuple[int, ...]


def _freeze(value: Any) -> Any:
    """Turn lists (and NumPy scalars) into tuples and ints so that attributes hash."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, Mapping):
        return Attrs(value)
    return value


class Attrs(Mapping):
    """A frozen, hashable mapping of attribute names to (tuples of) plain values.

    >>> Attrs({"axis": 1})["axis"]
    1
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()):
        pairs = items.items() if isinstance(items, Mapping) else items
        object.__setattr__(self, "_items", tuple(sorted((str(k), _freeze(v)) for k, v in pairs)))

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self):
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Attrs) and self._items == other._items

    def __setattr__(self, name, value):
        raise AttributeError("Attrs is immutable")

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k}={v!r}" for k, v in self._items) + "}"

    def replace(self, **changes: Any) -> "Attrs":
        """Return a copy with some attributes changed."""
        merged = dict(self._items)
        merged.update(changes)
        return Attrs(merged)


@dataclasses.dataclass(frozen=True, slots=True)
class Node:
    """One operator application: ``outputs = op(inputs; attrs)``."""

    op: Op
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Attrs = Attrs()

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))

    @property
    def output(self) -> str:
        """The single output of a single-output node."""
        if len(self.outputs) != 1:
            raise ProgramError(f"node {self.describe()} has {len(self.outputs)} outputs, not one")
        return self.outputs[0]

    @property
    def label(self) -> str:
        """The operator as summaries name it: an OPAQUE node's kind, ``WinogradConv`` for a CONV
        lowered by Winograd's algorithm (:mod:`tvm_pet.ir.winograd`; ``WinogradConvKT`` with
        the filters-by-tiles products), ``Im2colConvT`` for one computed as a matrix product
        over its windows (:mod:`tvm_pet.ir.im2col`), else the kind's name."""
        if self.op is Op.OPAQUE:
            return self.attrs["kind"]
        if self.op is Op.CONV and self.attrs.get("winograd"):
            return wino.LABELS[wino.products(self.attrs)]
        if self.op is Op.CONV and self.attrs.get("im2col"):
            return im2col.LABELS[self.attrs["im2col"]]
        return self.op.value

    def describe(self) -> str:
        """A one-line, readable form such as ``y = Conv(x, w; strides=(1, 1), ...)``."""
        outs = ", ".join(self.outputs)
        kind = self.attrs["kind"] if self.op is Op.OPAQUE else self.op.value
        attrs = "" if not self.attrs else "; " + ", ".join(
            f"{k}={v}" for k, v in self.attrs.items() if k not in ("shapes", "params"))
        return f"{outs} = {kind}({', '.join(self.inputs)}{attrs})"


@dataclasses.dataclass(frozen=True, slots=True)
class TensorSpec:
    """A named runtime input with a static shape."""

    name: str
    shape: Shape
    dtype: str = "float32"

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))


def _frozen_array(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=np.float32, copy=True)
    a.setflags(write=False)
    return a


@dataclasses.dataclass(frozen=True)
class Program:
    """A tensor program: runtime inputs, weights (constants with values), nodes and outputs.

    Shapes of every tensor are inferred on construction (see :attr:`shapes`); a malformed program
    raises :class:`~tvm_pet.errors.ProgramError` or :class:`~tvm_pet.errors.ShapeError` naming the
    node at fault.
    """

    inputs: tuple[TensorSpec, ...]
    weights: Mapping[str, np.ndarray]
    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]
    name: str = "program"

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        frozen = {k: (v if isinstance(v, np.ndarray) and not v.flags.writeable
                      and v.dtype == np.float32 else _frozen_array(v))
                  for k, v in self.weights.items()}
        object.__setattr__(self, "weights", types.MappingProxyType(frozen))
        self.shapes  # infer now, so that a bad program fails where it is built

    @functools.cached_property
    def shapes(self) -> Mapping[str, Shape]:
        """The shape of every tensor of the program, by name."""
        from tvm_pet.ir.check import infer_shapes
        return types.MappingProxyType(infer_shapes(self))

    @functools.cached_property
    def producers(self) -> Mapping[str, Node]:
        """The node that defines each intermediate tensor."""
        return types.MappingProxyType({o: n for n in self.nodes for o in n.outputs})

    @functools.cached_property
    def consumers(self) -> Mapping[str, tuple[Node, ...]]:
        """The nodes that read each tensor, in program order."""
        users: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                users.setdefault(i, []).append(n)
        return types.MappingProxyType({k: tuple(v) for k, v in users.items()})

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    def replace(self, **changes: Any) -> "Program":
        """A new program with some fields changed (shapes are inferred again)."""
        return dataclasses.replace(self, **changes)

    def is_multilinear(self) -> bool:
        """True when no node is OPAQUE."""
        return all(n.op is not Op.OPAQUE for n in self.nodes)

    def describe(self) -> str:
        """A readable listing of the program, one node per line."""
        lines = [f"program {self.name}("]
        lines += [f"  {t.name}: {list(t.shape)}" for t in self.inputs]
        lines += [f"  {k}: {list(v.shape)} (weight)" for k, v in self.weights.items()]
        lines.append(") {")
        lines += ["  " + n.describe() for n in self.nodes]
        lines.append(f"  return {', '.join(self.outputs)}")
        lines.append("}")
        return "\n".join(lines)


def free_name(name: str, taken) -> str:
    """``name``, or ``name1``, ``name2``, ... : the first that is not in ``taken``.

    >>> free_name("y", {"y", "y1"})
    'y2'
    """
    k, out = 0, name
    while out in taken:
        k += 1
        out = f"{name}{k}"
    return out


def weight_key(array: np.ndarray) -> str:
    """A content key for a weight: equal keys mean equal shape and equal values."""
    a = np.ascontiguousarray(array, dtype=np.float32)
    return f"{a.shape}:{hashlib.sha1(a.tobytes()).hexdigest()}"


class WeightKeys:
    """A memo of :func:`weight_key` by array identity, for one search (weights are read-only).

    It keeps a reference to every array it has seen, so an identity is never reused while the
    memo lives.
    """

    def __init__(self):
        self._memo: dict[int, tuple[np.ndarray, str]] = {}

    def __call__(self, array: np.ndarray) -> str:
        hit = self._memo.get(id(array))
        if hit is None or hit[0] is not array:
            hit = (array, weight_key(array))
            self._memo[id(array)] = hit
        return hit[1]
