"""Each operator as a sum of products of gathered input elements.

For output coordinates ``v`` (an int64 array ``[K, rank]``) a rule returns a :class:`Gather`::

    out[k] = scale[k] * sum over terms, sum over r of  prod over factors  input_f[idx_f[k, r]]

where ``idx_f`` holds flat indices into input ``f`` and ``-1`` stands for a zero (padding, an
element another input provides). Exact mod-p evaluation and the verifier's demand analysis (which
input elements a set of output positions needs) are both derived from this one table, so they can
never disagree about an operator's meaning.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from tvm_pet.ir.node import Attrs, Shape
from tvm_pet.ir.ops import Op

IntArray = np.ndarray


@dataclasses.dataclass
class Gather:
    """``terms[t]`` is a list of ``(input position, flat indices [K, R])`` factors."""

    terms: list[list[tuple[int, IntArray]]]
    divisor: IntArray | None = None  # [K] positive ints dividing each result (average pooling)
    constant: tuple[int, int] = (1, 1)  # (num, den): a rational factor of every result


def strides_of(shape: Shape) -> np.ndarray:
    """Row-major element strides of a shape."""
    out = np.ones(len(shape), dtype=np.int64)
    for d in range(len(shape) - 2, -1, -1):
        out[d] = out[d + 1] * shape[d + 1]
    return out


def ravel(coords: IntArray, shape: Shape) -> IntArray:
    """Flat indices of coordinates ``[..., rank]`` in ``shape``."""
    return coords @ strides_of(shape) if len(shape) else np.zeros(coords.shape[:-1], np.int64)


def unravel(flat: IntArray, shape: Shape) -> IntArray:
    """Coordinates ``[..., rank]`` of flat indices."""
    return np.stack(np.unravel_index(flat, shape), axis=-1).astype(np.int64) if shape else \
        np.zeros(flat.shape + (0,), np.int64)


def _broadcast_index(v: IntArray, in_shape: Shape) -> IntArray:
    """Flat index into an input broadcast (NumPy rules) to the output coordinates ``v``."""
    rank = len(in_shape)
    sub = v[:, v.shape[1] - rank:] if rank else v[:, :0]
    sub = np.where(np.asarray(in_shape) == 1, 0, sub)
    return ravel(sub, in_shape)[:, None]


def _elementwise(op: Op):
    def rule(attrs: Attrs, ins: Sequence[Shape], outs, j: int, v: IntArray) -> Gather:
        a, b = (_broadcast_index(v, s) for s in ins)
        return Gather([[(0, a)], [(1, b)]] if op is Op.ADD else [[(0, a), (1, b)]])
    return rule


def _batchnorm(attrs, ins, outs, j, v) -> Gather:
    x = ravel(v, ins[0])[:, None]
    c = v[:, 1:2]
    return Gather([[(0, x), (1, c)], [(2, c)]])


def _matmul(attrs, ins, outs, j, v) -> Gather:
    (sa, sb), red = ins, ins[0][-1]
    r = np.arange(red, dtype=np.int64)
    batch = v[:, :-2]

    def operand(shape, row, col):
        rank = len(shape) - 2
        b = batch[:, batch.shape[1] - rank:] if rank else batch[:, :0]
        b = np.where(np.asarray(shape[:-2]) == 1, 0, b)
        return ravel(b, shape[:-2])[:, None] * shape[-2] * shape[-1] + row * shape[-1] + col

    a = operand(sa, v[:, -2:-1], r[None, :])
    b = operand(sb, r[None, :], v[:, -1:])
    return Gather([[(0, a), (1, b)]])


def _window(x_shape: Shape, v: IntArray, kernel, strides, dilations, pads, channels):
    """Indices into x for windows at output positions ``v``: ([K, R] flat or -1, kernel offsets)."""
    nsp = len(kernel)
    taps = unravel(np.arange(math.prod(kernel)), tuple(kernel))            # [T, nsp]
    pos = (v[:, None, 2:] * np.asarray(strides) - np.asarray(pads[:nsp])
           + taps[None] * np.asarray(dilations))                            # [K, T, nsp]
    valid = np.all((pos >= 0) & (pos < np.asarray(x_shape[2:])), axis=-1)   # [K, T]
    sp = ravel(np.where(valid[..., None], pos, 0), tuple(x_shape[2:]))      # [K, T]
    plane = math.prod(x_shape[2:])
    base = (v[:, 0:1] * x_shape[1])[:, :, None] + channels[:, :, None]      # [K, C, 1]
    idx = base * plane + sp[:, None, :]                                     # [K, C, T]
    idx = np.where(valid[:, None, :], idx, -1)
    return idx.reshape(len(v), -1), valid


def _conv(attrs, ins, outs, j, v) -> Gather:
    xs, ws = ins
    g = attrs["groups"]
    cg, og = xs[1] // g, ws[0] // g
    group = v[:, 1:2] // og
    channels = group * cg + np.arange(cg)[None, :]                         # [K, Cg]
    x, _ = _window(xs, v, ws[2:], attrs["strides"], attrs["dilations"], attrs["pads"], channels)
    w = v[:, 1:2] * (cg * math.prod(ws[2:])) + np.arange(cg * math.prod(ws[2:]))[None, :]
    return Gather([[(0, x), (1, w)]])


def _avgpool(attrs, ins, outs, j, v) -> Gather:
    kernel = attrs["kernel"]
    ones = (1,) * len(kernel)
    x, valid = _window(ins[0], v, kernel, attrs["strides"], ones, attrs["pads"], v[:, 1:2])
    count = np.full(len(v), math.prod(kernel), np.int64) if attrs["count_include_pad"] \
        else valid.sum(axis=1).astype(np.int64)
    return Gather([[(0, x)]], divisor=count)


def _axis_offsets(sizes: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _concat(attrs, ins, outs, j, v) -> Gather:
    axis = attrs["axis"]
    offs = _axis_offsets([s[axis] for s in ins])
    terms = []
    for i, shape in enumerate(ins):
        u = v.copy()
        u[:, axis] -= offs[i]
        inside = (u[:, axis] >= 0) & (u[:, axis] < shape[axis])
        u[:, axis] = np.where(inside, u[:, axis], 0)
        terms.append([(i, np.where(inside, ravel(u, shape), -1)[:, None])])
    return Gather(terms)


def _split(attrs, ins, outs, j, v) -> Gather:
    u = v.copy()
    u[:, attrs["axis"]] += _axis_offsets(attrs["sizes"])[j]
    return Gather([[(0, ravel(u, ins[0])[:, None])]])


def _slice(attrs, ins, outs, j, v) -> Gather:
    u = np.asarray(attrs["starts"]) + v * np.asarray(attrs["steps"])
    return Gather([[(0, ravel(u, ins[0])[:, None])]])


def _pad(attrs, ins, outs, j, v) -> Gather:
    shape = ins[0]
    u = v - np.asarray(attrs["pads"][:len(shape)])
    inside = np.all((u >= 0) & (u < np.asarray(shape)), axis=1)
    return Gather([[(0, np.where(inside, ravel(np.where(inside[:, None], u, 0), shape), -1)[:, None])]])


def _transpose(attrs, ins, outs, j, v) -> Gather:
    u = np.empty_like(v)
    u[:, list(attrs["perm"])] = v
    return Gather([[(0, ravel(u, ins[0])[:, None])]])


def _reshape(attrs, ins, outs, j, v) -> Gather:
    return Gather([[(0, ravel(v, outs[0])[:, None])]])


def _reshape_transpose(attrs, ins, outs, j, v) -> Gather:
    mid, perm = tuple(attrs["split_shape"]), attrs["perm"]
    moved = unravel(ravel(v, outs[0]), tuple(mid[p] for p in perm))
    u = np.empty_like(moved)
    u[:, list(perm)] = moved
    return Gather([[(0, ravel(u, mid)[:, None])]])


def _update(attrs, ins, outs, j, v) -> Gather:
    base, patch = ins
    starts, steps = np.asarray(attrs["starts"]), np.asarray(attrs["steps"])
    rel, rem = np.divmod(v - starts, steps)
    inside = np.all((v >= starts) & (rem == 0) & (rel < np.asarray(patch)), axis=1)
    p = np.where(inside, ravel(np.where(inside[:, None], rel, 0), patch), -1)
    b = np.where(inside, -1, ravel(v, base))
    return Gather([[(0, b[:, None])], [(1, p[:, None])]])


def _fill(attrs, ins, outs, j, v) -> Gather:
    return Gather([[]], constant=tuple(attrs["value"]))


GATHER_RULES: dict[Op, Callable[..., Gather]] = {
    Op.ADD: _elementwise(Op.ADD),
    Op.MUL: _elementwise(Op.MUL),
    Op.CONV: _conv,
    Op.MATMUL: _matmul,
    Op.BATCHNORM: _batchnorm,
    Op.AVGPOOL: _avgpool,
    Op.CONCAT: _concat,
    Op.SPLIT: _split,
    Op.SLICE: _slice,
    Op.PAD: _pad,
    Op.TRANSPOSE: _transpose,
    Op.RESHAPE: _reshape,
    Op.RESHAPE_TRANSPOSE: _reshape_transpose,
    Op.UPDATE: _update,
    Op.FILL: _fill,
}


def reduction_size(op: Op, attrs: Attrs, ins: Sequence[Shape]) -> int:
    """Elements gathered per output element and factor (the R of :class:`Gather`)."""
    if op is Op.CONV:
        return math.prod(ins[1][1:])
    if op is Op.MATMUL:
        return ins[0][-1]
    if op is Op.AVGPOOL:
        return math.prod(attrs["kernel"])
    return 1
