"""Does a 3×3 convolution tune faster as its nine shifted windows and one 1×1 product?

    python benchmarks/im2col_forms.py --records DIR          # tunes into DIR/s<seed> first
    python benchmarks/im2col_forms.py --records DIR --seeds 0 1 --kernels dil14 r18_14

TVM 0.27 lowers a CPU ``conv2d`` to its direct loop nest, which MetaSchedule tunes at 86–134
GFLOP/s at 32 trials per task on the CSRNet back end's dilated convs (``conv_forms.md``) where
a matmul of the same work reaches 205 (``matmul_forms.md``). "im2col" writes a k × k
convolution as the concatenation of its k² shifted windows of the padded input (a data
movement: pad, slices, concat) and one product with the filters laid out ``[K, k²·C]``: the
same sums of the same products, in another order. Each kernel (conv + bias + ReLU, as the
models fuse it) is built as a Relax module in three forms:

- ``orig``: the convolution as the model has it;
- ``im2col``: pad, the k² windows concatenated on channels, then a 1×1 conv;
- ``im2colmm``: the same windows, reshaped ``[k²·C, H·W]``, then a matmul, reshaped back;
- ``im2colT`` (``--forms``): the windows of the map channels last, ``[H·W, k²·C]``, by the
  filters ``[k²·C, K]`` (the output's channels the inner, vectorised axis, as in a dense
  layer), permuted back to channels first.

Every form is tuned with MetaSchedule at 32 trials per task into ``DIR/s<seed>`` (reused when
the records are there), for each seed; the windows are a kernel of their own, tuned at the same
trials per task (so a form with two kernels gets twice the trials: stated in the table). The
forms are timed interleaved in 5 fresh processes, outputs checked against ``orig``'s. Results
go to ``benchmarks/results/im2col_forms.{json,md}``; tuning never runs in CI, and nothing here
fails on timing.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.matmul_forms import conv_relu_module, forms_parser, run_forms  # noqa: E402

FORMS = ("orig", "im2col", "im2colmm")
#: Channels in and out, the map's side and the dilation (padding = dilation) of each kernel:
#: the CSRNet back end's dilated convs on 14 × 14 and 28 × 28, ResNet-18's 3 × 3 convs.
SHAPES = {"dil14": (512, 512, 14, 2), "dil28": (512, 512, 28, 2),
          "r18_7": (512, 512, 7, 1), "r18_14": (256, 256, 14, 1), "r18_28": (128, 128, 28, 1)}
K = 3


def windows(bb, x, side: int, dilation: int, channels_last: bool = False):
    """The k² shifted windows of ``x`` padded by ``dilation``, concatenated on channels, tap
    by tap (tap ``(i, j)`` holds channels ``(i·k + j)·cin`` onwards); ``channels_last``: of
    ``x`` permuted to ``[n, h, w, c]``, concatenated on its last axis."""
    from tvm import relax

    pad, axes = dilation, ([1, 2] if channels_last else [2, 3])
    width = [0, 0, pad, pad, pad, pad, 0, 0] if channels_last else [0, 0, 0, 0] + [pad] * 4
    if channels_last:
        x = bb.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
    padded = bb.emit(relax.op.nn.pad(x, width))
    taps = [relax.op.strided_slice(padded, axes=axes,
                                   begin=[i * dilation, j * dilation],
                                   end=[i * dilation + side, j * dilation + side])
            for i in range(K) for j in range(K)]
    return bb.emit(relax.op.concat(taps, axis=3 if channels_last else 1))


def module(kind: str, form: str):
    """The Relax module of one form of a conv + bias + ReLU, and its input."""
    cin, cout, side, dilation = SHAPES[kind]

    def body(bb, x, w):
        from tvm import relax
        if form == "orig":
            return bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=dilation,
                                              dilation=dilation))
        cols = windows(bb, x, side, dilation, channels_last=form == "im2colT")
        # filters [K, C, k, k] -> [K, k, k, C] -> [K, k²·C]: the windows' channel order
        flat = np.ascontiguousarray(w.transpose(0, 2, 3, 1).reshape(cout, K * K * cin))
        if form == "im2colT":
            rows = bb.emit(relax.op.reshape(cols, (side * side, K * K * cin)))
            prod = bb.emit(relax.op.matmul(rows, relax.const(np.ascontiguousarray(flat.T))))
            return bb.emit(relax.op.permute_dims(
                relax.op.reshape(prod, (1, side, side, cout)), [0, 3, 1, 2]))
        if form == "im2col":
            return bb.emit(relax.op.nn.conv2d(cols, relax.const(flat.reshape(cout, -1, 1, 1))))
        rows = bb.emit(relax.op.reshape(cols, (K * K * cin, side * side)))
        prod = bb.emit(relax.op.matmul(relax.const(flat), rows))
        return bb.emit(relax.op.reshape(prod, (1, cout, side, side)))

    return conv_relu_module(cin, cout, K, side, (0.02, 0.02), body)


#: The kernels measured: shape (channels in, out, side, dilation), GFLOP per call, the builder.
KERNELS = {kind: (shape, 2 * shape[0] * shape[1] * K * K * shape[2] ** 2 / 1e9, module)
           for kind, shape in SHAPES.items()}


def main(argv=None) -> int:
    parser = forms_parser(__doc__, seeds=(0, 1))
    parser.add_argument("--kernels", nargs="+", default=["dil14", "r18_14", "r18_7"],
                        choices=sorted(SHAPES))
    parser.add_argument("--forms", nargs="+", default=list(FORMS),
                        choices=["orig", "im2col", "im2colmm", "im2colT"],
                        help="the forms timed, the first the reference")
    parser.add_argument("--stem", default="im2col_forms", help="the results' file name")
    args = parser.parse_args(argv)
    kernels = {kind: KERNELS[kind] for kind in args.kernels}
    return run_forms(args.stem, args, kernels, tuple(args.forms))


if __name__ == "__main__":
    sys.exit(main())
