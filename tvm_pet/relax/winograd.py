"""A 3×3 convolution lowered to Relax as Winograd's F(m×m, 3×3) (Lavin and Gray, 2016).

TVM 0.27 lowers a Relax ``conv2d`` on a CPU to the direct loop nest only (its Winograd schedules
are CUDA's and ARM's). Winograd's form computes the same function in real arithmetic with
``a² / (9 m²)`` of the multiplications, ``a = m + 2``:

- each ``a × a`` input tile ``d`` (tiles overlap by 2, ``m`` apart) becomes ``Bᵀ d B``: ``Bᵀ``
  down the rows, then ``B`` along them, two grouped convolutions of stride ``m`` (``a × 1``,
  then ``1 × a``) with constant kernels, ``2 a`` multiplications an entry (or, with
  ``separable=False``, one whose kernel is ``B ⊗ B``, ``a²``);
- each filter ``g`` becomes ``G g Gᵀ`` (folded at compile time when the weight is a constant);
- for each of the ``a²`` tile positions, one matrix product over the channels: a batched
  ``matmul`` of ``[a², tiles, C]`` by ``[a², C, K]``;
- ``Aᵀ M A`` turns each product tile back into ``m × m`` outputs: a ``matmul`` of the constant
  ``Aᵀ ⊗ Aᵀ`` (``m² × a²``) with the products, then ``permute_dims`` back to the map, sliced to
  the output's sides.

A convolution with dilation ``d`` is first regrouped into the ``d²`` classes of its map by
position modulo ``d`` (space-to-batch, Figure 3 of the PET paper), on each of which it is a
regular 3×3 convolution, and regrouped back after.

By default (:data:`tvm_pet.ir.winograd.CHANNELS_LAST`) all of this runs on the map permuted to
``[n, h, w, c]``, back to ``[n, c, h, w]`` at the end: the tiles are gathered by ``take`` along
each spatial axis and ``Bᵀ`` applies to rows and to columns as two matrix products. Every
gather and scatter then moves whole channel vectors, and between two Winograd convolutions the
exit's and the entry's permutations compose to a renaming of indices once TVM fuses them with
the bias, ReLU or pad between. The channels-first form's glue computed div and mod of every
index of a fused gather (the CSRNet back end: 0.35 ms a call for 200 K floats).

``A``, ``B`` and ``G`` are TVM's own (``topi.nn.winograd_util``, Cook-Toom with its interpolation
points); :func:`identity_holds` checks the identity they must satisfy exactly, in rationals.
Rounding differs from the direct form's: on the tests' 512-channel maps the largest difference is
about 4e-6 of the output's scale at ``m = 4`` and 2e-6 at ``m = 2``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
import tvm
from tvm import relax

from tvm_pet.ir.winograd import CHANNELS_LAST, PRODUCTS, SEPARABLE_INPUT, TILES, eligible


Emit = Callable[[relax.Expr, str], relax.Expr]


def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Winograd's ``A`` (``a × m``), ``B`` (``a × a``) and ``G`` (``a × 3``) for F(m, 3), from
    TVM's own Cook-Toom construction (float64).

    >>> a, b, g = matrices(2)
    >>> d, w = np.arange(4.0), np.array([1.0, -2.0, 3.0])
    >>> bool(np.allclose(a.T @ ((g @ w) * (b.T @ d)), np.correlate(d, w, "valid")))
    True
    """
    if m not in TILES:
        raise ValueError(f"Winograd tile side {m} is not one of {TILES}")
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points
    return _cook_toom_convolution(_interpolation_points(m + 1), m, 3)


def identity_holds(m: int) -> bool:
    """Whether ``Aᵀ [(G g) ⊙ (Bᵀ d)] = d ⋆ g`` holds exactly for F(m, 3): each matrix entry
    read as the nearest fraction of denominator at most 1000 (Cook-Toom's entries are such
    fractions), and the identity compared coefficient by coefficient as a bilinear form in
    ``d`` and ``g``, in rationals. The 2-D form is this one applied to rows and to columns.

    >>> all(identity_holds(m) for m in TILES)
    True
    """
    a, b, g = (np.vectorize(lambda v: Fraction(v).limit_denominator(1000), otypes=[object])(x)
               for x in matrices(m))
    for i in range(m + 2):  # the coefficient of d[i] * w[k] in output j
        for k in range(3):
            for j in range(m):
                got = sum(a[t, j] * g[t, k] * b[i, t] for t in range(m + 2))
                if got != (1 if i == j + k else 0):
                    return False
    return True


