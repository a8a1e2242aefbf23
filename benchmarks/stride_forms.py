"""Does a stride-2 convolution tune faster as a stride-1 one on a space-to-depth input?

    python benchmarks/stride_forms.py --records DIR               # tunes into DIR/s<seed> first
    python benchmarks/stride_forms.py --records DIR --seeds 0 1 2

A stride-2 convolution reads every other row and column, so its loops over the input are
strided, and a stem's 3 input channels leave no reduction axis to vectorize. The space-to-depth
form computes the same thing densely: the map, padded, is regrouped by the parity of its rows
and columns into 4 times the channels at half the side, and the kernel, grown to an even side
with zeros, is regrouped the same way; the conv is then stride 1 and unpadded, on 4·C channels
with a kernel of side ceil(k / 2). It does more multiply-adds (the zero taps: ×1.31 for a 7×7
kernel, ×1.78 for a 3×3), so it can only win where the strided kernel tunes badly. That is the
question for the whole models' stride-2 convs that no other rewrite reaches (ResNet-18's 7×7
stem on 3 channels, its 3×3 stride-2 convs, Inception-v3's 3-channel stem):

- ``orig``: the conv (stride 2, its own padding) + bias + ReLU, one fused kernel as TVM builds it;
- ``s2d``: pad, reshape [1, C, P/2, 2, P/2, 2], transpose to [1, C, 2, 2, P/2, P/2], reshape to
  [1, 4C, P/2, P/2]; the conv with the kernel regrouped alike (folded at build time); bias, ReLU.

Each form is tuned with MetaSchedule at 32 trials per task into ``DIR/s<seed>`` (reused when the
records are there), for each seed, then the forms are timed interleaved in fresh processes with
the outputs checked against ``orig``'s (:func:`benchmarks.matmul_forms.measure`). Results go to
``benchmarks/results/stride_forms.{json,md}``; tuning never runs in CI, and nothing here fails on
timing.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.matmul_forms import (  # noqa: E402,F401 (markdown: the tests')
    conv_relu_module, forms_parser, markdown, run_forms)

FORMS = ("orig", "s2d")
#: Channels in and out, kernel side, padding and map side of each stride-2 kernel.
SHAPES = {
    "r18_stem": (3, 64, 7, 3, 224),      # ResNet-18's conv1: 7x7 stride 2 on the image
    "r18_s2_56": (64, 128, 3, 1, 56),    # layer2's first 3x3 stride-2 conv
    "r18_s2_28": (128, 256, 3, 1, 28),   # layer3's
    "inc_stem": (3, 32, 3, 0, 330),      # Inception-v3's Conv2d_1a at 330: 3x3 stride 2, no pad
}


def out_side(k: int, pad: int, side: int) -> int:
    """The output side of a stride-2 conv.

    >>> out_side(7, 3, 224), out_side(3, 1, 56), out_side(3, 0, 330)
    (112, 28, 164)
    """
    return (side + 2 * pad - k) // 2 + 1


def s2d_weights(w: np.ndarray) -> np.ndarray:
    """The kernel [O, C, k, k] of a stride-2 conv as the [O, 4C, ceil(k/2), ceil(k/2)] kernel of
    the stride-1 conv on the space-to-depth input (channel ``c * 4 + 2 * row parity + column
    parity``, as :func:`s2d_data` orders them)."""
    o, c, k, _ = w.shape
    half = (k + 1) // 2
    grown = np.zeros((o, c, 2 * half, 2 * half), w.dtype)
    grown[:, :, :k, :k] = w
    return grown.reshape(o, c, half, 2, half, 2).transpose(0, 1, 3, 5, 2, 4).reshape(
        o, 4 * c, half, half)


def s2d_data(bb, x, c: int, k: int, pad: int, side: int):
    """Emit the space-to-depth input of a stride-2 conv: [1, 4C, P/2, P/2], P the padded side."""
    from tvm import relax

    half = (k + 1) // 2
    padded = 2 * (out_side(k, pad, side) - 1 + half)
    after = padded - side - pad
    assert after >= 0, (k, pad, side)
    xp = bb.emit(relax.op.nn.pad(x, [0, 0, 0, 0, pad, after, pad, after])) if padded != side \
        else x
    x6 = bb.emit(relax.op.reshape(xp, (1, c, padded // 2, 2, padded // 2, 2)))
    xt = bb.emit(relax.op.permute_dims(x6, [0, 1, 3, 5, 2, 4]))
    return bb.emit(relax.op.reshape(xt, (1, 4 * c, padded // 2, padded // 2)))


def module(kind: str, form: str):
    """The Relax module of one form of a stride-2 conv + bias + ReLU, and its input."""
    cin, cout, k, pad, side = SHAPES[kind]

    def body(bb, x, w):
        from tvm import relax
        if form == "orig":
            return bb.emit(relax.op.nn.conv2d(x, relax.const(w), strides=2, padding=pad))
        data = s2d_data(bb, x, cin, k, pad, side)
        return bb.emit(relax.op.nn.conv2d(data, relax.const(s2d_weights(w))))

    return conv_relu_module(cin, cout, k, side, (0.05, 0.05), body)


def kernels(names=None) -> dict:
    """The kernels measured: shape, GFLOP per call (of the original), the forms' builder."""
    return {kind: ((cin, cout, k, side), 2 * cin * cout * k * k * out_side(k, pad, side) ** 2
                   / 1e9, module)
            for kind, (cin, cout, k, pad, side) in SHAPES.items() if not names or kind in names}


def main(argv=None) -> int:
    parser = forms_parser(__doc__)
    parser.add_argument("--kernels", nargs="+", choices=sorted(SHAPES), help="default: all")
    args = parser.parse_args(argv)
    return run_forms("stride_forms", args, kernels(args.kernels), FORMS)


if __name__ == "__main__":
    sys.exit(main())
