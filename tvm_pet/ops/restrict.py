"""Computing an operator on a region of its output, from regions of its inputs.

A region is ``(lo, hi, step)`` per axis (``hi`` one past the last position). A rule returns a
:class:`Restriction`: the attributes with which the same operator computes a region ``computed``
(which contains the one asked for) from the given input regions (``None`` for an input that is not
needed), or ``None`` when the operator cannot be restricted (the corrector then computes it whole).
``identity`` means the (sliced) input region already is the result. The corrector (paper 5.2 step 3) uses these to recompute the original
program only where the candidate differs, slicing just the input elements it needs.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tvm_pet.ir.node import Attrs, Shape
from tvm_pet.ir.ops import Op

Span = tuple[int, int, int]  # lo, hi (exclusive), step
Region = tuple[Span, ...]


@dataclasses.dataclass(frozen=True)
class Restriction:
    attrs: Attrs
    inputs: tuple[Region | None, ...]
    computed: Region
    identity: bool = False


def count(span: Span) -> int:
    lo, hi, step = span
    return (hi - lo + step - 1) // step


def dense(span: Span) -> Span:
    return (span[0], span[1], 1)


def full(shape: Shape) -> Region:
    return tuple((0, n, 1) for n in shape)


def _broadcast_region(region: Region, shape: Shape) -> Region:
    sub = region[len(region) - len(shape):]
    return tuple((0, 1, 1) if n == 1 else s for s, n in zip(sub, shape))


def _elementwise(attrs, ins, outs, j, region) -> Restriction:
    return Restriction(attrs, tuple(_broadcast_region(region, s) for s in ins), region)


def _window_axis(span: Span, n: int, k: int, stride: int, dilation: int, pad: int):
    """Input span, new pads and stride for output positions ``span`` of one window axis."""
    lo, hi, step = span
    start = lo * stride - pad
    end = (hi - 1) * stride - pad + (k - 1) * dilation + 1
    in_lo, in_hi = max(start, 0), min(end, n)
    if in_lo >= in_hi:
        return None
    return (in_lo, in_hi, 1), in_lo - start, end - in_hi, stride * step


def _spatial(attrs, x: Shape, kernel, dilations, region):
    nsp = len(kernel)
    spans, begins, ends, strides = [], [], [], []
    for i in range(nsp):
        got = _window_axis(region[2 + i], x[2 + i], kernel[i], attrs["strides"][i],
                           dilations[i], attrs["pads"][i])
        if got is None:
            return None
        spans.append(got[0]); begins.append(got[1]); ends.append(got[2]); strides.append(got[3])
    return spans, tuple(begins + ends), tuple(strides)


def _conv(attrs, ins, outs, j, region) -> Restriction | None:
    x, w = ins
    g = attrs["groups"]
    got = _spatial(attrs, x, w[2:], attrs["dilations"], region)
    if got is None:
        return None
    spans, pads, strides = got
    o = region[1]
    if g == 1:
        cin, groups = (0, x[1], 1), 1
    else:
        og, cg = w[0] // g, x[1] // g
        g0, g1 = o[0] // og, (o[1] - 1) // og + 1
        o, cin, groups = (g0 * og, g1 * og, 1), (g0 * cg, g1 * cg, 1), g1 - g0
    xr = (region[0], cin, *spans)
    wr = (o,) + full(w[1:])
    computed = (region[0], o) + region[2:]
    return Restriction(attrs.replace(pads=pads, strides=strides, groups=groups),
                       (xr, wr), computed)


def _avgpool(attrs, ins, outs, j, region) -> Restriction | None:
    k = attrs["kernel"]
    got = _spatial(attrs, ins[0], k, (1,) * len(k), region)
    if got is None:
        return None
    spans, pads, strides = got
    return Restriction(attrs.replace(pads=pads, strides=strides),
                       ((region[0], region[1], *spans),), region)


def _matmul(attrs, ins, outs, j, region) -> Restriction:
    a, b = ins
    batch = region[:-2]
    ar = _broadcast_region(batch, a[:-2]) + (region[-2], (0, a[-1], 1))
    br = _broadcast_region(batch, b[:-2]) + ((0, b[-2], 1), region[-1])
    return Restriction(attrs, (ar, br), region)


def _batchnorm(attrs, ins, outs, j, region) -> Restriction:
    c = (region[1],)
    return Restriction(attrs, (region, c, c), region)


def _concat(attrs, ins, outs, j, region) -> Restriction:
    axis = attrs["axis"]
    lo, hi, _ = region[axis]
    parts, start = [], 0
    for shape in ins:
        a, b = max(lo, start), min(hi, start + shape[axis])
        parts.append(None if a >= b else region[:axis] + ((a - start, b - start, 1),)
                     + region[axis + 1:])
        start += shape[axis]
    return Restriction(attrs, tuple(parts), region[:axis] + ((lo, hi, 1),) + region[axis + 1:])


def _split(attrs, ins, outs, j, region) -> Restriction:
    axis = attrs["axis"]
    off = sum(attrs["sizes"][:j])
    lo, hi, step = region[axis]
    return Restriction(Attrs(), (region[:axis] + ((lo + off, hi + off, step),) + region[axis + 1:],),
                       region, identity=True)


def _slice(attrs, ins, outs, j, region) -> Restriction:
    spans = tuple((b + lo * s, b + (hi - 1) * s + 1, s * st)
                  for (lo, hi, st), b, s in zip(region, attrs["starts"], attrs["steps"]))
    return Restriction(Attrs(), (spans,), region, identity=True)


def _pad(attrs, ins, outs, j, region) -> Restriction | None:
    (x,) = ins
    p, rank = attrs["pads"], len(x)
    spans, begins, ends, computed = [], [], [], []
    for d, (lo, hi, step) in enumerate(region):
        b = p[d]
        if step > 1 and (p[d] or p[rank + d]):
            step = 1
        in_lo, in_hi = max(lo - b, 0), min(hi - b, x[d])
        if in_lo >= in_hi:
            return None
        if step > 1:
            spans.append((in_lo, in_hi, step)); begins.append(0); ends.append(0)
        else:
            spans.append((in_lo, in_hi, 1)); begins.append(in_lo + b - lo); ends.append(hi - b - in_hi)
        computed.append((lo, hi, step))
    return Restriction(attrs.replace(pads=tuple(begins + ends)), (tuple(spans),),
                       tuple(computed))


def _transpose(attrs, ins, outs, j, region) -> Restriction:
    perm = attrs["perm"]
    spans = [None] * len(perm)
    for d, p in enumerate(perm):
        spans[p] = region[d]
    return Restriction(attrs, (tuple(spans),), region)


RESTRICT_RULES: dict[Op, Callable[..., Restriction | None]] = {
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
    Op.RESHAPE: lambda *a: None,
    Op.RESHAPE_TRANSPOSE: lambda *a: None,
    Op.UPDATE: lambda *a: None,
    Op.FILL: lambda attrs, ins, outs, j, region: Restriction(
        attrs.replace(shape=tuple(count(s) for s in region)), (), region),
}