def filter_transform(w: np.ndarray, m: int) -> np.ndarray:
    """``[a², C, K]``: the filters ``G g Gᵀ`` of ``w`` (``[K, C, 3, 3]``), position-major."""
    g = matrices(m)[2]
    a, (k, c) = m + 2, w.shape[:2]
    u = np.einsum("xi,kcij,yj->xykc", g, np.asarray(w, np.float64), g)
    return np.ascontiguousarray(u.reshape(a * a, k, c).transpose(0, 2, 1)).astype("float32")


def _filter_expr(emit: Emit, w: relax.Expr, k: int, c: int, m: int, products: str) -> relax.Expr:
    """The transformed filters: ``[a², c, k]``, or ``[a², k, c]`` for ``products == "kt"``."""
    order = [0, 2, 1] if products == "kt" else [0, 1, 2]
    if isinstance(w, tvm.ir.expr.Constant):
        return relax.const(np.ascontiguousarray(filter_transform(w.value.numpy(), m)
                                                .transpose(order)))
    g = relax.const(matrices(m)[2].astype("float32"))
    a = m + 2
    u = emit(relax.op.matmul(relax.op.matmul(g, w), relax.op.permute_dims(g)), "wino_filter")
    return emit(relax.op.permute_dims(relax.op.reshape(u, (k, c, a * a)),
                                      [2, 0, 1] if products == "kt" else [2, 1, 0]),
                "wino_filter")


def _input_transform(emit: Emit, xp: relax.Expr, b_mat: np.ndarray, c: int, m: int,
                     separable: bool) -> relax.Expr:
    """``Bᵀ d B`` of every ``a × a`` tile ``d`` of ``xp`` (tiles ``m`` apart), channel
    ``(ch · a + x) · a + y`` holding entry ``(x, y)`` of channel ``ch``'s tile: one grouped
    convolution with the constant ``B ⊗ B`` (``a²`` multiplications an entry), or, when
    ``separable``, ``Bᵀ`` down the rows then ``B`` along them (``2 a``)."""
    a = m + 2
    if not separable:
        kb = np.einsum("ix,jy->xyij", b_mat, b_mat).reshape(a * a, 1, a, a)
        return emit(relax.op.nn.conv2d(xp, relax.const(np.tile(kb, (c, 1, 1, 1)).astype(
            "float32")), strides=m, groups=c), "wino_tiles")
    rows = np.tile(b_mat.T.reshape(a, 1, a, 1), (c, 1, 1, 1)).astype("float32")
    v = emit(relax.op.nn.conv2d(xp, relax.const(rows), strides=(m, 1), groups=c), "wino_tiles")
    cols = np.tile(b_mat.T.reshape(a, 1, 1, a), (c * a, 1, 1, 1)).astype("float32")
    return emit(relax.op.nn.conv2d(v, relax.const(cols), strides=(1, m), groups=c * a),
                "wino_tiles")


def _products(emit: Emit, v: relax.Expr, u: relax.Expr, a_mat: np.ndarray,
              tiles: Sequence[int], k: int, m: int, products: str) -> relax.Expr:
    """The products of the transformed tiles ``v`` (``[a², n · th · tw, c]``) and filters ``u``
    (``[a², c, k]``; ``[a², k, c]`` in the filters-by-tiles order, ``products == "kt"``, with
    the tiles permuted to ``[a², c, T]`` and the products back), one batched ``matmul``, turned
    back into ``m × m`` outputs by ``Aᵀ · A``: ``[m, m, n, th, tw, k]`` for
    ``tiles = (n, th, tw)``."""
    a = m + 2
    count = int(np.prod(tiles))
    if products == "kt":
        vt = emit(relax.op.permute_dims(v, [0, 2, 1]), "wino_tiles")
        prod = emit(relax.op.matmul(u, vt), "wino_products")
        prod = emit(relax.op.permute_dims(prod, [0, 2, 1]), "wino_products")
    else:
        prod = emit(relax.op.matmul(v, u), "wino_products")
    prod = emit(relax.op.reshape(prod, (a * a, count * k)), "wino_products")
    at2 = np.einsum("xp,yq->pqxy", a_mat, a_mat).reshape(m * m, a * a).astype("float32")
    y = emit(relax.op.matmul(relax.const(at2), prod), "wino_out")
    return emit(relax.op.reshape(y, (m, m, *tiles, k)), "wino_out")


