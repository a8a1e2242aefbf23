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

from tvm_pet.ir import im2col
from tvm_pet.ir import winograd as wino
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
    #: ``(input spatial shape, the convolution's own pads, end pads)``: more padding at the end
    #: of a convolution's input that brings an awkward output side to a smooth one
    #: (:func:`aligning_pads`), as a PAD of its input or in the convolution's own pads.
    aligns: tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = ()
    #: Offer each eligible 3×3 convolution by Winograd's algorithm too (:mod:`tvm_pet.ir.winograd`).
    winograd: bool = False
    #: Offer each 2-D or 3-D convolution as a product over its windows (:mod:`tvm_pet.ir.im2col`).
    im2col: bool = False

    @staticmethod
    def of(program: Program, winograd: bool = False, im2col: bool = False) -> "Vocabulary":
        strides, dilations, pads, kernels, windows = {1}, {1}, set(), set(), set()
        aligns = set()
        for n in program.nodes:
            if n.op is Op.CONV:
                strides.update(n.attrs["strides"]); dilations.update(n.attrs["dilations"])
                pads.add(n.attrs["pads"]); kernels.add(program.shapes[n.inputs[1]][2:])
                ends = aligning_pads(program.shapes[n.inputs[0]][2:],
                                     program.shapes[n.output][2:], n.attrs["strides"])
                if ends is not None:
                    aligns.add((program.shapes[n.inputs[0]][2:], n.attrs["pads"], ends))
            elif n.op is Op.AVGPOOL:
                strides.update(n.attrs["strides"]); pads.add(n.attrs["pads"])
                windows.add((n.attrs["kernel"], n.attrs["strides"], n.attrs["pads"]))
        factors = sorted({2, 3} | {s for s in strides | dilations if 1 < s <= 4})
        return Vocabulary(tuple(factors), tuple(sorted(strides)), tuple(sorted(dilations)),
                          tuple(sorted(pads)), tuple(sorted(kernels)), tuple(sorted(windows)),
                          tuple(sorted(aligns)), winograd, im2col)


#: Output sides whose prime factors are all at most this are smooth: MetaSchedule tiles a loop
#: only by divisors of its extent, so 38 = 2 * 19 offers few tilings and 40 = 2^3 * 5 many.
SMOOTH = 7


def largest_prime_factor(n: int) -> int:
    """The largest prime factor of ``n`` (1 for 1).

    >>> largest_prime_factor(38), largest_prime_factor(40), largest_prime_factor(1)
    (19, 5, 1)
    """
    largest, p = 1, 2
    while n > 1 and p * p <= n:
        while n % p == 0:
            largest, n = p, n // p
        p += 1
    return max(largest, n)


