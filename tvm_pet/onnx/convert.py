"""Converters from ONNX operators to tvm_pet's multi-linear ops, one function per op_type.

``convert(importer, node, attrs)`` emits the node with multi-linear ops through the importer and
returns its output name, or returns None (having emitted nothing) when the node must stay opaque
(an attribute outside what the IR ops express). :data:`LINEAR_CONVERTERS` is the table the
importer (:mod:`tvm_pet.onnx.importer`) consults.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import onnx

from tvm_pet.errors import ModelError
from tvm_pet.ir.node import Shape
from tvm_pet.ir.ops import Op

if TYPE_CHECKING:
    from tvm_pet.onnx.importer import _Importer

def _describe(node: onnx.NodeProto) -> str:
    label = repr(node.name) if node.name else f"producing {list(node.output)}"
    return f"{node.op_type} node {label}"

#: ``convert(importer, node, attrs)`` emits the node with multi-linear ops and returns its output
#: name, or returns None (having emitted nothing) when the node must stay opaque.
Converter = Callable[["_Importer", onnx.NodeProto, dict], "str | None"]


def _window_pads(a: dict, spatial: Shape, kernel: Shape, strides: Shape, dilations: Shape) -> Shape:
    """Explicit begins + ends pads of a Conv or pool, resolving ``auto_pad``."""
    mode, n = a.get("auto_pad", "NOTSET"), len(kernel)
    if mode == "NOTSET":
        return tuple(a.get("pads", (0,) * 2 * n))
    if mode == "VALID":
        return (0,) * 2 * n
    begins, ends = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        begins.append(total // 2 if mode == "SAME_UPPER" else total - total // 2)
        ends.append(total - begins[-1])
    return tuple(begins + ends)


def _elementwise(imp: _Importer, node, a):
    x, y = (imp.tensor(i, node) for i in node.input)
    return imp.emit(Op.ADD if node.op_type == "Add" else Op.MUL, [x, y], {}, node.output[0], "")


def _sub(imp: _Importer, node, a):
    x, y = (imp.tensor(i, node) for i in node.input)
    negated = imp.emit(Op.MUL, [y, imp.scalar(-1.0)], {}, None, node.output[0])
    return imp.emit(Op.ADD, [x, negated], {}, node.output[0], "")


def _channel_vector(imp: _Importer, node, name: str, rank: int) -> str:
    """A per-channel vector [C] as a tensor of shape [1, C, 1, ...] of the given rank."""
    if name in imp.consts:
        return imp.weight(name, imp.consts[name].reshape((1, -1) + (1,) * (rank - 2)))
    t = imp.tensor(name, node)
    return imp.emit(Op.RESHAPE, [t], {"shape": (1, imp.shape(t)[0]) + (1,) * (rank - 2)}, None, t)


def _conv(imp: _Importer, node, a):
    x, w = imp.tensor(node.input[0], node), imp.tensor(node.input[1], node)
    kernel = imp.shape(w)[2:]
    ones = (1,) * len(kernel)
    strides, dilations = tuple(a.get("strides", ones)), tuple(a.get("dilations", ones))
    attrs = {"strides": strides, "dilations": dilations, "groups": a.get("group", 1),
             "pads": _window_pads(a, imp.shape(x)[2:], kernel, strides, dilations)}
    out, has_bias = node.output[0], len(node.input) > 2 and bool(node.input[2])
    y = imp.emit(Op.CONV, [x, w], attrs, None if has_bias else out, out)
    if has_bias:
        bias = _channel_vector(imp, node, node.input[2], 2 + len(kernel))
        y = imp.emit(Op.ADD, [y, bias], {}, out, out)
    return y


def _matmul(imp: _Importer, node, a):
    x, y = (imp.tensor(i, node) for i in node.input)
    out = node.output[0]
    if len(imp.shape(x)) >= 2 and len(imp.shape(y)) >= 2:
        return imp.emit(Op.MATMUL, [x, y], {}, out, out)
    if imp.inferred.get(out) is None:
        return None
    if len(imp.shape(x)) == 1:
        x = imp.emit(Op.RESHAPE, [x], {"shape": (1,) + imp.shape(x)}, None, x)
    if len(imp.shape(y)) == 1:
        y = imp.emit(Op.RESHAPE, [y], {"shape": imp.shape(y) + (1,)}, None, y)
    z = imp.emit(Op.MATMUL, [x, y], {}, None, out)
    return imp.emit(Op.RESHAPE, [z], {"shape": imp.inferred[out]}, out, out)


def _gemm(imp: _Importer, node, a):
    x, y = (imp.tensor(i, node) for i in node.input[:2])
    out, has_c = node.output[0], len(node.input) > 2 and bool(node.input[2])
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    if a.get("transA", 0):
        x = imp.emit(Op.TRANSPOSE, [x], {"perm": (1, 0)}, None, x)
    if a.get("transB", 0):
        y = imp.emit(Op.TRANSPOSE, [y], {"perm": (1, 0)}, None, y)
    z = imp.emit(Op.MATMUL, [x, y], {}, None if has_c or alpha != 1.0 else out, out)
    if alpha != 1.0:
        z = imp.emit(Op.MUL, [z, imp.scalar(alpha)], {}, None if has_c else out, out)
    if has_c:
        c = imp.tensor(node.input[2], node)
        if beta != 1.0:
            c = imp.emit(Op.MUL, [c, imp.scalar(beta)], {}, None, c)
        z = imp.emit(Op.ADD, [z, c], {}, out, out)
    return z


def _batchnorm(imp: _Importer, node, a):
    stats = node.input[1:5]
    if a.get("training_mode", 0) or any(node.output[1:]) or not all(s in imp.consts for s in stats):
        return None
    gamma, beta, mean, var = (imp.consts[s].astype(np.float64) for s in stats)
    scale = gamma / np.sqrt(var + a.get("epsilon", 1e-5))
    shift = beta - mean * scale
    x = imp.tensor(node.input[0], node)
    return imp.emit(Op.BATCHNORM, [x, imp.weight(stats[0], scale), imp.weight(stats[1], shift)],
                    {}, node.output[0], "")


def _avgpool(imp: _Importer, node, a):
    kernel = tuple(a["kernel_shape"])
    ones = (1,) * len(kernel)
    if a.get("ceil_mode", 0) or tuple(a.get("dilations", ones)) != ones:
        return None
    x, strides = imp.tensor(node.input[0], node), tuple(a.get("strides", ones))
    pads = _window_pads(a, imp.shape(x)[2:], kernel, strides, ones)
    if any(p >= k for p, k in zip(pads, kernel * 2)):
        return None
    return imp.emit(Op.AVGPOOL, [x], {"kernel": kernel, "strides": strides, "pads": pads,
                                      "count_include_pad": bool(a.get("count_include_pad", 0))},
                    node.output[0], "")


def _global_avgpool(imp: _Importer, node, a):
    x = imp.tensor(node.input[0], node)
    kernel = imp.shape(x)[2:]
    return imp.emit(Op.AVGPOOL, [x], {"kernel": kernel, "strides": (1,) * len(kernel),
                                      "pads": (0,) * 2 * len(kernel), "count_include_pad": False},
                    node.output[0], "")


def _concat(imp: _Importer, node, a):
    xs = [imp.tensor(i, node) for i in node.input]
    return imp.emit(Op.CONCAT, xs, {"axis": a["axis"] % len(imp.shape(xs[0]))}, node.output[0], "")


def _split(imp: _Importer, node, a):
    x = imp.tensor(node.input[0], node)
    axis = a.get("axis", 0) % len(imp.shape(x))
    n, k = imp.shape(x)[axis], len(node.output)
    sizes = imp.const(node, 1, required=False)
    sizes = a.get("split") if sizes is None else sizes
    if sizes is None:
        chunk = -(-n // a.get("num_outputs", k))
        sizes = [chunk] * (k - 1) + [n - chunk * (k - 1)]
    outputs = [o or imp.fresh(x) for o in node.output]
    imp.b.node(Op.SPLIT, [x], {"axis": axis, "sizes": tuple(int(s) for s in sizes)}, outputs)
    return outputs[0]


def _slice_bounds(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX Slice's normalisation of one axis: negative indices count from the end, then clamp."""
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