def _tiling(h: int, w: int, pads: Sequence[int], m: int) -> tuple:
    """``(oh, ow, th, tw, widths)`` of a 3×3 convolution of an ``h × w`` map padded by ``pads``
    (top, left, bottom, right): the output's sides, the ``m × m`` tiles a side, and the pads
    (top, bottom, left, right) that make the map ``th · m + 2`` by ``tw · m + 2``."""
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    th, tw = -(-oh // m), -(-ow // m)
    return oh, ow, th, tw, (pads[0], th * m + 2 - h - pads[0], pads[1], tw * m + 2 - w - pads[1])


def _regular(emit: Emit, x: relax.Expr, u: relax.Expr, shape: Sequence[int], k: int,
             pads: Sequence[int], m: int, separable: bool, products: str) -> relax.Expr:
    """The 3×3 convolution (dilation 1) of ``x`` (``[n, c, h, w]``) with the transformed
    filters ``u``, padded by ``pads`` (top, left, bottom, right)."""
    n, c, h, w = shape
    a_mat, b_mat, _ = matrices(m)
    a = m + 2
    oh, ow, th, tw, widths = _tiling(h, w, pads, m)
    xp = emit(relax.op.nn.pad(x, [0, 0, 0, 0, *widths]), "wino_pad")
    v = _input_transform(emit, xp, b_mat, c, m, separable)
    v = emit(relax.op.reshape(v, (n, c, a * a, th * tw)), "wino_tiles")
    v = emit(relax.op.permute_dims(v, [2, 0, 3, 1]), "wino_tiles")
    v = emit(relax.op.reshape(v, (a * a, n * th * tw, c)), "wino_tiles")
    y = _products(emit, v, u, a_mat, (n, th, tw), k, m, products)
    y = emit(relax.op.permute_dims(y, [2, 5, 3, 0, 4, 1]), "wino_out")
    y = emit(relax.op.reshape(y, (n, k, th * m, tw * m)), "wino_out")
    if (th * m, tw * m) != (oh, ow):
        y = emit(relax.op.strided_slice(y, axes=[2, 3], begin=[0, 0], end=[oh, ow]), "wino_out")
    return y


def conv2d(emit: Emit, x: relax.Expr, w: relax.Expr, x_shape: Sequence[int],
           w_shape: Sequence[int], attrs, m: int, separable: bool = SEPARABLE_INPUT,
           channels_last: bool = CHANNELS_LAST, products: str = PRODUCTS[0]) -> relax.Expr:
    """Emit the CONV of ``x`` by ``w`` (attributes ``attrs``, which
    :func:`tvm_pet.ir.winograd.eligible` accepts) as Winograd's F(m×m, 3×3); its result has the
    direct form's shape. ``channels_last`` (:data:`tvm_pet.ir.winograd.CHANNELS_LAST`, the
    default) works on ``[n, h, w, c]`` inside (:func:`_channels_last`); otherwise ``separable``
    transforms the input tiles by rows, then by columns
    (:data:`tvm_pet.ir.winograd.SEPARABLE_INPUT`, the default), else by ``B ⊗ B`` at once.
    ``products`` is the order of the batched products (:data:`tvm_pet.ir.winograd.PRODUCTS`)."""
    if products not in PRODUCTS:
        raise ValueError(f"Winograd products {products!r}: one of {PRODUCTS}")
    if not eligible(x_shape, w_shape, attrs):
        raise ValueError(f"no Winograd lowering for a conv of {list(x_shape)} by "
                         f"{list(w_shape)} with {dict(attrs)}")
    n, c, h, wd = x_shape
    k, d = w_shape[0], attrs["dilations"][0]
    u = _filter_expr(emit, w, k, c, m, products)
    pads = [p // d for p in attrs["pads"]]
    if channels_last:
        return _channels_last(emit, x, u, x_shape, k, d, pads, m, products)
    if d == 1:
        return _regular(emit, x, u, x_shape, k, pads, m, separable, products)
    t = emit(relax.op.reshape(x, (n, c, h // d, d, wd // d, d)), "wino_classes")
    t = emit(relax.op.permute_dims(t, [3, 5, 0, 1, 2, 4]), "wino_classes")
    t = emit(relax.op.reshape(t, (d * d * n, c, h // d, wd // d)), "wino_classes")
    t = _regular(emit, t, u, (d * d * n, c, h // d, wd // d), k, pads, m, separable, products)
    oh, ow = _tiling(h // d, wd // d, pads, m)[:2]
    t = emit(relax.op.reshape(t, (d, d, n, k, oh, ow)), "wino_classes")
    t = emit(relax.op.permute_dims(t, [2, 3, 4, 0, 5, 1]), "wino_classes")
    return emit(relax.op.reshape(t, (n, k, oh * d, ow * d)), "wino_classes")


def _channels_last(emit: Emit, x: relax.Expr, u: relax.Expr, x_shape: Sequence[int], k: int,
                   d: int, pads: Sequence[int], m: int, products: str) -> relax.Expr:
    """The convolution of ``x`` (``[n, c, h, w]``, dilation ``d``, ``pads`` in classes'
    positions) with the transformed filters ``u``, computed on ``[n, h, w, c]``.

    Every data movement then moves runs of whole channel vectors: the map is permuted to
    channels last on entry and back on exit, and between two Winograd convolutions (through a
    bias, a ReLU or a pad) the two permutations compose to a renaming of indices. The dilation's
    classes split and merge the spatial axes only; the tiles are gathered by ``take`` along
    each spatial axis; ``Bᵀ`` then applies to rows and to columns as two matrix products."""
    n, c, h, wd = x_shape
    a = m + 2
    a_mat, b_mat, _ = matrices(m)
    hd, wdd = h // d, wd // d
    oh, ow, th, tw, widths = _tiling(hd, wdd, pads, m)
    t = emit(relax.op.permute_dims(x, [0, 2, 3, 1]), "wino_nhwc")
    if d > 1:
        t = emit(relax.op.reshape(t, (n, hd, d, wdd, d, c)), "wino_classes")
        t = emit(relax.op.permute_dims(t, [2, 4, 0, 1, 3, 5]), "wino_classes")
        t = emit(relax.op.reshape(t, (d * d * n, hd, wdd, c)), "wino_classes")
    nb = d * d * n
    t = emit(relax.op.nn.pad(t, [0, 0, *widths, 0, 0]), "wino_pad")
    for axis, count in ((1, th), (2, tw)):  # [nb, th·a, tw·a, c]: the tiles' rows, then columns
        at = np.array([i * m + j for i in range(count) for j in range(a)], "int32")
        t = emit(relax.op.take(t, relax.const(at), axis=axis), "wino_tiles")
    t = emit(relax.op.reshape(t, (nb, th, a, tw, a, c)), "wino_tiles")
    t = emit(relax.op.permute_dims(t, [2, 4, 0, 1, 3, 5]), "wino_tiles")
    bt = relax.const(b_mat.T.astype("float32"))
    t = emit(relax.op.matmul(bt, relax.op.reshape(t, (a, a * nb * th * tw * c))), "wino_tiles")
    t = emit(relax.op.matmul(bt, relax.op.reshape(t, (a, a, nb * th * tw * c))), "wino_tiles")
    v = emit(relax.op.reshape(t, (a * a, nb * th * tw, c)), "wino_tiles")
    y = _products(emit, v, u, a_mat, (nb, th, tw), k, m, products)
    y = emit(relax.op.permute_dims(y, [2, 3, 0, 4, 1, 5]), "wino_out")
    y = emit(relax.op.reshape(y, (nb, th * m, tw * m, k)), "wino_out")
    if (th * m, tw * m) != (oh, ow):
        y = emit(relax.op.strided_slice(y, axes=[1, 2], begin=[0, 0], end=[oh, ow]), "wino_out")
    if d > 1:
        y = emit(relax.op.reshape(y, (d, d, n, oh, ow, k)), "wino_classes")
        y = emit(relax.op.permute_dims(y, [2, 3, 0, 4, 1, 5]), "wino_classes")
        y = emit(relax.op.reshape(y, (n, oh * d, ow * d, k)), "wino_classes")
    return emit(relax.op.permute_dims(y, [0, 3, 1, 2]), "wino_nchw")
