"""Seeded example pairs ``(original, candidate)`` from the PET paper, and a few wrong candidates.

Each builder returns two programs with identical input and output names and shapes, so that the
verifier can compare them. Weights are drawn from a seeded generator; the candidate uses weights of
the same content (often under another name: the verifier matches weights by content).

- :func:`figure1_pair`: two images side by side, one convolution (partially equivalent at seams);
- :func:`figure3_pair`: a dilated convolution on parity-regrouped input (exact or not);
- :func:`figure3_batch_pad1_pair`: the space-to-batch form with the conv's own padding (exact);
- :func:`equivalent_pair`: a fully equivalent rewrite (batching two convolutions);
- wrong candidates, each almost right: :func:`weight_changed_pair`,
  :func:`off_by_one_slice_pair`, :func:`wrong_padding_pair`.

>>> original, candidate = figure1_pair()
>>> original.shapes["y"] == candidate.shapes["y"] == (2, 4, 8, 8)
True
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tvm_pet.ir.builder import ProgramBuilder
from tvm_pet.ir.node import Program

Pair = tuple[Program, Program]


def _normal(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def figure1_pair(batch: int = 2, c: int = 3, h: int = 8, w: int = 8, o: int = 4, k: int = 5,
                 seed: int = 0) -> Pair:
    """Figure 1: a convolution of a batch vs. one convolution of image pairs placed side by side.

    The candidate reshapes ``x[batch, c, h, w]`` to ``[batch/2, 2, c, h, w]``, moves the pair axis
    next to the width (``[batch/2, c, h, 2, w]``), merges it (``[batch/2, c, h, 2w]``), convolves
    with the same weight and pads, and undoes the regrouping. The windows that straddle the seam
    read the neighbour image instead of zero padding, so the outputs differ on the last ``k//2``
    columns of even batch items and the first ``k//2`` columns of odd ones.

    Real size in the benchmark: batch 16, c 48, h = w = 38, o 64, k 5.
    """
    if batch % 2:
        raise ValueError(f"figure1_pair pairs images: batch must be even, got {batch}")
    weight = _normal(np.random.default_rng(seed), (o, c, k, k))
    b0 = ProgramBuilder("figure1_original")
    x = b0.input("x", (batch, c, h, w))
    b0.conv(x, b0.weight("w", weight), pads=k // 2, out="y")

    b1 = ProgramBuilder("figure1_side_by_side")
    x = b1.input("x", (batch, c, h, w))
    t = b1.reshape(x, (batch // 2, 2, c, h, w))
    t = b1.transpose(t, (0, 2, 3, 1, 4))                   # [b/2, c, h, 2, w]
    t = b1.reshape(t, (batch // 2, c, h, 2 * w))
    t = b1.conv(t, b1.weight("w_pair", weight), pads=k // 2)  # [b/2, o, h, 2w]
    t = b1.reshape(t, (batch // 2, o, h, 2, w))
    t = b1.transpose(t, (0, 3, 1, 2, 4))                   # [b/2, 2, o, h, w]
    b1.reshape(t, (batch, o, h, w), out="y")
    return b0.build(["y"]), b1.build(["y"])


def _space_to_batch(b: ProgramBuilder, x: str, n: int, c: int, h: int, w: int) -> str:
    """[n, c, h, w] -> [4n, c, h/2, w/2]; batch item (r, s, i) holds rows r::2, columns s::2."""
    t = b.reshape(x, (n, c, h // 2, 2, w // 2, 2))
    t = b.transpose(t, (3, 5, 0, 1, 2, 4))                 # [2, 2, n, c, h/2, w/2]
    return b.reshape(t, (4 * n, c, h // 2, w // 2))


def _batch_to_space(b: ProgramBuilder, y: str, n: int, o: int, h2: int, w2: int,
                    out: str) -> str:
    """The inverse of :func:`_space_to_batch`: [4n, o, h2, w2] -> [n, o, 2*h2, 2*w2]."""
    t = b.reshape(y, (2, 2, n, o, h2, w2))
    t = b.transpose(t, (2, 3, 4, 0, 5, 1))                 # [n, o, h2, 2, w2, 2]
    return b.reshape(t, (n, o, 2 * h2, 2 * w2), out=out)


def _parity_grid(b: ProgramBuilder, x: str, n: int, c: int, h: int, w: int) -> str:
    """Reorder rows and columns by parity in place: even rows first, then odd; same for columns."""
    t = b.reshape(x, (n, c, h // 2, 2, w // 2, 2))
    t = b.transpose(t, (0, 1, 3, 2, 5, 4))                 # [n, c, 2, h/2, 2, w/2]
    return b.reshape(t, (n, c, h, w))


def _parity_ungrid(b: ProgramBuilder, y: str, n: int, o: int, h: int, w: int, out: str) -> str:
    t = b.reshape(y, (n, o, 2, h // 2, 2, w // 2))
    t = b.transpose(t, (0, 1, 3, 2, 5, 4))                 # [n, o, h/2, 2, w/2, 2]
    return b.reshape(t, (n, o, h, w), out=out)


def _dilated_original(x_shape, weight: np.ndarray) -> Program:
    b0 = ProgramBuilder("figure3_original")
    x = b0.input("x", x_shape)
    b0.conv(x, b0.weight("w", weight), pads=2, dilations=2, out="y")
    return b0.build(["y"])


def figure3_pair(n: int = 1, c: int = 4, h: int = 6, w: int = 6, o: int = 3, exact: bool = False,
                 seed: int = 0) -> Pair:
    """Figure 3: a 3x3 convolution with dilation 2 (pad 2) vs. a regular one on regrouped input.

    With ``exact=True`` the candidate pads by 2 explicitly, moves the four row/column parity
    classes into the batch (``[4n, c, h/2+2, w/2+2]``), convolves with dilation 1 and no padding,
    and moves the parities back: fully equivalent.

    With ``exact=False`` the parity classes stay on the image plane, as a 2x2 grid (even rows then
    odd rows, even columns then odd columns), and the conv uses its own padding (pad 1, dilation
    1). Windows at the grid's inner seams read the other parity class instead of zeros, so the
    outputs differ on rows ``h-2`` and ``1`` and on columns ``w-2`` and ``1`` of the original
    layout (strided, not an interval). Note that the *batch* layout with pad 1 would be exact;
    see :func:`figure3_batch_pad1_pair`.

    Real size in the benchmark: x [1, 512, 14, 14], weight [256, 512, 3, 3].
    """
    if h % 2 or w % 2:
        raise ValueError(f"figure3_pair regroups by parity: h and w must be even, got {h}, {w}")
    weight = _normal(np.random.default_rng(seed), (o, c, 3, 3))
    original = _dilated_original((n, c, h, w), weight)
    b1 = ProgramBuilder("figure3_exact" if exact else "figure3_grid")
    x = b1.input("x", (n, c, h, w))
    wt = b1.weight("w_regular", weight)
    if exact:
        t = b1.pad(x, (0, 0, 2, 2, 0, 0, 2, 2))
        t = _space_to_batch(b1, t, n, c, h + 4, w + 4)
        t = b1.conv(t, wt)                                 # [4n, o, h/2, w/2]
        _batch_to_space(b1, t, n, o, h // 2, w // 2, out="y")
    else:
        t = _parity_grid(b1, x, n, c, h, w)
        t = b1.conv(t, wt, pads=1)
        _parity_ungrid(b1, t, n, o, h, w, out="y")
    return original, b1.build(["y"])


def figure3_batch_pad1_pair(n: int = 1, c: int = 4, h: int = 6, w: int = 6, o: int = 3,
                            seed: int = 0) -> Pair:
    """Space-to-batch by parity, then a 3x3 conv with its own padding 1: exact for even h, w.

    Output row ``2a + r`` of the dilated conv reads rows ``2(a-1+t) + r``, which are rows
    ``a-1+t`` of parity class ``r``, and lies outside the image exactly when that block row lies
    outside the class: the conv's own zero padding of 1 is the right one.
    """
    weight = _normal(np.random.default_rng(seed), (o, c, 3, 3))
    original = _dilated_original((n, c, h, w), weight)
    b1 = ProgramBuilder("figure3_batch_pad1")
    x = b1.input("x", (n, c, h, w))
    t = _space_to_batch(b1, x, n, c, h, w)
    t = b1.conv(t, b1.weight("w_regular", weight), pads=1)
    _batch_to_space(b1, t, n, o, h // 2, w // 2, out="y")
    return original, b1.build(["y"])


def equivalent_pair(n: int = 2, c: int = 3, h: int = 5, w: int = 6, o: int = 4,
                    seed: int = 0) -> Pair:
    """``conv(x, W) + conv(z, W)`` vs. one conv of ``concat([x, z])`` split and added: equivalent.

    The candidate names its weight differently; the verifier matches it by content.
    """
    weight = _normal(np.random.default_rng(seed), (o, c, 3, 3))
    b0 = ProgramBuilder("two_convs")
    x, z = b0.input("x", (n, c, h, w)), b0.input("z", (n, c, h, w))
    wt = b0.weight("w", weight)
    b0.add(b0.conv(x, wt, pads=(1, 0, 1, 2)), b0.conv(z, wt, pads=(1, 0, 1, 2)), out="y")

    b1 = ProgramBuilder("batched_conv")
    x, z = b1.input("x", (n, c, h, w)), b1.input("z", (n, c, h, w))
    t = b1.conv(b1.concat([x, z], axis=0), b1.weight("w_batched", weight), pads=(1, 0, 1, 2))
    left, right = b1.split(t, axis=0, sizes=(n, n))
    b1.add(left, right, out="y")
    return b0.build(["y"]), b1.build(["y"])


def weight_changed_pair(n: int = 1, c: int = 3, h: int = 5, w: int = 5, seed: int = 0) -> Pair:
    """Two convolutions concatenated on channels; the candidate changes one element of the second
    weight. Only the second conv's channels differ (the changed weight is a new variable)."""
    rng = np.random.default_rng(seed)
    w1, w2 = _normal(rng, (2, c, 3, 3)), _normal(rng, (3, c, 3, 3))
    w2_bad = w2.copy()
    w2_bad[1, 0, 2, 1] += 0.5

    def build(name: str, second: np.ndarray) -> Program:
        b = ProgramBuilder(name)
        x = b.input("x", (n, c, h, w))
        y1 = b.conv(x, b.weight("w1", w1), pads=1)
        y2 = b.conv(x, b.weight("w2", second), pads=1)
        b.concat([y1, y2], axis=1, out="y")
        return b.build(["y"])

    return build("two_convs", w2), build("two_convs_weight_changed", w2_bad)


