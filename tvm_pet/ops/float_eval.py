"""Float evaluation of whole tensors with NumPy: ``rule(attrs, inputs) -> outputs``.

The dtype of the inputs is kept, so the same table serves float32 runs and float64 oracles.
Opaque operators are evaluated when their ``kind`` is in :data:`OPAQUE_FLOAT`.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tvm_pet.errors import UnsupportedOperator
from tvm_pet.ir.node import Attrs
from tvm_pet.ir.ops import ONNX_INPUTS, Op, onnx_operands

Arrays = Sequence[np.ndarray]


def _windows(x: np.ndarray, kernel, strides, dilations, pads) -> np.ndarray:
    """Sliding windows over the spatial axes: [N, C, *out, *kernel] (a view where possible)."""
    nsp = len(kernel)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[nsp + i]) for i in range(nsp)])
    span = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
    win = sliding_window_view(xp, span, axis=tuple(range(2, 2 + nsp)))
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) \
        + tuple(slice(None, None, d) for d in dilations)
    return win[index]


def conv(attrs: Attrs, args: Arrays) -> tuple[np.ndarray]:
    x, w = args
    nsp = x.ndim - 2
    g = attrs["groups"]
    win = _windows(x, w.shape[2:], attrs["strides"], attrs["dilations"], attrs["pads"])
    n, c = x.shape[:2]
    out_sp = win.shape[2:2 + nsp]
    win = win.reshape((n, g, c // g) + out_sp + (math.prod(w.shape[2:]),))
    wg = w.reshape((g, w.shape[0] // g, c // g, math.prod(w.shape[2:])))
    sp = "xyz"[:nsp]
    out = np.einsum(f"ngc{sp}k,gock->ngo{sp}", win, wg, optimize=True)
    return (out.reshape((n, w.shape[0]) + out_sp).astype(x.dtype, copy=False),)


def avgpool(attrs: Attrs, args: Arrays) -> tuple[np.ndarray]:
    (x,) = args
    kernel, strides, pads = attrs["kernel"], attrs["strides"], attrs["pads"]
    ones = (1,) * len(kernel)
    nsp = len(kernel)
    total = _windows(x, kernel, strides, ones, pads).sum(axis=tuple(range(-nsp, 0)))
    if attrs["count_include_pad"]:
        count = math.prod(kernel)
    else:
        mask = np.ones((1, 1) + x.shape[2:], x.dtype)
        count = _windows(mask, kernel, strides, ones, pads).sum(axis=tuple(range(-nsp, 0)))
    return ((total / count).astype(x.dtype, copy=False),)


def _split(attrs: Attrs, args: Arrays) -> tuple[np.ndarray, ...]:
    cuts = np.cumsum(attrs["sizes"])[:-1]
    return tuple(np.split(args[0], cuts, axis=attrs["axis"]))


def _slice(attrs: Attrs, args: Arrays) -> tuple[np.ndarray]:
    index = tuple(slice(b, b + (k - 1) * s + 1, s)
                  for b, s, k in zip(attrs["starts"], attrs["steps"], attrs["sizes"]))
    return (args[0][index],)


def _pad(attrs: Attrs, args: Arrays) -> tuple[np.ndarray]:
    (x,) = args
    p = attrs["pads"]
    return (np.pad(x, [(p[d], p[x.ndim + d]) for d in range(x.ndim)]),)


def _reshape_transpose(attrs: Attrs, args: Arrays) -> tuple[np.ndarray]:
    moved = args[0].reshape(attrs["split_shape"]).transpose(attrs["perm"])
    return (moved.reshape(attrs["shape"]),)


def _update(attrs: Attrs, args: Arrays) -> tuple[np.ndarray]:
    base, patch = args
    out = base.copy()
    index = tuple(slice(b, b + (k - 1) * s + 1, s)
                  for b, s, k in zip(attrs["starts"], attrs["steps"], patch.shape))
    out[index] = patch
    return (out,)


def _erf(x: np.ndarray) -> np.ndarray:
    """The error function element-wise (SciPy's, vectorized: ``math.erf`` per element took
    seconds on one BERT-base layer)."""
    from scipy.special import erf
    return erf(x).astype(x.dtype, copy=False) if x.size else x


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def maxpool_ceil_pads(params: Attrs, spatial: Sequence[int]) -> tuple[int, ...]:
    """The padding that ONNX MaxPool's ``ceil_mode`` adds at the end of each spatial axis (all
    zero without it): the last window may run past the input and its padding.

    TVM keeps a window that starts past the input and its begin padding (it reads only padding,
    and TVM gives it the lowest float); PyTorch and ONNX drop it. Where ceil_mode would make one,
    the three disagree, so tvm_pet leaves that pool alone (UnsupportedOperator).

    >>> maxpool_ceil_pads({"kernel_shape": (3,), "strides": (2,), "ceil_mode": 1}, (110,))
    (1,)
    """
    kernel = tuple(params["kernel_shape"])
    n = len(kernel)
    pads, strides = params.get("pads", (0,) * 2 * n), params.get("strides", (1,) * n)
    if any(params.get(k, d) != d for k, d in [("dilations", (1,) * n), ("auto_pad", "NOTSET"),
                                             ("storage_order", 0)]):
        raise UnsupportedOperator(f"MaxPool with attributes {dict(params)}: tvm_pet runs "
                                  f"MaxPool without dilations, auto_pad or storage_order only")
    if not params.get("ceil_mode", 0):
        return (0,) * n
    extra = []
    for i, size in enumerate(spatial):
        span = size + pads[i] + pads[n + i] - kernel[i]
        last = -(-span // strides[i]) * strides[i]  # where ceil_mode's last window starts
        if last >= size + pads[i]:
            raise UnsupportedOperator(f"MaxPool with attributes {dict(params)} on spatial size "
                                      f"{tuple(spatial)}: ceil_mode makes a window of padding "
                                      f"only, which TVM and ONNX compute differently")
        extra.append(last - span)
    return tuple(extra)


def _maxpool(params, args: Arrays) -> np.ndarray:
    """ONNX MaxPool (no dilation) on [N, C, *spatial]; padding reads as -inf; ``ceil_mode`` as
    :func:`maxpool_ceil_pads` allows."""
    x, kernel = args[0], tuple(params["kernel_shape"])
    n = len(kernel)
    extra = maxpool_ceil_pads(params, x.shape[2:])
    pads, strides = params.get("pads", (0,) * 2 * n), params.get("strides", (1,) * n)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[n + i] + extra[i]) for i in range(n)],
                constant_values=-np.inf)
    win = sliding_window_view(xp, kernel, axis=tuple(range(2, 2 + n)))
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
    return win.max(axis=tuple(range(-n, 0)))


def _layernorm(params, args: Arrays) -> np.ndarray:
    """ONNX LayerNormalization over the axes from ``axis`` on, with scale and optional bias."""
    x, scale = args[0], args[1]
    axes = tuple(range(params.get("axis", -1) % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + params.get("epsilon", 1e-5)) * scale
    return y + args[2] if len(args) > 2 else y


def _clip(params, args: Arrays) -> np.ndarray:
    """ONNX Clip: the bounds (inputs 1 and 2, either absent) applied as max, then min."""
    operands = onnx_operands(dict(params).get(ONNX_INPUTS), args, absent=None,
                             const=lambda value: value)
    x, low, high = (operands + [None, None])[:3]
    x = x if low is None else np.maximum(x, low.astype(x.dtype))
    return x if high is None else np.minimum(x, high.astype(x.dtype))


#: Float implementations of the non-linear operators tvm_pet can run (by ``kind``).
OPAQUE_FLOAT: dict[str, Callable[[Attrs, Arrays], np.ndarray]] = {
    "Relu": lambda p, a: np.maximum(a[0], 0),
    "Sigmoid": lambda p, a: 1 / (1 + np.exp(-a[0])),
    "Tanh": lambda p, a: np.tanh(a[0]),
    "Erf": lambda p, a: _erf(a[0]),
    "Exp": lambda p, a: np.exp(a[0]),
    "Identity": lambda p, a: a[0],
    "Clip": _clip,
    "Max": lambda p, a: functools.reduce(np.maximum, a),
    "Min": lambda p, a: functools.reduce(np.minimum, a),
    "Softmax": lambda p, a: _softmax(a[0], p.get("axis", -1)),
    "MaxPool": _maxpool,
    "LayerNormalization": _layernorm,
    "Gelu": lambda p, a: 0.5 * a[0] * (1 + _erf(a[0] / np.sqrt(2).astype(a[0].dtype))),
    "IsNaN": lambda p, a: np.isnan(a[0]),  # as 0 and 1 in the float dtype (_opaque)
    "Where": lambda p, a: np.where(a[0] != 0, a[1], a[2]),
}


def _opaque(attrs: Attrs, args: Arrays) -> tuple[np.ndarray, ...]:
    kind = attrs["kind"]
    if kind not in OPAQUE_FLOAT:
        raise UnsupportedOperator(f"no float evaluation for operator {kind!r}; "
                                  f"tvm_pet evaluates {sorted(OPAQUE_FLOAT)}")
    out = OPAQUE_FLOAT[kind](attrs["params"], args)
    dtype = next((a.dtype for a in args if a.dtype.kind == "f"), args[0].dtype)
    return (np.asarray(out, dtype=dtype),)


FLOAT_RULES: dict[Op, Callable[[Attrs, Arrays], tuple[np.ndarray, ...]]] = {
    Op.ADD: lambda a, x: (x[0] + x[1],),
    Op.MUL: lambda a, x: (x[0] * x[1],),
    Op.CONV: conv,
    Op.MATMUL: lambda a, x: (np.matmul(x[0], x[1]),),
    Op.BATCHNORM: lambda a, x: (x[0] * x[1].reshape((-1,) + (1,) * (x[0].ndim - 2))
                                + x[2].reshape((-1,) + (1,) * (x[0].ndim - 2)),),
    Op.AVGPOOL: avgpool,
    Op.CONCAT: lambda a, x: (np.concatenate(x, axis=a["axis"]),),
    Op.SPLIT: _split,
    Op.SLICE: _slice,
    Op.PAD: _pad,
    Op.TRANSPOSE: lambda a, x: (np.transpose(x[0], a["perm"]),),
    Op.RESHAPE: lambda a, x: (x[0].reshape(a["shape"]),),
    Op.RESHAPE_TRANSPOSE: _reshape_transpose,
    Op.UPDATE: _update,
    Op.FILL: lambda a, x: (np.full(a["shape"], a["value"][0] / a["value"][1]),),
    Op.OPAQUE: _opaque,
}
