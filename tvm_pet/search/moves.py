"""The operator instances the generator may apply, with parameters drawn from the subprogram.

Nothing here is written for one transformation. A :class:`Vocabulary` collects what the
subprogram itself offers (divisors and factors of its shapes, its strides, dilations, pads,
kernel sizes, channel counts, pooling windows), and each ``*_moves`` function enumerates every
shape-valid application of one operator kind over the tensors available so far:

- ``regroup`` (RESHAPE_TRANSPOSE, paper 4.2): move a factor f of some axes into another axis, or
  of one axis into several, splitting each axis as (f, n/f) ("blocks") or (n/f, f) ("parity")
  and placing the factor outer or inner. Batch <-> spatial tiling, space-to-batch by parity and
  side-by-side images are all instances;
- CONV / MATMUL with strides, dilations, pads and groups from the vocabulary;
- PAD of data (to a multiple of a factor, or a kernel halo) and of weights (to the data's channel
  count, or to the largest kernel); CONCAT of data or of weights; FILL constants shaped for a
  depthwise convolution with the subprogram's pooling windows;
- final moves towards the target shapes: regroup, RESHAPE, strided SLICE, SPLIT.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Iterator, Sequence
from fractions import Fraction

from tvm_pet.ir.node import Attrs, Program, Shape
from tvm_pet.ir.ops import Op
from tvm_pet.ir.shapes import SHAPE_RULES
from tvm_pet.errors import ShapeError

Move = tuple[Op, tuple[str, ...], Attrs]


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """Parameters the subprogram offers to its mutants."""

    factors: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[tuple[int, ...], ...]
    kernels: tuple[tuple[int, ...], ...]
    windows: tuple[tuple[int, ...], ...]

    @staticmethod
    def of(program: Program) -> "Vocabulary":
        strides, dilations, pads, kernels, windows = {1}, {1}, set(), set(), set()
        for n in program.nodes:
            if n.op is Op.CONV:
                strides.update(n.attrs["strides"]); dilations.update(n.attrs["dilations"])
                pads.add(n.attrs["pads"]); kernels.add(program.shapes[n.inputs[1]][2:])
            elif n.op is Op.AVGPOOL:
                strides.update(n.attrs["strides"]); pads.add(n.attrs["pads"])
                windows.add((n.attrs["kernel"], n.attrs["strides"], n.attrs["pads"]))
        factors = sorted({2, 3} | {s for s in strides | dilations if 1 < s <= 4})
        return Vocabulary(tuple(factors), tuple(sorted(strides)), tuple(sorted(dilations)),
                          tuple(sorted(pads)), tuple(sorted(kernels)), tuple(sorted(windows)))


def infer(op: Op, attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...] | None:
    """Output shapes, or None when the instance is not shape-valid (memoized)."""
    return _infer(op, attrs, tuple(tuple(s) for s in shapes))


@functools.lru_cache(maxsize=1 << 16)
def _infer(op: Op, attrs: Attrs, shapes: tuple[Shape, ...]) -> tuple[Shape, ...] | None:
    try:
        outs = SHAPE_RULES[op](attrs, shapes)
    except (ShapeError, KeyError, TypeError, IndexError, ValueError):
        return None
    return outs if all(all(d >= 1 for d in s) for s in outs) else None


# --------------------------------------------------------------------------------- regroup


def regroup_attrs(shape: Shape, f: int, pairs: Sequence[tuple[int, int]], split: str,
                  place: str) -> Attrs | None:
    """RESHAPE_TRANSPOSE attributes moving factor ``f`` along each (source, destination) pair."""
    rank = len(shape)
    given = {d: [dst for src, dst in pairs if src == d] for d in range(rank)}
    taken = {d: [src for src, dst in pairs if dst == d] for d in range(rank)}
    pieces, owner = [], []          # sizes in source order; (kind, dim, partner) per piece
    for d in range(rank):
        k = len(given[d])
        if k and shape[d] % f ** k:
            return None
        rest = [("rest", d, d)]
        moved = [("f", d, dst) for dst in given[d]]
        for kind, dim, partner in (moved + rest if split == "outer" else rest + moved):
            pieces.append(shape[d] // f ** k if kind == "rest" else f)
            owner.append((kind, dim, partner))
    perm, out = [], []
    for d in range(rank):
        rest = [owner.index(("rest", d, d))]
        moved = [owner.index(("f", src, d)) for src in taken[d]]
        group = moved + rest if place == "outer" else rest + moved
        perm += group
        out.append(math.prod(pieces[i] for i in group))
    # drop size-1 pieces: different placements of them compute the same regroup
    keep = [i for i, size in enumerate(pieces) if size > 1]
    perm = [keep.index(i) for i in perm if i in keep]
    if perm == sorted(perm):
        return None  # keeps element order: a plain reshape, not a regroup
    return Attrs({"split_shape": tuple(pieces[i] for i in keep), "perm": tuple(perm),
                  "shape": tuple(out)})


@functools.lru_cache(maxsize=4096)
def regroups(shape: Shape, factors: tuple[int, ...]) -> tuple[tuple[Attrs, Shape], ...]:
    """Every regroup of ``shape`` by the factors: (attrs, output shape), without duplicates."""
    rank = len(shape)
    spatial = tuple(range(2, rank)) if rank >= 3 else ()
    pair_sets = [((i, j),) for i in range(rank) for j in range(rank) if i != j]
    if len(spatial) > 1:
        for j in range(rank):
            if j not in spatial:
                pair_sets.append(tuple((i, j) for i in spatial))
                pair_sets.append(tuple((j, i) for i in spatial))
    seen, out = set(), []
    for f, pairs, split, place in itertools.product(factors, pair_sets, ("outer", "inner"),
                                                    ("outer", "inner")):
        attrs = regroup_attrs(shape, f, pairs, split, place)
        if attrs is not None and attrs not in seen:
            seen.add(attrs)
            out.append((attrs, attrs["shape"]))
    return tuple(out)


# ------------------------------------------------------------------------- operator moves


@functools.lru_cache(maxsize=8192)
def conv_instances(vocab: Vocabulary, xs: Shape, ws: Shape) -> tuple[Attrs, ...]:
    """Every shape-valid CONV attribute set for data ``xs`` and weight ``ws``."""
    if len(xs) < 3 or len(xs) != len(ws):
        return ()
    nsp = len(xs) - 2
    groups = {1} | ({xs[1] // ws[1]} if xs[1] % ws[1] == 0 else set())
    pads = {(0,) * 2 * nsp} | {p for p in vocab.pads if len(p) == 2 * nsp}
    out = []
    for s, d, g in itertools.product(vocab.strides, vocab.dilations, sorted(groups)):
        same = tuple(d * (k - 1) // 2 for k in ws[2:])
        for p in sorted(pads | {same + same}):
            attrs = Attrs({"strides": (s,) * nsp, "dilations": (d,) * nsp, "pads": p, "groups": g})
            if infer(Op.CONV, attrs, [xs, ws]) is not None:
                out.append(attrs)
    return tuple(out)


def conv_moves(vocab: Vocabulary, x: str, w: str, shapes) -> Iterator[Move]:
    for attrs in conv_instances(vocab, shapes[x], shapes[w]):
        yield Op.CONV, (x, w), attrs


def matmul_moves(a: str, b: str, shapes) -> Iterator[Move]:
    if infer(Op.MATMUL, Attrs(), [shapes[a], shapes[b]]) is not None:
        yield Op.MATMUL, (a, b), Attrs()


def data_pad_moves(vocab: Vocabulary, x: str, shapes) -> Iterator[Move]:
    """Pad spatial axes to a multiple of a factor, or by a convolution's own pads."""
    s = shapes[x]
    if len(s) < 3:
        return
    nsp, options = len(s) - 2, set()
    for f in vocab.factors:
        ends = tuple((-n) % f for n in s[2:])
        if any(ends):
            options.add((0,) * nsp + ends)
    options |= {p for p in vocab.pads if len(p) == 2 * nsp and any(p)}
    for p in sorted(options):
        yield Op.PAD, (x,), Attrs({"pads": (0, 0) + p[:nsp] + (0, 0) + p[nsp:]})