def aligning_pads(data: Shape, out: Shape, strides: Sequence[int]) -> tuple[int, ...] | None:
    """End pads of a convolution's input (one per spatial axis) that grow each awkward output
    side (a prime factor above :data:`SMOOTH`) to the next smooth side, by at most an eighth
    (the extra output is sliced off); None when no side is awkward.

    Inception-v3's 38 x 38 convolutions, padded to 39 (3 * 13) or 40 and sliced, ran x1.2 to
    x2.5 faster tuned (``benchmarks/results/extent_forms.md``); ResNet's 7 * 2^k sides, padded
    to powers of two, did not gain (they are smooth, and left alone here).

    >>> aligning_pads((38, 38), (38, 38), (1, 1)), aligning_pads((80, 80), (78, 78), (1, 1))
    ((2, 2), (2, 2))
    >>> aligning_pads((38, 38), (18, 18), (2, 2)), aligning_pads((56, 56), (56, 56), (1, 1))
    (None, None)
    """
    ends, awkward = [], False
    for o, s in zip(out, strides):
        target = o
        if largest_prime_factor(o) > SMOOTH:
            target = next(t for t in itertools.count(o + 1) if largest_prime_factor(t) <= SMOOTH)
            if 8 * (target - o) > o:
                target = o
        awkward |= target != o
        ends.append((target - o) * s)
    return tuple(ends) if awkward else None


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
    pads |= {own[:nsp] + tuple(o + e for o, e in zip(own[nsp:], ends))
             for data, own, ends in vocab.aligns if data == xs[2:] and len(own) == 2 * nsp}
    out = []
    for s, d, g in itertools.product(vocab.strides, vocab.dilations, sorted(groups)):
        same = tuple(d * (k - 1) // 2 for k in ws[2:])
        for p in sorted(pads | {same + same}):
            attrs = Attrs({"strides": (s,) * nsp, "dilations": (d,) * nsp, "pads": p, "groups": g})
            if infer(Op.CONV, attrs, [xs, ws]) is not None:
                out.append(attrs)
                if vocab.winograd and wino.eligible(xs, ws, attrs):
                    out.append(attrs.replace(winograd=wino.SEARCH_TILE))
                    out += [attrs.replace(winograd=wino.SEARCH_TILE, winograd_products=order)
                            for order in wino.PRODUCTS[1:]]
                if vocab.im2col and im2col.eligible(xs, ws, attrs):
                    out += [attrs.replace(im2col=order) for order in im2col.SEARCH_ORDERS]
    return tuple(out)


def conv_moves(vocab: Vocabulary, x: str, w: str, shapes) -> Iterator[Move]:
    for attrs in conv_instances(vocab, shapes[x], shapes[w]):
        yield Op.CONV, (x, w), attrs


def matmul_moves(a: str, b: str, shapes) -> Iterator[Move]:
    """MATMUL of ``a`` by ``b``, where their shapes allow it."""
    if infer(Op.MATMUL, Attrs(), [shapes[a], shapes[b]]) is not None:
        yield Op.MATMUL, (a, b), Attrs()


def aligns_extents(part: Program, mutant: Program) -> bool:
    """Whether ``mutant`` runs its largest convolution over a map grown by at most an eighth
    with smooth output sides, where ``part``'s largest has an awkward side
    (:func:`aligning_pads`: padded, convolved, sliced back). A regrouped map (38 x 38 as
    19 x 76) is not aligned, nor a strided convolution computed at every position.

    >>> from tvm_pet.ir.builder import ProgramBuilder
    >>> import numpy as np
    >>> def conv(side, pad_to=None):
    ...     b = ProgramBuilder()
    ...     x = b.input("x", (1, 2, side, side))
    ...     if pad_to:
    ...         x = b.pad(x, (0, 0, 0, 0, 0, 0, pad_to - side, pad_to - side))
    ...     y = b.conv(x, b.weight("w", np.ones((2, 2, 1, 1), np.float32)))
    ...     if pad_to:
    ...         y = b.slice(y, (0, 0, 0, 0), (1, 2, side, side))
    ...     return b.build([y])
    >>> aligns_extents(conv(38), conv(38, 40)), aligns_extents(conv(38), conv(38, 39))
    (True, False)
    >>> aligns_extents(conv(56), conv(56, 64))
    False
    """
    def largest(p: Program) -> Shape | None:  # the output sides of its largest convolution
        sides = [p.shapes[n.output][2:] for n in p.nodes if n.op is Op.CONV]
        return max(sides, key=math.prod, default=None)

    def smooth(side: Shape) -> bool:
        return all(largest_prime_factor(d) <= SMOOTH for d in side)

    before, after = largest(part), largest(mutant)
    # the same convolution over a grown map (its corrections' small convs do not count)
    return (before is not None and after is not None and not smooth(before) and smooth(after)
            and len(after) == len(before)
            and all(b <= a <= b + b / 8 for a, b in zip(after, before)))


def data_pad_moves(vocab: Vocabulary, x: str, shapes) -> Iterator[Move]:
    """Pad spatial axes to a multiple of a factor, by a convolution's own pads, or at their ends
    so that a convolution's awkward output side becomes smooth (:func:`aligning_pads`)."""
    s = shapes[x]
    if len(s) < 3:
        return
    nsp, options = len(s) - 2, set()
    for f in vocab.factors:
        ends = tuple((-n) % f for n in s[2:])
        if any(ends):
            options.add((0,) * nsp + ends)
    options |= {p for p in vocab.pads if len(p) == 2 * nsp and any(p)}
    options |= {(0,) * nsp + ends for data, _, ends in vocab.aligns if data == s[2:]}
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
