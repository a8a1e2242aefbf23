"""A 2-D or 3-D convolution lowered to Relax as one matrix product over its shifted windows
(:mod:`tvm_pet.ir.im2col` says which, and why).

The input is permuted to channels last and padded; its shifted windows (one strided slice per
tap of the kernel, ``kh·kw`` of them in 2-D, ``kd·kh·kw`` in 3-D) are concatenated on channels,
and the filters, permuted to ``[K, kd, kh, kw, C]`` and flattened, multiply them:
``[OD·OH·OW, taps·C] x [taps·C, K]``, permuted back to channels first. TVM fuses the permute,
pad, slices and concat into one injective kernel; a constant filter's permutation is folded at
build time.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

from tvm import relax

from tvm_pet.ir.im2col import ORDERS, eligible, output_sides

Emit = Callable[[relax.Expr, str], relax.Expr]


def conv(emit: Emit, x: relax.Expr, w: relax.Expr, x_shape: Sequence[int],
         w_shape: Sequence[int], attrs: Mapping, order: str) -> relax.Expr:
    """Emit the CONV of ``x`` by ``w`` (attributes ``attrs``, which
    :func:`tvm_pet.ir.im2col.eligible` accepts) as a product over its windows, in ``order``
    (:data:`tvm_pet.ir.im2col.ORDERS`); its result has the direct form's shape."""
    if order not in ORDERS:
        raise ValueError(f"im2col order {order!r}: one of {ORDERS}")
    if not eligible(x_shape, w_shape, attrs):
        raise ValueError(f"no window form for a conv of {list(x_shape)} by {list(w_shape)} "
                         f"with {dict(attrs)}")
    nsp = len(x_shape) - 2
    n, c, k = x_shape[0], x_shape[1], w_shape[0]
    strides, dilations, pads = attrs["strides"], attrs["dilations"], attrs["pads"]
    sides = output_sides(x_shape, w_shape, attrs)
    last = [0, *range(2, nsp + 2), 1]  # channels first -> channels last
    x = emit(relax.op.permute_dims(x, last), "im2col_channels_last")
    if any(pads):
        width = [0, 0] + [p for i in range(nsp) for p in (pads[i], pads[nsp + i])] + [0, 0]
        x = emit(relax.op.nn.pad(x, width), "im2col_pad")
    axes = list(range(1, nsp + 1))
    taps = []
    for tap in itertools.product(*(range(t) for t in w_shape[2:])):
        begin = [t * d for t, d in zip(tap, dilations)]
        end = [b + (o - 1) * s + 1 for b, o, s in zip(begin, sides, strides)]
        taps.append(relax.op.strided_slice(x, axes=axes, begin=begin, end=end, strides=strides))
    cols = emit(relax.op.concat(taps, axis=nsp + 1), "im2col_windows")
    depth = len(taps) * c  # the windows' channels: tap by tap, each tap's C channels
    flat = emit(relax.op.reshape(relax.op.permute_dims(w, [0, *range(2, nsp + 2), 1]),
                                 (k, depth)), "im2col_filters")
    rows = emit(relax.op.reshape(cols, (n * math.prod(sides), depth)), "im2col_rows")
    prod = emit(relax.op.matmul(rows, relax.op.permute_dims(flat, [1, 0])), "im2col_prod")
    first = [0, nsp + 1, *range(1, nsp + 1)]  # channels last -> channels first
    return emit(relax.op.permute_dims(relax.op.reshape(prod, (n, *sides, k)), first),
                "im2col_out")
