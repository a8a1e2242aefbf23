"""Box propagation: per-axis labels whose classes are the boxes of the verifier.

A tensor's labels are one int array per axis. Two positions of an axis get the same label only
when, for every element of the program inputs that the tensor's value at that position reads,
(a) the summation domain and the set of factors are the same, and (b) the input index is the same
affine function of the position. The boxes of a tensor are the products of per-axis classes, so
inside a box every index map is affine: the condition Theorem 1 needs. Classes need not be
intervals: a reshape that merges axes makes strided classes (rows or columns, whichever gives
fewer), which is how PET's space-to-batch mutants get strided boxes.

Rules have the interpreter's form ``rule(attrs, input_labels) -> output_labels``; shapes are the
lengths of the label arrays. A label array is refined by :func:`combine`; extra refinement is
always sound (smaller boxes), never needed for soundness to be coarser.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tvm_pet.ir.node import Attrs
from tvm_pet.ir.ops import Op

Labels = list[np.ndarray]
BEFORE, AFTER = -1, -2  # labels of positions that read padding before / after the data


def combine(*columns: np.ndarray) -> np.ndarray:
    """Canonical labels (0, 1, ...) of the tuples formed by the columns (each [n] or [n, k]):
    the rank of each row among the distinct rows in lexicographic order, as
    ``np.unique(rows, axis=0, return_inverse=True)`` gives it (a sort of the columns instead
    of the rows as records, several times faster on the long axes a reshape merges).

    >>> combine(np.array([3, 1, 3]), np.array([0, 5, 1])).tolist()
    [1, 0, 2]
    """
    cols = [c.reshape(len(c), -1) for c in columns if c is not None]
    stacked = np.concatenate(cols, axis=1)
    n = len(stacked)
    if n == 0 or stacked.shape[1] == 0:
        return np.zeros(n, np.int64)
    if stacked.shape[1] == 1:
        _, inverse = np.unique(stacked[:, 0], return_inverse=True)
        return inverse.reshape(-1).astype(np.int64)
    order = np.lexsort(stacked.T[::-1])
    rows = stacked[order]
    first = np.empty(n, bool)
    first[0] = True
    np.any(rows[1:] != rows[:-1], axis=1, out=first[1:])
    out = np.empty(n, np.int64)
    out[order] = np.cumsum(first) - 1
    return out


def trivial(shape: Sequence[int]) -> Labels:
    """Labels of an input: one class per axis."""
    return [np.zeros(n, np.int64) for n in shape]


def _shape(labels: Labels) -> tuple[int, ...]:
    return tuple(len(a) for a in labels)


def _broadcast(attrs: Attrs, args: Sequence[Labels]) -> tuple[Labels]:
    rank = max(len(a) for a in args)
    out = []
    for d in range(rank):
        cols, n = [], 1
        for labels in args:
            k = d - rank + len(labels)
            if k >= 0 and len(labels[k]) > 1:
                cols.append(labels[k])
                n = len(labels[k])
        out.append(combine(*cols) if cols else np.zeros(n, np.int64))
    return (out,)


def _taps(labels: np.ndarray, n_out: int, k: int, stride: int, dilation: int, pad: int) -> np.ndarray:
    """Labels of the window taps of each output position along one axis: [n_out, k]."""
    pos = np.arange(n_out)[:, None] * stride - pad + np.arange(k)[None, :] * dilation
    inside = (pos >= 0) & (pos < len(labels))
    return np.where(inside, labels[np.clip(pos, 0, len(labels) - 1)],
                    np.where(pos < 0, BEFORE, AFTER))


def _out_len(n, k, s, d, pb, pe) -> int:
    return (n + pb + pe - d * (k - 1) - 1) // s + 1


def _spatial(x: Labels, kernel, strides, dilations, pads) -> Labels:
    nsp = len(kernel)
    out = []
    for i in range(nsp):
        n = _out_len(len(x[2 + i]), kernel[i], strides[i], dilations[i], pads[i], pads[nsp + i])
        out.append(combine(_taps(x[2 + i], n, kernel[i], strides[i], dilations[i], pads[i])))
    return out


def _conv(attrs: Attrs, args: Sequence[Labels]) -> tuple[Labels]:
    x, w = args
    og = len(w[0]) // attrs["groups"]
    channel = combine(w[0], np.arange(len(w[0])) // og)
    return ([x[0], channel] + _spatial(x, [len(a) for a in w[2:]], attrs["strides"],
                                       attrs["dilations"], attrs["pads"]),)


def _avgpool(attrs: Attrs, args: Sequence[Labels]) -> tuple[Labels]:
    (x,) = args
    k = attrs["kernel"]
    return ([x[0], x[1]] + _spatial(x, k, attrs["strides"], (1,) * len(k), attrs["pads"]),)


def _matmul(attrs: Attrs, args: Sequence[Labels]) -> tuple[Labels]:
    a, b = args
    (batch,) = _broadcast(attrs, [a[:-2], b[:-2]]) if len(a) > 2 or len(b) > 2 else ([],)
    return (list(batch) + [a[-2], b[-1]],)


def _batchnorm(attrs: Attrs, args: Sequence[Labels]) -> tuple[Labels]:
    x, scale, shift = args
    return ([x[0], combine(x[1], scale[0], shift[0])] + list(x[2:]),)


def _concat(attrs: Attrs, args: Sequence[Labels]) -> tuple[Labels]:
    axis = attrs["axis"]
    out = []
    for d in range(len(args[0])):
        if d == axis:
            piece = np.concatenate([np.full(len(a[d]), i) for i, a in enumerate(args)])
            out.append(combine(piece, np.concatenate([a[d] for a in args])))
        else:
            out.append(combine(*[a[d] for a in args]))
    return (out,)


def _split(attrs: Attrs, args: Sequence[Labels]) -> tuple[Labels, ...]:
    (x,) = args
    axis, outs, start = attrs["axis"], [], 0
    for size in attrs["sizes"]:
        piece = list(x)
        piece[axis] = combine(x[axis][start:start + size])
        outs.append(piece)
        start += size
    return tuple(outs)


def _slice(attrs: Attrs, args: Sequence[Labels]) -> tuple[Labels]:
    (x,) = args
    return ([combine(a[b + np.arange(k) * s]) for a, b, s, k in
             zip(x, attrs["starts"], attrs["steps"], attrs["sizes"])],)


def _pad(attrs: Attrs, args: Sequence[Labels]) -> tuple[Labels]:
    (x,) = args
    p = attrs["pads"]
    return ([np.concatenate([np.full(p[d], BEFORE), a, np.full(p[len(x) + d], AFTER)])
             for d, a in enumerate(x)],)


def _transpose(attrs: Attrs, args: Sequence[Labels]) -> tuple[Labels]:
    return ([args[0][p] for p in attrs["perm"]],)


def merge_axes(outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """Labels of the axis made by merging two axes (outer, inner), row-major.

    The map from the merged position o to (o // n_inner, o % n_inner) is affine only on one row
    or on one column, so classes are split by row or by column, whichever makes fewer.
    """
    n1, n2 = len(outer), len(inner)
    if n1 == 1:
        return inner
    if n2 == 1:
        return outer
    o = np.arange(n1 * n2)
    rows = combine(o // n2, inner[o % n2])
    cols = combine(o % n2, outer[o // n2])
    return rows if rows.max() <= cols.max() else cols


def split_axis(labels: np.ndarray, sizes: Sequence[int]) -> Labels:
    """Labels of the axes made by splitting one axis into ``sizes`` (row-major).

    The split map is affine; a product of a row class and a column class lies inside one class of
    the split axis, which is what keeps the product structure.
    """
    if len(sizes) == 1:
        return [labels]
    grid = labels.reshape(sizes[0], -1)
    return [combine(grid)] + split_axis(combine(grid.T), sizes[1:])


def _groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """Match axes of two shapes with the same element count into groups of equal products."""
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        gi, gj, pi, pj = [], [], 1, 1
        if i < len(src):
            gi.append(i); pi = src[i]; i += 1
        if j < len(dst):
            gj.append(j); pj = dst[j]; j += 1
        while pi != pj:
            if pi < pj:
                gi.append(i); pi *= src[i]; i += 1
            else:
                gj.append(j); pj *= dst[j]; j += 1
        groups.append((gi, gj))
    return groups


def reshape_labels(x: Labels, shape: Sequence[int]) -> Labels:
    """Labels after a reshape: per group of matching axes, merge them all, then split."""
    out: Labels = [None] * len(shape)  # type: ignore[list-item]
    for gi, gj in _groups(_shape(x), shape):
        if not gj:  # size-1 axes that the reshape drops
            continue
        flat = np.zeros(1, np.int64)
        for i in gi:
            flat = merge_axes(flat, x[i])
        for j, part in zip(gj, split_axis(flat, [shape[j] for j in gj])):
            out[j] = part
    return out


def _reshape(attrs: Attrs, args: Sequence[Labels]) -> tuple[Labels]:
    return (reshape_labels(args[0], attrs["shape"]),)


def _reshape_transpose(attrs: Attrs, args: Sequence[Labels]) -> tuple[Labels]:
    mid = reshape_labels(args[0], attrs["split_shape"])
    return (reshape_labels([mid[p] for p in attrs["perm"]], attrs["shape"]),)


def _update(attrs: Attrs, args: Sequence[Labels]) -> tuple[Labels]:
    base, patch = args
    out = []
    for b, p, lo, step in zip(base, patch, attrs["starts"], attrs["steps"]):
        v = np.arange(len(b))
        rel, rem = np.divmod(v - lo, step)
        inside = (v >= lo) & (rem == 0) & (rel < len(p))
        out.append(combine(inside, b, np.where(inside, p[np.clip(rel, 0, len(p) - 1)], BEFORE)))
    return (out,)


LABEL_RULES: dict[Op, Callable[[Attrs, Sequence[Labels]], tuple[Labels, ...]]] = {
    Op.ADD: _broadcast,
    Op.MUL: _broadcast,
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
    Op.FILL: lambda attrs, args: (trivial(attrs["shape"]),),
}
