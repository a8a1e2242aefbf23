"""Is a 3×3 convolution faster on this CPU as Winograd's F(m×m, 3×3), written in Relax ops?

    python benchmarks/winograd_forms.py --records DIR            # tunes into DIR/s<seed> first
    python benchmarks/winograd_forms.py --records DIR --seeds 0 1 --kernels v28 b28d

TVM 0.27 lowers a Relax ``conv2d`` on a CPU to the direct loop nest only; its Winograd
schedules are CUDA's and ARM's. Winograd's form of a 3×3 convolution is multi-linear and exact
in real arithmetic (Lavin and Gray, 2016): with the tile's output side ``m`` and ``a = m + 2``,
each ``a × a`` input tile ``d`` becomes ``Bᵀ d B``, each filter ``g`` becomes ``G g Gᵀ``, the
``a²`` products are batched matrix products over the channels, and ``Aᵀ · A`` turns each
product tile back into ``m × m`` outputs: ``a² / (9 m²)`` of the direct form's multiplications
(×0.44 at ``m = 2``, ×0.25 at ``m = 4``). Here it is written in Relax operators that TVM's own
pipeline fuses and MetaSchedule tunes:

- the input transform: a grouped convolution, stride ``m``, with the constant ``a² × a × a``
  kernel ``B ⊗ B`` per channel, on the map padded to ``T m + 2`` (``T`` tiles a side);
- ``permute_dims`` to ``[a², tiles, C]`` and one batched ``matmul`` with ``[a², C, K]``, the
  filters' transform (a constant);
- the output transform: ``matmul`` of ``Aᵀ ⊗ Aᵀ`` (``m² × a²``) with the products, then
  ``permute_dims`` back to the map, sliced to its side;
- a dilation-2 convolution (CSRNet's back end) is first regrouped into the four parity classes
  of its map (space-to-batch, Figure 3 of the paper): a regular 3×3 convolution on each.

The forms: ``orig`` (the convolution as imported), ``wino2`` (``m = 2``) and ``wino4``
(``m = 4``) as ``tvm_pet.relax.winograd`` lowered them until 2026-11-30 (the input tiles by
``B ⊗ B``, one grouped convolution), and for a dilated kernel ``s2b`` (the parity classes'
direct convolution), each with the bias and ReLU after it. ``--forms`` also takes ``wino4s``
and ``wino2s``, as it lowers them since: the input tiles transformed by rows, then by columns
(two grouped convolutions, ``2 a`` multiplications an entry in place of ``a²``), and ``wino4c``
and ``wino2c``, its channels-last form (the map permuted to ``[n, h, w, c]`` inside, the tiles
gathered by ``take``, ``Bᵀ`` applied by two matrix products). The results of
2026-11-29 were measured with this script's own copy of that lowering, the same operators (the
dilated form's regrouping then reshaped to rank 5, not 6). Each form is tuned at 32 trials
per task (the budget held equal per task: the Winograd forms have more tasks), timed
interleaved in fresh processes, outputs checked against ``orig``'s
(:func:`benchmarks.matmul_forms.measure`).
Results go to ``benchmarks/results/winograd_forms.{json,md}``; tuning never runs in CI, and
nothing here fails on timing.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.matmul_forms import conv_relu_module, forms_parser, run_forms  # noqa: E402

FORMS = ("orig", "wino2", "wino4")
#: The forms of a dilated kernel: also ``s2b``, the parity classes' regular direct convolution.
DILATED_FORMS = ("orig", "s2b", "wino2", "wino4")
#: The Winograd forms, with ``wino4s`` (and ``wino2s``): the input tiles transformed by rows
#: then by columns, ``2 a`` multiplications an entry where ``B ⊗ B`` takes ``a²``; ``wino4c``
#: (and ``wino2c``): the channels-last lowering.
WINOGRAD_FORMS = ("wino2", "wino4", "wino2s", "wino4s", "wino2c", "wino4c")
#: Channels in and out, map side and dilation: CSRNet at 224 (VGG-16's front end on 112, 56 and
#: 28; its back end's dilated convolutions on 28, and on 14 in the back end's benchmark row),
#: ResNet-18's 14×14 3×3 convolution.
KERNELS = {"v112": (128, 128, 112, 1), "v56": (256, 256, 56, 1), "v28": (512, 512, 28, 1),
           "b28d": (512, 512, 28, 2), "b14d": (512, 512, 14, 2), "r14": (256, 256, 14, 1)}


def module(kind: str, form: str):
    """The Relax module of one form of a 3×3 conv + bias + ReLU, and its input: the Winograd
    forms as ``tvm-pet optimize --winograd`` lowers them (:func:`tvm_pet.relax.winograd.conv2d`)."""
    cin, cout, side, dil = KERNELS[kind]

    def body(bb, x, w):
        from tvm import relax
        from tvm_pet.relax import winograd
        if form == "orig":
            return bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=dil, dilation=dil))
        if form.startswith("wino"):
            attrs = {"strides": (1, 1), "dilations": (dil, dil), "pads": (dil,) * 4, "groups": 1}
            return winograd.conv2d(lambda e, hint: bb.emit(e), x, relax.const(w),
                                   (1, cin, side, side), w.shape, attrs, int(form[4]),
                                   separable=form.endswith("s"),
                                   channels_last=form.endswith("c"))
        half = side // 2  # s2b: the dilation's parity classes into the batch, and back
        t = bb.emit(relax.op.reshape(x, (cin, half, 2, half, 2)))
        t = bb.emit(relax.op.permute_dims(t, [2, 4, 0, 1, 3]))
        t = bb.emit(relax.op.reshape(t, (4, cin, half, half)))
        t = bb.emit(relax.op.nn.conv2d(t, relax.const(w), padding=1))
        t = bb.emit(relax.op.reshape(t, (2, 2, cout, half, half)))
        t = bb.emit(relax.op.permute_dims(t, [2, 3, 0, 4, 1]))
        return bb.emit(relax.op.reshape(t, (1, cout, side, side)))

    return conv_relu_module(cin, cout, 3, side, (1 / np.sqrt(9 * cin), 0.05), body)


def kernels(names) -> dict:
    """The kernels measured: shape, GFLOP per call (of the direct form), the forms' builder."""
    return {kind: (KERNELS[kind], 2 * KERNELS[kind][0] * KERNELS[kind][1] * 9
                   * KERNELS[kind][2] ** 2 / 1e9, module) for kind in names}


def main(argv=None) -> int:
    parser = forms_parser(__doc__, seeds=(0,))
    parser.add_argument("--kernels", nargs="+", choices=sorted(KERNELS), default=sorted(KERNELS))
    parser.add_argument("--stem", default="winograd_forms")
    parser.add_argument("--forms", nargs="+", choices=("orig", "s2b") + WINOGRAD_FORMS, default=None,
                        help="the forms to measure (default: every form of the kernels' kind)")
    args = parser.parse_args(argv)
    dilated = {KERNELS[k][3] > 1 for k in args.kernels}
    if len(dilated) > 1:
        parser.error("measure dilated and regular kernels in separate runs (their forms differ)")
    dilated = dilated.pop()
    forms = tuple(args.forms or (DILATED_FORMS if dilated else FORMS))
    return run_forms(args.stem, args, kernels(args.kernels), forms)


if __name__ == "__main__":
    sys.exit(main())
