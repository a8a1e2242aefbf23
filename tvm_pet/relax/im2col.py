"""A 2-D convolution lowered to Relax as one matrix product over its shifted windows
(:mod:`tvm_pet.ir.im2col` says which, and why).

The input is padded, its ``kh·kw`` shifted windows (each a strided slice) are concatenated on
channels, and the filters, permuted to ``[K, kh, kw, C]`` and flattened, multiply them: by
``"kw"``, ``[K, kh·kw·C] x [kh·kw·C, OH·OW]`` on the map as it is laid out; by ``"wk"``, the map
permuted to channels last, ``[OH·OW, kh·kw·C] x [kh·kw·C, K]``, permuted back. TVM fuses the
pad, slices and concat into one injective kernel; a constant filter's permutation is folded
at build time.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from tvm import relax

from tvm_pet.ir.im2col import ORDERS, eligible

Emit = Callable[[relax.Expr, str], relax.Expr]


def conv2d(emit: Emit, x: relax.Expr, w: relax.Expr, x_shape: Sequence[int],
           w_shape: Sequence[int], attrs: Mapping, order: str) -> relax.Expr:
    """Emit the CONV of ``x`` by ``w`` (attributes ``attrs``, which
    :func:`tvm_pet.ir.im2col.eligible` accepts) as a product over its windows, in ``order``
    (:data:`tvm_pet.ir.im2col.ORDERS`); its result has the direct form's shape."""
    if order not in ORDERS:
        raise ValueError(f"im2col order {order!r}: one of {ORDERS}")
    if not eligible(x_shape, w_shape, attrs):
        raise ValueError(f"no window form for a conv of {list(x_shape)} by {list(w_shape)} "
                         f"with {dict(attrs)}")
    n, c = x_shape[:2]
    k, _, kh, kw = w_shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = attrs["strides"], attrs["dilations"], attrs["pads"]
    oh = (x_shape[2] + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (x_shape[3] + pl + pr - dw * (kw - 1) - 1) // sw + 1
    last = order == "wk"
    if last:
        x = emit(relax.op.permute_dims(x, [0, 2, 3, 1]), "im2col_nhwc")
    if any(attrs["pads"]):
        width = [0, 0, pt, pb, pl, pr, 0, 0] if last else [0, 0, 0, 0, pt, pb, pl, pr]
        x = emit(relax.op.nn.pad(x, width), "im2col_pad")
    taps = [relax.op.strided_slice(x, axes=[1, 2] if last else [2, 3],
                                   begin=[i * dh, j * dw],
                                   end=[i * dh + (oh - 1) * sh + 1, j * dw + (ow - 1) * sw + 1],
                                   strides=[sh, sw])
            for i in range(kh) for j in range(kw)]
    cols = emit(relax.op.concat(taps, axis=3 if last else 1), "im2col_windows")
    depth = kh * kw * c  # the windows' channels: tap by tap, each tap's C channels
    flat = emit(relax.op.reshape(relax.op.permute_dims(w, [0, 2, 3, 1]), (k, depth)),
                "im2col_filters")
    if last:
        rows = emit(relax.op.reshape(cols, (n * oh * ow, depth)), "im2col_rows")
        prod = emit(relax.op.matmul(rows, relax.op.permute_dims(flat, [1, 0])), "im2col_prod")
        return emit(relax.op.permute_dims(relax.op.reshape(prod, (n, oh, ow, k)), [0, 3, 1, 2]),
                    "im2col_out")
    rows = emit(relax.op.reshape(cols, (depth, oh * ow) if n == 1 else (n, depth, oh * ow)),
                "im2col_rows")
    prod = emit(relax.op.matmul(flat, rows), "im2col_prod")
    return emit(relax.op.reshape(prod, (n, k, oh, ow)), "im2col_out")
