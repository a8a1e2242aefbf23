"""The fusion region of a rewrite: the nodes whose compiled kernels a rewrite of a subset can change.

A compiler such as TVM fuses a reducing operator (conv, matmul) with the element-wise operators
after it, and chains of layout and element-wise operators with each other. Rewriting a subset can
therefore change the kernels of the non-reducing operators around it, but not beyond the nearest
reducing operators: those start and end kernels. The region of a subset is

- the subset;
- every operator connected to it through non-reducing operators, producers and consumers alike,
  opaque non-linear operators (ReLU, softmax, ...) included: a residual add after the subset
  joins the kernel of whichever reducing operator TVM fuses it with, so the other operand's
  producer belongs to the region too;
- the reducing operators where the walk stops, so that the kernels at the region's edge fuse as
  they do in the whole program; opaque operators that reduce (:data:`REDUCING_OPAQUE`: layer
  norm, softmax, reductions) stop it too, as TVM gives them kernels of their own (BERT's
  ``layer_norm``; its softmax takes the element-wise operators after it, as a conv does).
  Without this stop the walk went along the residual stream, through every layer norm, into
  every layer;
- but not the producer of a tensor read by more than :data:`MAX_SHARED_READS` operators (a
  transformer's attention mask, read by every layer): TVM fuses an operator into one kernel at
  most, so a tensor read by many is written out whole, and its producer's kernel ends there
  whatever the rewrite does. The tensor is an input of the region, as the kernels reading it
  take it in the whole program. Without these two stops no region of a 12-layer BERT fitted
  :data:`MAX_REGION`, and BERT-base's screen compared no mutant.

A measured cost model then costs a candidate from the region alone (the kernels the region has
before the rewrite and after it, :meth:`~tvm_pet.cost.model.CostModel` ``difference``) instead of
compiling the whole model for each candidate. Kernels at the edge that the rewrite does not touch
are the same on both sides and cancel.

>>> import numpy as np
>>> from tvm_pet.ir import ProgramBuilder
>>> b = ProgramBuilder(); y = b.input("x", (1, 4, 8, 8))
>>> for i in range(4):  # conv, relu, conv, relu, conv, relu, conv
...     y = b.conv(y, b.weight(f"w{i}", np.ones((4, 4, 3, 3), np.float32)), pads=1)
...     y = b.opaque("relu", [y])[0] if i < 3 else y
>>> p = b.build([y])
>>> r = fusion_region(p, extract(p, [4], "sub2"))  # the third conv
>>> r.nodes, [n.op.value for n in r.before.nodes], r.subset
((2, 3, 4, 5, 6), ['Conv', 'Opaque', 'Conv', 'Opaque', 'Conv'], (2,))
"""
from __future__ import annotations

import dataclasses

from tvm_pet.ir.node import Program
from tvm_pet.ir.ops import REDUCING, Op
from tvm_pet.search.partition import Subprogram, extract, replace_subprogram

#: Regions larger than this are not costed locally (the kernels of the whole programs are
#: compared instead: ``MeasuredCost.whole_difference``). At 64, 44 of swin_t's first 153
#: mutants had larger regions (97-100 nodes), each costed by lowering the whole 645-operator
#: model, 4 s; at 128 its search took 214 s instead of 264, and its screen compared 203
#: mutants instead of 156.
MAX_REGION = 128

#: The walk does not go back into the producer of a tensor read by more operators than this.
MAX_SHARED_READS = 2

#: Kinds of OPAQUE operators that reduce: the walk stops after them, as after a conv.
REDUCING_OPAQUE = frozenset({
    "LayerNormalization", "Softmax", "relax.nn.layer_norm", "relax.nn.rms_norm",
    "relax.nn.group_norm", "relax.nn.softmax", "relax.nn.log_softmax", "relax.sum",
    "relax.mean", "relax.max", "relax.min", "relax.prod", "relax.variance", "relax.std"})


def _stops(node) -> bool:
    """Whether the walk stops after ``node``: a reducing operator, or an opaque one that
    reduces."""
    return node.op in REDUCING or (node.op is Op.OPAQUE
                                   and node.attrs.get("kind") in REDUCING_OPAQUE)


@dataclasses.dataclass(frozen=True)
class Region:
    """The fusion region of one subset.

    Attributes:
        before: the region as a standalone program (its inputs are the tensors it reads but does
            not compute, its outputs those that something outside it reads).
        subset: positions, in ``before``, of the subset's nodes.
        nodes: positions of the region's nodes in the whole program.
    """

    before: Program
    subset: tuple[int, ...]
    nodes: tuple[int, ...]

    def after(self, part: Subprogram, corrected: Program) -> Program | None:
        """The region with the subset replaced by ``corrected`` (named onto ``part``'s inputs and
        outputs), or None when the subset does not have the same inputs and outputs inside the
        region as in the whole program."""
        inner = extract(self.before, self.subset, part.name)
        if (inner.program.input_names != part.program.input_names
                or inner.program.outputs != part.program.outputs):
            return None
        return replace_subprogram(self.before, inner, corrected)


def fusion_region(program: Program, part: Subprogram,
                  max_nodes: int = MAX_REGION) -> Region | None:
    """The region of ``program`` whose kernels a rewrite of ``part`` can change.

    Args:
        program: the whole program.
        part: the rewritten subset (its ``nodes`` are positions in ``program``).
        max_nodes: the largest region returned.

    Returns:
        The :class:`Region`, or None when it would have more than ``max_nodes`` nodes.
    """
    position = {id(n): k for k, n in enumerate(program.nodes)}
    chosen = set(part.nodes)
    frontier = list(part.nodes)
    while frontier:
        node = program.nodes[frontier.pop()]
        for k in _producers(program, node, position) + _consumers(program, node, position):
            if k in chosen:
                continue
            chosen.add(k)
            if not _stops(program.nodes[k]):
                frontier.append(k)  # the walk stops after a reducing operator
        if len(chosen) > max_nodes:
            return None
    nodes = tuple(sorted(chosen))
    at = {k: j for j, k in enumerate(nodes)}
    before = extract(program, nodes, f"region of {part.name}").program
    return Region(before, tuple(at[k] for k in part.nodes), nodes)


def _producers(program: Program, node, position) -> list[int]:
    return [position[id(program.producers[i])] for i in node.inputs if i in program.producers
            and len(program.consumers.get(i, ())) <= MAX_SHARED_READS]


def _consumers(program: Program, node, position) -> list[int]:
    return [position[id(c)] for o in node.outputs for c in program.consumers.get(o, ())]
