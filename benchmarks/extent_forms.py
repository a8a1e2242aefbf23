"""Is conv5x5's ``Pad -> Conv -> Slice`` a faster program, or the tuner's draw?

    python benchmarks/extent_forms.py --records DIR          # tunes into DIR/s<seed> first
    python benchmarks/extent_forms.py --records DIR --seeds 0 1 2
    python benchmarks/extent_forms.py --records DIR --set resnet    # ResNet-18's sides
    python benchmarks/extent_forms.py --records DIR --set strided   # Inception's Mixed_6a conv

On the records merged from three tunings (the best of each side's draws) PET keeps ``Pad -> Conv
-> Slice`` on conv5x5 at ×1.45, where TVM's best draw of the original takes 2.12 ms. The mutant
pads the 38×38 map by one row and column and slices the 39×39 output back. The reading here: 38
is 2 · 19, and MetaSchedule tiles a loop only by divisors of its extent, so a 38-wide loop has
few tilings; 39 = 3 · 13 and 40 = 2³ · 5 have more. If so, the gain is a property of the shape
and holds over tuning seeds, and it applies wherever a whole model's maps have awkward sides
(Inception-v3 at 330: 38×38 in its Mixed_5 blocks). Each kernel (conv + bias + ReLU, one fused
kernel as TVM builds it) is built as a Relax module in three forms that compute the same:

- ``orig``: the conv on the 38×38 map with its own padding;
- ``pad39``: the map zero-padded by one at its end, the conv, the output sliced back to 38×38
  (PET's mutant: a multiple of 3);
- ``pad40``: the same padded by two (a multiple of 8).

Each form is tuned with MetaSchedule at 32 trials per task into ``DIR/s<seed>`` (reused when
the records are there), for each seed, then the three are timed interleaved in fresh processes
with the outputs checked against ``orig``'s (:func:`benchmarks.matmul_forms.measure`). Results go
to ``benchmarks/results/extent_forms.{json,md}``; tuning never runs in CI, and nothing here fails
on timing.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.matmul_forms import forms_parser, run_forms  # noqa: E402

#: Channels in and out, kernel side and map side of each kernel, and the padded sides of its
#: other forms, by set: Inception-v3 at 330 (Mixed_5b's 38×38 maps: 38 = 2 · 19 padded to
#: 39 = 3 · 13, PET's mutant, and 40 = 2³ · 5), ResNet-18 at 224 (3×3 convs on 56, 28, 14 and 7,
#: every side a multiple of 7, padded to the next power of two: 31 % more FLOPs), and
#: Inception-v3's Mixed_6a 3×3 stride-2 conv, 288 → 384 channels on the 38×38 map, unpadded, the
#: slowest kernel per FLOP of PET's build (``profile-inception_v3.md``): its map padded to 40
#: (the output 19, sliced back to 18) or 42 (the output 20); a stride and a pad follow the
#: padded sides where a kernel is not stride 1 and "same".
SETS = {
    "inception": (("orig", "pad39", "pad40"),
                  {"c5_38": (48, 64, 5, 38, (39, 40)), "c3_38": (64, 96, 3, 38, (39, 40))}),
    "resnet": (("orig", "pow2"),
               {"r3_56": (64, 64, 3, 56, (64,)), "r3_28": (128, 128, 3, 28, (32,)),
                "r3_14": (256, 256, 3, 14, (16,)), "r3_7": (512, 512, 3, 7, (8,))}),
    "strided": (("orig", "pad40", "pad42"), {"i6a_38": (288, 384, 3, 38, (40, 42), 2, 0)}),
}


def geometry(shape: tuple) -> tuple[int, int, int, int, tuple[int, ...], int, int, int]:
    """A kernel's channels in and out, kernel side, map side, padded sides, stride, padding and
    output side (stride 1 and "same" padding unless the entry names them).

    >>> geometry((64, 96, 3, 38, (39, 40))), geometry((288, 384, 3, 38, (40,), 2, 0))
    ((64, 96, 3, 38, (39, 40), 1, 1, 38), (288, 384, 3, 38, (40,), 2, 0, 18))
    """
    cin, cout, k, side, padded = shape[:5]
    stride, pad = shape[5:] if len(shape) > 5 else (1, k // 2)
    return cin, cout, k, side, padded, stride, pad, (side + 2 * pad - k) // stride + 1


def module(kind: str, form: str):
    """The Relax module of one form of a conv + bias + ReLU, and its input."""
    from tvm import relax

    forms, shapes = next(v for v in SETS.values() if kind in v[1])
    cin, cout, k, side, padded, stride, pad, out_side = geometry(shapes[kind])
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((cout, cin, k, k)) * 0.05).astype("float32")
    b = (rng.standard_normal((1, cout, 1, 1)) * 0.05).astype("float32")
    extra = 0 if form == forms[0] else padded[forms.index(form) - 1] - side
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, cin, side, side), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            data = x if not extra else bb.emit(
                relax.op.nn.pad(x, [0, 0, 0, 0, 0, extra, 0, extra]))
            y = bb.emit(relax.op.nn.conv2d(data, relax.const(w), strides=stride, padding=pad))
            if extra:
                y = bb.emit(relax.op.strided_slice(y, axes=[2, 3], begin=[0, 0],
                                                   end=[out_side, out_side]))
            y = bb.emit(relax.op.nn.relu(relax.op.add(y, relax.const(b))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get(), [np.random.default_rng(1).standard_normal((1, cin, side, side))
                      .astype("float32")]


def kernels(shapes: dict) -> dict:
    """The kernels measured: shape, GFLOP per call (of the original), the forms' builder."""
    kinds = {kind: geometry(shape) for kind, shape in shapes.items()}
    return {kind: ((cin, cout, k, side), 2 * cin * cout * k * k * out * out / 1e9, module)
            for kind, (cin, cout, k, side, _, _, _, out) in kinds.items()}


def main(argv=None) -> int:
    parser = forms_parser(__doc__)
    parser.add_argument("--set", choices=sorted(SETS), default="inception")
    args = parser.parse_args(argv)
    forms, shapes = SETS[args.set]
    stem = "extent_forms" + ("" if args.set == "inception" else f"_{args.set}")
    return run_forms(stem, args, kernels(shapes), forms, set=args.set)


if __name__ == "__main__":
    sys.exit(main())