def _slice(imp: _Importer, node, a):
    shape = imp.shape(node.input[0])
    starts, ends = imp.const(node, 1), imp.const(node, 2)
    axes = imp.const(node, 3, required=False)
    steps = imp.const(node, 4, required=False)
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if any(s <= 0 for s in steps):
        return None  # reversed slices (and the invalid step 0) stay opaque
    begin, step, size = [0] * len(shape), [1] * len(shape), list(shape)
    for ax, s, e, st in zip(axes, starts, ends, steps):
        ax = int(ax) % len(shape)
        b, e = _slice_bounds(shape[ax], int(s), int(e), int(st))
        begin[ax], step[ax], size[ax] = b, int(st), max(0, -(-(e - b) // int(st)))
    if 0 in size:
        raise ModelError(f"{_describe(node)} selects no element ({size}); tvm_pet tensors are "
                         f"non-empty")
    x = imp.tensor(node.input[0], node)
    return imp.emit(Op.SLICE, [x], {"starts": begin, "steps": step, "sizes": size},
                    node.output[0], "")


def _pad(imp: _Importer, node, a):
    has_value = len(node.input) > 2 and bool(node.input[2])
    if a.get("mode", "constant") != "constant" or (has_value and node.input[2] not in imp.consts):
        return None
    value = imp.const(node, 2, required=False)
    if value is not None and value.size and float(value.ravel()[0]) != 0.0:
        return None
    rank = len(imp.shape(node.input[0]))
    pads = [int(p) for p in imp.const(node, 1)]
    axes = imp.const(node, 3, required=False)
    if axes is not None:
        full = [0] * 2 * rank
        for i, ax in enumerate(int(v) % rank for v in axes):
            full[ax], full[rank + ax] = pads[i], pads[len(axes) + i]
        pads = full
    if any(p < 0 for p in pads):
        return None
    return imp.emit(Op.PAD, [imp.tensor(node.input[0], node)], {"pads": pads}, node.output[0], "")


def _transpose(imp: _Importer, node, a):
    x = imp.tensor(node.input[0], node)
    perm = a.get("perm", tuple(reversed(range(len(imp.shape(x))))))
    return imp.emit(Op.TRANSPOSE, [x], {"perm": perm}, node.output[0], "")


def _target_shape(shape: Shape, spec, allowzero: int) -> Shape:
    """ONNX Reshape's target: 0 copies the input dimension (unless allowzero), -1 is inferred."""
    out = [shape[i] if int(d) == 0 and not allowzero else int(d) for i, d in enumerate(spec)]
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = math.prod(shape) // known if known else 0
    return tuple(out)


def _reshape_to(imp: _Importer, node, shape) -> str:
    x = imp.tensor(node.input[0], node)
    return imp.emit(Op.RESHAPE, [x], {"shape": tuple(int(d) for d in shape)}, node.output[0], "")


def _reshape(imp: _Importer, node, a):
    target = _target_shape(imp.shape(node.input[0]), imp.const(node, 1), a.get("allowzero", 0))
    return _reshape_to(imp, node, target)


def _flatten(imp: _Importer, node, a):
    shape = imp.shape(node.input[0])
    axis = a.get("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    return _reshape_to(imp, node, (math.prod(shape[:axis]), math.prod(shape[axis:])))


def _axes_operand(imp: _Importer, node, a) -> list[int] | None:
    axes = imp.const(node, 1, required=False)
    axes = a.get("axes") if axes is None else axes
    return None if axes is None else [int(v) for v in np.ravel(axes)]


def _squeeze(imp: _Importer, node, a):
    shape = imp.shape(node.input[0])
    axes = _axes_operand(imp, node, a)
    if axes is None:
        drop = {i for i, d in enumerate(shape) if d == 1}
    else:
        drop = {v % len(shape) for v in axes}
    return _reshape_to(imp, node, [d for i, d in enumerate(shape) if i not in drop])


def _unsqueeze(imp: _Importer, node, a):
    shape = list(imp.shape(node.input[0]))
    axes = _axes_operand(imp, node, a) or []
    rank = len(shape) + len(axes)
    for ax in sorted(v % rank for v in axes):
        shape.insert(ax, 1)
    return _reshape_to(imp, node, shape)


def _identity(imp: _Importer, node, a):
    return _reshape_to(imp, node, imp.shape(node.input[0]))


def _dropout(imp: _Importer, node, a):
    has_mode = len(node.input) > 2 and bool(node.input[2])
    if has_mode and (node.input[2] not in imp.consts or imp.consts[node.input[2]].any()):
        return None  # training mode (or one known only at run time) stays opaque
    if len(node.output) > 1 and node.output[1] in imp.used:
        return None
    return _identity(imp, node, a)


def _scatter_nd(imp: _Importer, node, a):
    """ScatterND whose constant indices list a strided box: the exporter's form of UPDATE."""
    if a.get("reduction", "none") != "none" or node.input[1] not in imp.consts:
        return None
    index = imp.consts[node.input[1]].astype(np.int64)
    base, patch = imp.shape(node.input[0]), imp.shape(node.input[2])
    if len(patch) != len(base) or index.shape != patch + (len(base),):
        return None
    starts = index[(0,) * len(base)]
    steps = [int(index[tuple(int(j == d) for j in range(len(base)))][d] - starts[d]) if k > 1 else 1
             for d, k in enumerate(patch)]
    grid = np.moveaxis(np.indices(patch), 0, -1) * steps + starts
    if (not np.array_equal(grid, index) or any(s < 1 for s in steps) or (starts < 0).any()
            or any(b + (k - 1) * s >= n for b, k, s, n in zip(starts, patch, steps, base))):
        return None
    x, y = imp.tensor(node.input[0], node), imp.tensor(node.input[2], node)
    return imp.emit(Op.UPDATE, [x, y], {"starts": tuple(int(s) for s in starts), "steps": steps},
                    node.output[0], "")


#: The ONNX operators written with multi-linear ops, by op_type.
LINEAR_CONVERTERS: dict[str, Converter] = {
    "Add": _elementwise, "Mul": _elementwise, "Sub": _sub,
    "Conv": _conv, "MatMul": _matmul, "Gemm": _gemm,
    "BatchNormalization": _batchnorm, "AveragePool": _avgpool, "GlobalAveragePool": _global_avgpool,
    "Concat": _concat, "Split": _split, "Slice": _slice, "Pad": _pad, "Transpose": _transpose,
    "Reshape": _reshape, "Flatten": _flatten, "Squeeze": _squeeze, "Unsqueeze": _unsqueeze,
    "Identity": _identity, "Dropout": _dropout, "ScatterND": _scatter_nd,
}