def off_by_one_slice_pair(n: int = 2, length: int = 8, seed: int = 0) -> Pair:
    """``x[:, 0:4] * x[:, 4:8]`` with the candidate's second slice starting at 3 instead of 4."""
    del seed  # no weights
    half = length // 2

    def build(name: str, second_start: int) -> Program:
        b = ProgramBuilder(name)
        x = b.input("x", (n, length))
        lo = b.slice(x, (0, 0), (n, half))
        hi = b.slice(x, (0, second_start), (n, second_start + half))
        b.mul(lo, hi, out="y")
        return b.build(["y"])

    return build("halves", half), build("halves_off_by_one", half - 1)


def wrong_padding_pair(n: int = 1, c: int = 2, h: int = 5, w: int = 6, o: int = 2,
                       seed: int = 0) -> Pair:
    """A 3x3 conv with zero padding 1 vs. explicit padding whose right edge repeats the last column
    instead of zeros. Only the last output column differs."""
    weight = _normal(np.random.default_rng(seed), (o, c, 3, 3))
    b0 = ProgramBuilder("conv_pad1")
    x = b0.input("x", (n, c, h, w))
    b0.conv(x, b0.weight("w", weight), pads=1, out="y")

    b1 = ProgramBuilder("conv_pad1_right_edge_replicated")
    x = b1.input("x", (n, c, h, w))
    t = b1.pad(x, (0, 0, 1, 1, 0, 0, 1, 0))                  # [n, c, h+2, w+1]: no right pad
    edge = b1.slice(t, (0, 0, 0, w), (n, c, h + 2, w + 1))  # the last real column
    t = b1.concat([t, edge], axis=3)                        # [n, c, h+2, w+2]
    b1.conv(t, b1.weight("w", weight), out="y")
    return b0.build(["y"]), b1.build(["y"])


#: Pairs that are fully equivalent.
EQUIVALENT_CASES: dict[str, Callable[[], Pair]] = {
    "figure3_exact": lambda: figure3_pair(exact=True),
    "figure3_batch_pad1": figure3_batch_pad1_pair,
    "equivalent": equivalent_pair,
}
#: Pairs that are equivalent on some boxes and differ on others.
PARTIAL_CASES: dict[str, Callable[[], Pair]] = {
    "figure1": figure1_pair,
    "figure1_batch6": lambda: figure1_pair(batch=6, c=2, h=5, w=7, o=3, k=3),
    "figure3_grid": figure3_pair,
    "figure3_grid_8x10": lambda: figure3_pair(n=2, c=2, h=8, w=10, o=2),
}
#: Wrong candidates, each almost right.
WRONG_CASES: dict[str, Callable[[], Pair]] = {
    "weight_changed": weight_changed_pair,
    "off_by_one_slice": off_by_one_slice_pair,
    "wrong_padding": wrong_padding_pair,
}
#: Every case, by name.
ALL_CASES: dict[str, Callable[[], Pair]] = {**EQUIVALENT_CASES, **PARTIAL_CASES, **WRONG_CASES}
