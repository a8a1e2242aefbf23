"""Does CSRNet's dilated conv tune faster after ``Pad -> Conv``, or is the gain the tuner's draw?

    python benchmarks/conv_forms.py --records DIR          # tunes into DIR/s<seed> first
    python benchmarks/conv_forms.py --records DIR --seeds 0 1 2

``Pad -> Conv`` is PET's win on this CPU: the back end alone (14×14) kept it at ×1.8–×2.5 on
the shipped records, and on records tuned afresh at ×1.08 and ×1.54. On the whole CSRNet (224
images, the back end on 28×28) the search never kept it. The back end's 512-channel dilated conv
(+ bias + ReLU, one kernel as TVM fuses it) is built as a Relax module in two forms that compute
the same:

- ``orig``: the conv with its padding (2) and dilation (2), as CSRNet has it;
- ``padconv``: an explicit zero pad, then the conv without padding (PET's mutant).

Each is tuned with MetaSchedule at 32 trials per task into ``DIR/s<seed>`` (reused when the
records are there: a second run times only), for each seed, on 28×28 (``dil28``) and 14×14
(``dil14``) maps, then the two are timed interleaved in 5 fresh processes with the outputs
checked against ``orig``'s (:func:`benchmarks.matmul_forms.measure`). Results go to
``benchmarks/results/conv_forms.{json,md}``; tuning never runs in CI, and nothing here fails on
timing.
"""
from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.matmul_forms import (  # noqa: E402,F401 (markdown: the tests')
    conv_relu_module, forms_parser, markdown, run_forms)

FORMS = ("orig", "padconv")
#: Channels in and out, and the map's side, of each kernel.
SHAPES = {"dil28": (512, 512, 28), "dil14": (512, 512, 14)}
PAD = DILATION = 2


def module(kind: str, form: str):
    """The Relax module of one form of a dilated conv + bias + ReLU, and its input."""
    cin, cout, side = SHAPES[kind]

    def body(bb, x, w):
        from tvm import relax
        if form == "orig":
            return bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=PAD, dilation=DILATION))
        padded = bb.emit(relax.op.nn.pad(x, [0, 0, 0, 0, PAD, PAD, PAD, PAD]))
        return bb.emit(relax.op.nn.conv2d(padded, relax.const(w), padding=0, dilation=DILATION))

    return conv_relu_module(cin, cout, 3, side, (0.02, 0.02), body)


#: The kernels measured: shape (channels in, out, side), GFLOP per call, the forms' builder.
KERNELS = {kind: ((cin, cout, side), 2 * cin * cout * 9 * side * side / 1e9, module)
           for kind, (cin, cout, side) in SHAPES.items()}


def main(argv=None) -> int:
    return run_forms("conv_forms", forms_parser(__doc__).parse_args(argv), KERNELS, FORMS)


if __name__ == "__main__":
    sys.exit(main())
