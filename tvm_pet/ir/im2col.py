"""Which convolutions are offered as one matrix product over their shifted windows (pure; the
lowering is :mod:`tvm_pet.relax.im2col`).

A CONV node whose attributes carry ``im2col=order`` computes the same function as without it:
the ``kh·kw`` (in 3-D, ``kd·kh·kw``) shifted windows of its padded input, concatenated on
channels (each output position's receptive field as one row of ``kh·kw·C`` values), times the
filters laid out as ``[K, kh·kw·C]``: the same products, summed in another order (a fully
equivalent rewrite). It is lowered to Relax as a data movement (pad, slices, concat: one
injective kernel) and one matrix product, and the verifier, the interpreters and the exporters
read it as the CONV it is.

Why: TVM 0.27 lowers a CPU ``conv2d`` to its direct loop nest, and MetaSchedule tunes that and
a matrix product of the same work differently (``benchmarks/results/im2col_forms.md``). Its
untuned time cannot rank it, so the tuning plan gives these mutants places of their own, and the
search keeps one only where it measures faster tuned.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

#: The orders of the product: ``"wk"``, the windows of the map channels last by the filters
#: (``[H·W, kh·kw·C] x [kh·kw·C, K]``, the output channels the inner axis, permuted back after).
#: The other order, the filters by the windows (``[K, kh·kw·C] x [kh·kw·C, H·W]``, as the map
#: is laid out), is not lowered: it measured slower.
ORDERS = ("wk",)
#: The orders the mutant generator offers. Tuned at 32 trials per task and timed beside the
#: direct form (``benchmarks/results/im2col_forms_T.md``, three seeds), ``"wk"``
#: ran x1.62–x2.83 faster on ResNet-18's 512-channel 7 × 7 convs, x0.85–x2.31 on its
#: 256-channel 14 × 14 ones and x0.93–x1.54 on CSRNet's dilated 512-channel 14 × 14 ones
#: (geo-mean x1.56 over the nine), where the filters by the windows ran x0.39–x1.86 (x0.93;
#: ``im2colmm`` in ``benchmarks/results/im2col_forms.md``).
SEARCH_ORDERS = ("wk",)
#: How summaries name such a CONV (:attr:`tvm_pet.ir.node.Node.label`), by order.
LABELS = {"wk": "Im2colConvT"}
#: The most values the windows may hold (``n·taps·C·OD·OH·OW``): 32 MB of float32, an extra
#: pass over memory of at most a few milliseconds here.
MOST_WINDOW_VALUES = 8 * 2**20


def window_values(x_shape: Sequence[int], w_shape: Sequence[int], attrs: Mapping) -> int:
    """How many values the windows of a 2-D or 3-D CONV hold: ``n · taps·C · OH · OW`` (and
    ``OD``), where ``taps`` is ``kh·kw`` (``kd·kh·kw``).

    >>> conv = {"strides": (1, 1), "dilations": (2, 2), "pads": (2, 2, 2, 2), "groups": 1}
    >>> window_values((1, 512, 14, 14), (512, 512, 3, 3), conv)
    903168
    """
    n, c = x_shape[:2]
    return n * c * math.prod(w_shape[2:]) * math.prod(output_sides(x_shape, w_shape, attrs))


def output_sides(x_shape: Sequence[int], w_shape: Sequence[int], attrs: Mapping) -> tuple:
    """The output's spatial sides of a CONV (``OH, OW``, or ``OD, OH, OW``; 0 where empty).

    >>> conv = {"strides": (1, 2, 2), "dilations": (1, 1, 1), "pads": (1,) * 6, "groups": 1}
    >>> output_sides((1, 128, 8, 28, 28), (256, 128, 3, 3, 3), conv)
    (8, 14, 14)
    """
    nsp = len(x_shape) - 2
    sides = []
    for i in range(nsp):
        span = attrs["dilations"][i] * (w_shape[2 + i] - 1) + 1
        full = x_shape[2 + i] + attrs["pads"][i] + attrs["pads"][nsp + i]
        sides.append(max(0, (full - span) // attrs["strides"][i] + 1))
    return tuple(sides)


def eligible(x_shape: Sequence[int], w_shape: Sequence[int], attrs: Mapping) -> bool:
    """Whether a CONV has a window form: 2-D or 3-D, no groups, a kernel larger than 1 × 1 (a
    1 × 1 one is a product already), at least one output position, windows of at most
    :data:`MOST_WINDOW_VALUES` values, and not computed by Winograd's algorithm.

    >>> conv = {"strides": (1, 1), "dilations": (1, 1), "pads": (1, 1, 1, 1), "groups": 1}
    >>> eligible((1, 256, 14, 14), (256, 256, 3, 3), conv)
    True
    >>> eligible((1, 256, 14, 14), (256, 256, 1, 1), {**conv, "pads": (0, 0, 0, 0)})
    False
    >>> eligible((1, 64, 224, 224), (64, 64, 3, 3), conv)  # 29 M values
    False
    >>> conv3d = {"strides": (1, 1, 1), "dilations": (1, 1, 1), "pads": (1,) * 6, "groups": 1}
    >>> eligible((1, 256, 4, 14, 14), (256, 256, 3, 3, 3), conv3d)  # 5.4 M values
    True
    """
    return (len(x_shape) in (4, 5) and len(w_shape) == len(x_shape) and attrs["groups"] == 1
            and math.prod(w_shape[2:]) > 1 and not attrs.get("winograd")
            and math.prod(output_sides(x_shape, w_shape, attrs)) > 0
            and window_values(x_shape, w_shape, attrs) <= MOST_WINDOW_VALUES)


def order_of(labels: Sequence[str]) -> str | None:
    """The order of the product of the window-form CONV among operators named ``labels`` (a
    mutant's, as summaries name them: :data:`LABELS`); None where there is none.

    >>> order_of(("Pad", "Im2colConvT", "Slice")), order_of(("Conv",))
    ('wk', None)
    """
    return next((order for order, label in LABELS.items() if label in labels), None)


def uses(program) -> bool:
    """Whether any CONV of ``program`` is computed as a product over its windows."""
    return any(n.attrs.get("im2col") for n in program.nodes)
