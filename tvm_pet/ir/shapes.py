"""Shape rules: one function per operator kind, ``rule(attrs, input_shapes) -> output_shapes``.

Rules raise :class:`ShapeError` with a message that says what does not fit; the caller adds the
node. :func:`conv_out_size` and :func:`broadcast_shapes` are shared with the other rule tables.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tvm_pet.errors import ShapeError
from tvm_pet.ir.node import Attrs, Shape
from tvm_pet.ir.ops import Op


def broadcast_shapes(*shapes: Shape) -> Shape:
    """NumPy broadcasting of several shapes."""
    rank = max(len(s) for s in shapes)
    out = []
    for d in range(rank):
        sizes = {s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise ShapeError(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def conv_out_size(n: int, k: int, stride: int, dilation: int, pad_begin: int, pad_end: int) -> int:
    """Output length of a convolution or pooling window along one axis."""
    return (n + pad_begin + pad_end - dilation * (k - 1) - 1) // stride + 1


def _elementwise(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    return (broadcast_shapes(*shapes),)


def _spatial_check(attrs: Attrs, nsp: int, names: Sequence[str]) -> None:
    for key in names:
        if len(attrs[key]) != (2 * nsp if key == "pads" else nsp):
            raise ShapeError(f"attribute {key}={attrs[key]} does not fit {nsp} spatial axes")
    if any(p < 0 for p in attrs["pads"]):
        raise ShapeError(f"negative pads {attrs['pads']}")
    if any(s < 1 for s in attrs["strides"]):
        raise ShapeError(f"strides {attrs['strides']} must be positive")


def _conv(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    x, w = shapes
    nsp = len(x) - 2
    if nsp not in (1, 2, 3) or len(w) != len(x):
        raise ShapeError(f"conv needs data [N,C,*S] with 1-3 spatial axes and a weight of the same "
                         f"rank, got {list(x)} and {list(w)}")
    _spatial_check(attrs, nsp, ("strides", "pads", "dilations"))
    g = attrs["groups"]
    if g < 1 or x[1] % g or w[0] % g or x[1] // g != w[1]:
        raise ShapeError(f"channels do not fit: data has {x[1]}, weight {list(w)}, groups {g}")
    out = [x[0], w[0]]
    for i in range(nsp):
        n = conv_out_size(x[2 + i], w[2 + i], attrs["strides"][i], attrs["dilations"][i],
                          attrs["pads"][i], attrs["pads"][nsp + i])
        if n < 1:
            raise ShapeError(f"kernel {list(w[2:])} does not fit padded input {list(x[2:])}")
        out.append(n)
    return (tuple(out),)


def _matmul(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    a, b = shapes
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"matmul needs rank >= 2 operands, got {list(a)} and {list(b)}")
    if a[-1] != b[-2]:
        raise ShapeError(f"matmul inner sizes differ: {list(a)} @ {list(b)}")
    return (broadcast_shapes(a[:-2], b[:-2]) + (a[-2], b[-1]),)


def _batchnorm(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    x, scale, shift = shapes
    if len(x) < 2 or scale != (x[1],) or shift != (x[1],):
        raise ShapeError(f"batchnorm needs scale and shift of shape [{x[1] if len(x) > 1 else '?'}]"
                         f" for data {list(x)}, got {list(scale)} and {list(shift)}")
    return (x,)


def _avgpool(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    (x,) = shapes
    nsp = len(x) - 2
    if nsp not in (1, 2, 3):
        raise ShapeError(f"average pool needs data [N,C,*S] with 1-3 spatial axes, got {list(x)}")
    _spatial_check(attrs, nsp, ("kernel", "strides", "pads"))
    out = list(x[:2])
    for i in range(nsp):
        n = conv_out_size(x[2 + i], attrs["kernel"][i], attrs["strides"][i], 1,
                          attrs["pads"][i], attrs["pads"][nsp + i])
        if n < 1 or attrs["pads"][i] >= attrs["kernel"][i] or attrs["pads"][nsp + i] >= attrs["kernel"][i]:
            raise ShapeError(f"pool window {attrs['kernel']} with pads {attrs['pads']} does not fit "
                             f"input {list(x[2:])}")
        out.append(n)
    return (tuple(out),)


def _axis(attrs: Attrs, rank: int) -> int:
    axis = attrs["axis"]
    if not 0 <= axis < rank:
        raise ShapeError(f"axis {axis} out of range for rank {rank}")
    return axis


def _concat(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    axis = _axis(attrs, len(shapes[0]))
    for s in shapes:
        if len(s) != len(shapes[0]) or any(a != b for d, (a, b) in enumerate(zip(s, shapes[0]))
                                           if d != axis):
            raise ShapeError(f"concat on axis {axis} of mismatched shapes {[list(s) for s in shapes]}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return (tuple(out),)


def _split(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    (x,) = shapes
    axis = _axis(attrs, len(x))
    if sum(attrs["sizes"]) != x[axis] or any(s < 1 for s in attrs["sizes"]):
        raise ShapeError(f"split sizes {attrs['sizes']} do not add up to {x[axis]} (axis {axis})")
    return tuple(x[:axis] + (s,) + x[axis + 1:] for s in attrs["sizes"])


def _slice(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    (x,) = shapes
    starts, steps, sizes = attrs["starts"], attrs["steps"], attrs["sizes"]
    if not len(starts) == len(steps) == len(sizes) == len(x):
        raise ShapeError(f"slice needs one start, step and size per axis of {list(x)}")
    for n, b, s, k in zip(x, starts, steps, sizes):
        if s < 1 or k < 1 or b < 0 or b + (k - 1) * s >= n:
            raise ShapeError(f"slice start {b}, step {s}, size {k} out of range for length {n}")
    return (tuple(sizes),)


def _pad(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    (x,) = shapes
    pads = attrs["pads"]
    if len(pads) != 2 * len(x) or any(p < 0 for p in pads):
        raise ShapeError(f"pads {pads} must be {2 * len(x)} non-negative numbers for {list(x)}")
    return (tuple(n + pads[d] + pads[len(x) + d] for d, n in enumerate(x)),)


def _transpose(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    (x,) = shapes
    perm = attrs["perm"]
    if sorted(perm) != list(range(len(x))):
        raise ShapeError(f"perm {perm} is not a permutation of {len(x)} axes")
    return (tuple(x[p] for p in perm),)


def _reshape_to(x: Shape, shape: Shape) -> Shape:
    if any(d < 1 for d in shape) or math.prod(shape) != math.prod(x):
        raise ShapeError(f"cannot reshape {list(x)} ({math.prod(x)} elements) to {list(shape)}")
    return tuple(shape)


def _reshape(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    return (_reshape_to(shapes[0], attrs["shape"]),)


def _reshape_transpose(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    mid = _reshape_to(shapes[0], attrs["split_shape"])
    (moved,) = _transpose(Attrs({"perm": attrs["perm"]}), [mid])
    return (_reshape_to(moved, attrs["shape"]),)


def _update(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    base, patch = shapes
    starts, steps = attrs["starts"], attrs["steps"]
    if not len(base) == len(patch) == len(starts) == len(steps):
        raise ShapeError(f"update of {list(base)} by {list(patch)}: ranks or box differ")
    for n, k, b, s in zip(base, patch, starts, steps):
        if s < 1 or b < 0 or b + (k - 1) * s >= n:
            raise ShapeError(f"update box start {b}, step {s}, size {k} leaves length {n}")
    return (base,)


def _fill(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    num, den = attrs["value"]
    if den < 1 or any(d < 1 for d in attrs["shape"]):
        raise ShapeError(f"fill of shape {list(attrs['shape'])} with value {num}/{den}")
    return (tuple(attrs["shape"]),)


def _opaque(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    return tuple(tuple(s) for s in attrs["shapes"])


SHAPE_RULES: dict[Op, Callable[[Attrs, Sequence[Shape]], tuple[Shape, ...]]] = {
    Op.ADD: _elementwise,
    Op.MUL: _elementwise,
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
    Op.OPAQUE: _opaque,
}

#: Number of inputs each kind takes (None: any number >= 1).
ARITY: dict[Op, int | None] = {
    Op.ADD: 2, Op.MUL: 2, Op.CONV: 2, Op.MATMUL: 2, Op.BATCHNORM: 3, Op.AVGPOOL: 1,
    Op.CONCAT: None, Op.SPLIT: 1, Op.SLICE: 1, Op.PAD: 1, Op.TRANSPOSE: 1, Op.RESHAPE: 1,
    Op.RESHAPE_TRANSPOSE: 1, Op.UPDATE: 2, Op.FILL: 0, Op.OPAQUE: None,
}
