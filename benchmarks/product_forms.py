"""Do the Winograd products tune faster in another form, at an equal budget per kernel?

    python benchmarks/product_forms.py --records DIR            # tunes into DIR/s<seed> first
    python benchmarks/product_forms.py --records DIR --seeds 0 1 --forms orig trans pack64

With ``--winograd``, the CSRNet back end spends 83 % of its time in the batched products of its
Winograd layers (``benchmarks/results/winograd_channels_last.md``): ``[36, 16, C] x [36, C, K]``
(F(4×4, 3×3) on the dilation's four 7 × 7 classes of a 14 × 14 map), at 156 GFLOP/s. Here the
products of the back end's two shapes (``p512``: C = K = 512; ``p256``: C = 512, K = 256), and
of three more (``r256``: ResNet-18's 256-channel 14 × 14 layer; ``t64``: 512 channels, 64 tiles,
the back end of CSRNet at 224; ``r512``: 512 channels, 4 tiles, ResNet-18's 7 × 7 layer) are
built as Relax modules in forms that compute the same ``[36, T, K]``:

- ``orig``: ``matmul(U, V)``, as ``tvm_pet.relax.winograd`` lowers them;
- ``trans``: ``(Vᵀ Uᵀ)ᵀ``: the filters as ``[36, K, C]`` (a constant), the tiles permuted to
  ``[36, C, 16]`` (a kernel of its own here; a lowering would gather them so), the result
  permuted back: what ``tvm_pet.relax.winograd`` emits for the order ``"kt"``
  (:data:`tvm_pet.ir.winograd.PRODUCTS`);
- ``pack<b>``: the filters in column blocks ``b`` wide, ``[36, K / b, C, b]`` (a constant), the
  tiles broadcast over the blocks, the result permuted back.

Each form is tuned at 32 trials per task, timed interleaved in fresh processes, outputs checked
against ``orig``'s (:func:`benchmarks.matmul_forms.measure`). Results go to
``benchmarks/results/<stem>.{json,md}`` (2026-11-30: ``product_forms`` for ``p512`` and ``p256``
in seeds 0-2, ``product_forms_more`` for the other three in seeds 0-1, ``product_forms_packed``
with ``pack64`` and ``pack128``, seed 0); tuning never runs in CI, and nothing here fails
on timing.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.matmul_forms import forms_parser, run_forms  # noqa: E402

FORMS = ("orig", "trans", "pack64")
#: ``(a², tiles, C, K)`` of the back end's products.
SHAPES = {"p512": (36, 16, 512, 512), "p256": (36, 16, 512, 256),
          "r256": (36, 16, 256, 256), "t64": (36, 64, 512, 512), "r512": (36, 4, 512, 512)}


def module(kind: str, form: str):
    """The Relax module of one form of the products, and its input (the tiles)."""
    from tvm import relax

    batch, tiles, c, k = SHAPES[kind]
    rng = np.random.default_rng(0)
    v = (rng.standard_normal((batch, c, k)) * 0.02).astype("float32")
    u = np.random.default_rng(1).standard_normal((batch, tiles, c)).astype("float32")

    def const(a):
        return relax.const(np.ascontiguousarray(a, dtype="float32"))

    bb = relax.BlockBuilder()
    x = relax.Var("u", relax.TensorType((batch, tiles, c), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            if form == "orig":
                y = bb.emit(relax.op.matmul(x, const(v)))
            elif form == "trans":
                xt = bb.emit(relax.op.permute_dims(x, [0, 2, 1]))
                yt = bb.emit(relax.op.matmul(const(v.transpose(0, 2, 1)), xt))
                y = bb.emit(relax.op.permute_dims(yt, [0, 2, 1]))
            else:
                b = int(form[len("pack"):])
                blocks = v.reshape(batch, c, k // b, b).transpose(0, 2, 1, 3)
                x4 = bb.emit(relax.op.expand_dims(x, 1))
                y4 = bb.emit(relax.op.matmul(x4, const(blocks)))
                y = bb.emit(relax.op.reshape(relax.op.permute_dims(y4, [0, 2, 1, 3]),
                                             (batch, tiles, k)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get(), [u]


#: The kernels measured: shape, GFLOP per call, and the builder of their forms.
KERNELS = {kind: (shape, 2 * shape[0] * shape[1] * shape[2] * shape[3] / 1e9, module)
           for kind, shape in SHAPES.items()}


def main(argv=None) -> int:
    parser = forms_parser(__doc__, seeds=(0, 1))
    parser.add_argument("--kernels", nargs="+", choices=sorted(SHAPES), default=sorted(SHAPES))
    parser.add_argument("--forms", nargs="+", default=list(FORMS),
                        help="orig, trans or pack<b>; the first is the reference")
    parser.add_argument("--stem", default="product_forms")
    args = parser.parse_args(argv)
    return run_forms(args.stem, args, {k: KERNELS[k] for k in args.kernels}, tuple(args.forms))


if __name__ == "__main__":
    sys.exit(main())
