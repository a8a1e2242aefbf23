"""Pricing a choice of e-nodes (a move of the extraction's descent, :func:`.extract.descend`)
as the cost model prices a program, without compiling the whole program for each.

- :class:`AdditivePrice`: an additive cost model (the analytic one), summed over the e-nodes
  the program computes;
- :class:`RegionPrice`: a cost model with a ``difference`` of two regions (the measured one),
  by the fusion regions a move changes;
- :class:`WholePrice`: any other, the whole program.

Each has ``start(choice)`` (the first program and its cost), ``__call__(choice)`` (the price,
None for a cyclic or incomplete choice) and ``accept(choice, best)`` (the price and program of
a choice kept, when it costs less than ``best``).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from tvm_pet.cost.model import CostModel
from tvm_pet.ir.keys import canonical
from tvm_pet.ir.node import Node, Program, TensorSpec
from tvm_pet.ir.ops import MULTILINEAR
from tvm_pet.search.eqsat.extract import CyclicChoice, ENode, Snapshot, _post_order, build


class AdditivePrice:
    """Prices a choice with an additive cost model (the analytic one): the sum over the
    e-classes its program computes of what the model charges for the chosen e-node alone,
    nothing for a multi-linear e-node over constants (weights, and such e-nodes over them, as
    the choice computes them). For the analytic model that is the whole program's cost, in a
    walk over the e-classes instead of a program built, checked and costed; the descent still
    costs each program it keeps as a whole (:meth:`accept`).
    """

    relative = False

    def __init__(self, snap: Snapshot, roots: list[int], original: Program,
                 cost: Callable[[Program], float], model: CostModel):
        self.snap, self.roots, self.original, self.cost = snap, roots, original, cost
        self.model = model
        self._alone: dict[tuple, float] = {}

    def start(self, choice: Mapping[int, ENode]) -> tuple[float, Program] | None:
        return self.accept(choice, math.inf)

    def __call__(self, choice: Mapping[int, ENode]) -> float | None:
        """The price of ``choice``; None when it is cyclic or incomplete."""
        try:
            order = _post_order(self.snap, choice, self.roots)
        except (CyclicChoice, KeyError):
            return None
        specs, const, total = self.snap.graph.registry.specs, set(), 0.0
        for c in order:
            n = choice[c]
            if n.kind == "weight":
                const.add(c)
            elif n.kind == "get":
                if n.children[0] in const:
                    const.add(c)
            elif n.kind == "op":
                reads = self.snap.reads(n)
                if specs[n.lit].op in MULTILINEAR and all(k in const for k in reads):
                    const.add(c)
                else:
                    total += self._cost_alone(n.lit, reads)
        return total

    def _cost_alone(self, lit: str, reads: tuple[int, ...]) -> float:
        """What the model charges for operator ``lit`` alone on inputs ``reads`` (an e-class
        read twice is one input read twice, as in the program)."""
        pattern = tuple(reads.index(k) for k in reads)
        found = self._alone.get((lit, pattern))
        if found is None:
            spec = self.snap.graph.registry.specs[lit]
            names = [f"i{k}" for k in pattern]
            ins = tuple(TensorSpec(f"i{k}", spec.in_shapes[k]) for k in sorted(set(pattern)))
            outs = [f"o{k}" for k in range(len(spec.out_shapes))]
            alone = Program(ins, {}, (spec.node(names, outs),), tuple(outs), "e-node")
            found = self._alone[(lit, pattern)] = float(self.model.cost(alone))
        return found

    def accept(self, choice: Mapping[int, ENode], best: float) -> tuple[float, Program] | None:
        """The whole program of a choice priced below ``best`` and its cost, when the whole
        program does cost less than ``best`` (else None)."""
        try:
            program = build(self.snap, choice, self.original, self.roots)
        except (CyclicChoice, KeyError):
            return None
        c = self.cost(program)
        return (c, program) if c < best else None


class RegionPrice:
    """Prices a move by the fusion regions it changes, as Algorithm 2 prices a rewrite
    (:meth:`~tvm_pet.search.optimizer.Optimizer.rewrite_cost`): for a cost model with a
    ``difference(before, after)`` of two regions (the measured one, which compiles both and
    times only the kernels they do not share).

    Both choices are built with stable names (:func:`build`), so the nodes they share are
    equal; the nodes of the current program the move drops, and those of the new program it
    adds, are the rewrite. Each side's fusion region (:func:`~tvm_pet.search.region.fusion_region`:
    out to the nearest reducing operators, residual partners included) is taken around them,
    and the unchanged nodes of both regions join both sides, so that the kernels at the edge
    fuse alike before and after and cancel. Non-additive fusion is thus accounted as in
    Algorithm 2: a move costs the kernels TVM builds for its region, fused as in the whole
    program, and one move costs one region's kernels (cached by the regions' structure).
    Where a region is larger than :data:`~tvm_pet.search.region.MAX_REGION` nodes or cannot be
    compiled alone, the model's ``whole_difference`` of the two programs is taken (the kernels
    they do not share), else the new program is costed whole.

    Its prices are relative to the program it last moved to (:attr:`relative`).
    """

    relative = True

    def __init__(self, snap: Snapshot, roots: list[int], original: Program,
                 cost: Callable[[Program], float], model: CostModel, keys):
        self.snap, self.roots, self.original, self.cost = snap, roots, original, cost
        self.model, self.keys = model, keys
        self.differences: dict[tuple, float | None] = {}
        self.current: Program | None = None
        self.price_now = math.inf
        self._last: tuple[Mapping, Program, float] | None = None

    def start(self, choice: Mapping[int, ENode], price: float | None = None
              ) -> tuple[float, Program] | None:
        """Start from ``choice``, priced ``price`` (the whole program's cost when None)."""
        try:
            self.current = build(self.snap, choice, self.original, self.roots, stable=True)
            program = build(self.snap, choice, self.original, self.roots)
        except (CyclicChoice, KeyError):
            return None
        self.price_now = self.cost(program) if price is None else price
        return self.price_now, program

    def __call__(self, choice: Mapping[int, ENode]) -> float | None:
        try:
            new = build(self.snap, choice, self.original, self.roots, stable=True)
        except (CyclicChoice, KeyError):
            return None
        price = self.price_now + self.delta(self.current, new)
        self._last = (choice, new, price)
        return price

    def delta(self, before: Program, after: Program) -> float:
        """Seconds ``after`` adds to ``before`` (stable builds of two choices)."""
        kept = set(before.nodes) & set(after.nodes)
        dropped = [k for k, n in enumerate(before.nodes) if n not in kept]
        added = [k for k, n in enumerate(after.nodes) if n not in kept]
        if not dropped and not added:
            return 0.0
        regions = _move_regions(before, after, dropped, added)
        delta = None
        if regions is not None:
            key = tuple(canonical(r, self.keys)[0] for r in regions)
            if key not in self.differences:
                self.differences[key] = self.model.difference(*regions)
            delta = self.differences[key]
        whole = getattr(self.model, "whole_difference", None)
        if delta is None and whole is not None:
            delta = whole(before, after)
        return self.cost(after) - self.cost(before) if delta is None else delta

    def accept(self, choice: Mapping[int, ENode], best: float) -> tuple[float, Program] | None:
        """Move to ``choice`` when its price is below ``best``; its price and program."""
        if (self._last is None or self._last[0] is not choice) and self(choice) is None:
            return None
        _, stable, price = self._last
        if not price < best:
            return None
        self.current, self.price_now = stable, price
        return price, build(self.snap, choice, self.original, self.roots)


def _move_regions(before: Program, after: Program, dropped: list[int], added: list[int]
                  ) -> tuple[Program, Program] | None:
    """The fusion region of a move on each side: the nodes dropped from ``before`` or added to
    ``after``, with the unchanged nodes of either side's region on both (None when a region
    exceeds :data:`~tvm_pet.search.region.MAX_REGION` nodes)."""
    from tvm_pet.search.partition import extract
    from tvm_pet.search.region import MAX_REGION, fusion_region
    shared: set[Node] = set()
    for program, changed in ((before, dropped), (after, added)):
        if not changed:
            continue
        region = fusion_region(program, extract(program, changed, "move"))
        if region is None:
            return None
        mine = set(changed)
        shared.update(program.nodes[k] for k in region.nodes if k not in mine)
    sides = []
    for program, changed in ((before, dropped), (after, added)):
        nodes = sorted(set(changed) | {k for k, n in enumerate(program.nodes) if n in shared})
        if len(nodes) > MAX_REGION:
            return None
        sides.append(extract(program, nodes, "region of a move").program)
    return sides[0], sides[1]


class WholePrice:
    """Prices a choice by costing its whole program (a cost model neither additive nor with a
    ``difference``)."""

    relative = False

    def __init__(self, snap: Snapshot, roots: list[int], original: Program,
                 cost: Callable[[Program], float]):
        self.snap, self.roots, self.original, self.cost = snap, roots, original, cost
        self._last: tuple[Mapping, float, Program] | None = None

    def start(self, choice: Mapping[int, ENode]) -> tuple[float, Program] | None:
        return self.accept(choice, math.inf)

    def __call__(self, choice: Mapping[int, ENode]) -> float | None:
        try:
            program = build(self.snap, choice, self.original, self.roots)
        except (CyclicChoice, KeyError):
            return None
        c = self.cost(program)
        self._last = (choice, c, program)
        return c

    def accept(self, choice: Mapping[int, ENode], best: float) -> tuple[float, Program] | None:
        if (self._last is None or self._last[0] is not choice) and self(choice) is None:
            return None
        _, c, program = self._last
        return (c, program) if c < best else None