def weight_pad_moves(w: str, shapes, data_channels: set[int], kernels) -> Iterator[Move]:
    """Pad a weight's input channels to a data channel count, or its kernel to a larger one."""
    ws = shapes[w]
    rank = len(ws)
    if rank < 3:
        return
    for c in sorted(data_channels):
        if c > ws[1]:
            extra = c - ws[1]
            for before in (0, extra):
                pads = [0] * 2 * rank
                pads[1], pads[rank + 1] = before, extra - before
                yield Op.PAD, (w,), Attrs({"pads": tuple(pads)})
    for k in kernels:
        if len(k) == rank - 2 and all(a >= b for a, b in zip(k, ws[2:])) and k != ws[2:] and \
                all((a - b) % 2 == 0 for a, b in zip(k, ws[2:])):
            half = [(a - b) // 2 for a, b in zip(k, ws[2:])]
            yield Op.PAD, (w,), Attrs({"pads": (0, 0, *half, 0, 0, *half)})


def concat_moves(names: Sequence[str], shapes) -> Iterator[Move]:
    """Concatenations of 2-3 same-rank tensors, in any order, on the first two and last axes."""
    for k in range(2, min(3, len(names)) + 1):
        for group in itertools.permutations(names, k):
            for axis in (0, 1, len(shapes[group[0]]) - 1):
                attrs = Attrs({"axis": axis})
                if infer(Op.CONCAT, attrs, [shapes[g] for g in group]) is not None:
                    yield Op.CONCAT, tuple(group), attrs


def merge_moves(x: str, shapes) -> Iterator[Move]:
    """Reshapes merging two adjacent axes (e.g. a batch matmul's batch into its rows)."""
    s = shapes[x]
    for d in range(len(s) - 1):
        if len(s) > 2 and s[d] > 1 and s[d + 1] > 1:
            yield Op.RESHAPE, (x,), Attrs({"shape": s[:d] + (s[d] * s[d + 1],) + s[d + 2:]})


def fill_moves(vocab: Vocabulary, x: str, shapes) -> Iterator[Move]:
    """Depthwise averaging kernels for the subprogram's pooling windows."""
    s = shapes[x]
    for kernel, _, _ in vocab.windows:
        if len(kernel) == len(s) - 2:
            value = Fraction(1, math.prod(kernel))
            yield Op.FILL, (), Attrs({"shape": (s[1], 1, *kernel),
                                      "value": (value.numerator, value.denominator)})


# ------------------------------------------------------------------------------ final moves


def final_moves(vocab: Vocabulary, x: str, shapes, targets: Sequence[Shape]) -> Iterator[Move]:
    """Moves that turn ``x`` into the target shape(s) (one move per way)."""
    s = shapes[x]
    if len(targets) > 1:
        for axis in range(len(s)):
            if all(len(t) == len(s) and all(t[d] == s[d] for d in range(len(s)) if d != axis)
                   for t in targets) and sum(t[axis] for t in targets) == s[axis]:
                yield Op.SPLIT, (x,), Attrs({"axis": axis, "sizes": tuple(t[axis] for t in targets)})
        return
    (target,) = targets
    for attrs, out in regroups(s, vocab.factors):
        if out == target:
            yield Op.RESHAPE_TRANSPOSE, (x,), attrs
    if math.prod(s) == math.prod(target) and s != target:
        yield Op.RESHAPE, (x,), Attrs({"shape": tuple(target)})
    if len(s) == len(target) and s != target:
        for step in vocab.strides:
            if all((n - 1) // step + 1 >= t if step > 1 and n != t else n >= t
                   for n, t in zip(s, target)):
                steps = tuple(step if n != t and step > 1 else 1 for n, t in zip(s, target))
                yield Op.SLICE, (x,), Attrs({"starts": (0,) * len(s), "steps": steps,
                                             "sizes": tuple(target)})
