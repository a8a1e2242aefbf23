"""Does a convolution tune faster in NHWC, its channels innermost, at an equal budget per kernel?

    python benchmarks/layout_forms.py --records DIR               # tunes into DIR/s<seed> first
    python benchmarks/layout_forms.py --records DIR --seeds 0 1 2
    python benchmarks/layout_forms.py --records DIR --torch       # then torch's times, for scale

The whole models' heaviest convs run at about half the machine's speed in TVM's 32-trial
kernels (the CSRNet back end's 512-channel dilated conv at 160-240 GFLOP/s, where torch's
oneDNN kernel does about 340 and a 2048 sgemm about 390 on this CPU). They are NCHW: the
innermost axis of a map is its side, 7 to 38 here, which fills no whole 16-lane AVX-512
vector. In NHWC the innermost axis is the channels (64 to 512). If a conv tuned faster
there, a layout mutant (transpose in, the conv in NHWC with its kernel regrouped at build
time, transpose out) would be a PET lever on every conv; if not, the search need not carry
one. Each kernel (+ bias + ReLU, one fused kernel as
TVM builds it) is built in two forms that compute the same:

- ``orig``: NCHW, as the models have it;
- ``nhwc``: ``permute_dims`` to NHWC, the conv with ``data_layout="NHWC"`` and an HWIO kernel,
  bias, ReLU, ``permute_dims`` back (the two transposes are in its time).

Each form is tuned with MetaSchedule at 32 trials per task into ``DIR/s<seed>`` (reused when the
records are there), for each seed, then the forms are timed interleaved in fresh processes with
the outputs checked against ``orig``'s (:func:`benchmarks.matmul_forms.measure`). Results go to
``benchmarks/results/layout_forms.{json,md}``; tuning never runs in CI, and nothing here fails on
timing.
"""
from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.matmul_forms import (  # noqa: E402,F401 (markdown: the tests')
    forms_parser, markdown, run_forms)

FORMS = ("orig", "nhwc")
#: Channels in and out, kernel side, padding, dilation and map side of each kernel.
SHAPES = {
    "dil14": (512, 512, 3, 2, 2, 14),    # the CSRNet back end's dilated conv (3 of its 5)
    "inc_96": (64, 96, 3, 1, 1, 38),     # Inception-v3's 64 -> 96 3x3 conv (4 calls)
    "r18_256": (256, 256, 3, 1, 1, 14),  # ResNet-18's layer3 conv
    "r18_512": (512, 512, 3, 1, 1, 7),   # ResNet-18's layer4 conv
}


def module(kind: str, form: str):
    """The Relax module of one form of a conv + bias + ReLU, and its input."""
    from tvm import relax

    cin, cout, k, pad, dilation, side = SHAPES[kind]
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((cout, cin, k, k)) * 0.02).astype("float32")
    b = (rng.standard_normal(cout) * 0.02).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, cin, side, side), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            if form == "orig":
                y = bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=pad,
                                               dilation=dilation))
                y = bb.emit(relax.op.nn.relu(relax.op.add(
                    y, relax.const(b.reshape(1, cout, 1, 1)))))
            else:
                t = bb.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
                y = bb.emit(relax.op.nn.conv2d(
                    t, relax.const(np.ascontiguousarray(w.transpose(2, 3, 1, 0))),
                    padding=pad, dilation=dilation, data_layout="NHWC", kernel_layout="HWIO"))
                y = bb.emit(relax.op.nn.relu(relax.op.add(
                    y, relax.const(b.reshape(1, 1, 1, cout)))))
                y = bb.emit(relax.op.permute_dims(y, [0, 3, 1, 2]))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get(), [np.random.default_rng(1).standard_normal((1, cin, side, side))
                      .astype("float32")]


def gflop(kind: str) -> float:
    """GFLOP per call of a kernel (the conv's multiply-adds; padding keeps the map's side).

    >>> round(gflop("dil14"), 3)
    0.925
    """
    cin, cout, k, _, _, side = SHAPES[kind]
    return 2 * cin * cout * k * k * side * side / 1e9


#: The kernels measured: shape, GFLOP per call, the forms' builder.
KERNELS = {kind: (SHAPES[kind], gflop(kind), module) for kind in SHAPES}


def torch_reference(shapes: dict, calls: int = 50) -> dict:
    """Each kernel's median time in ms in torch (oneDNN, 2 threads), and a 2048 sgemm's
    GFLOP/s: what this CPU does with a library's kernels, for scale. Not a contender."""
    import statistics

    import torch

    from benchmarks.run import time_interleaved

    torch.set_num_threads(2)

    def median_s(f) -> float:
        return statistics.median(time_interleaved({"f": f}, rounds=calls, number=1,
                                                  settle_s=0.5)["f"])

    out = {}
    with torch.no_grad():
        for kind, (cin, cout, k, pad, dilation, side) in shapes.items():
            x = torch.randn(1, cin, side, side)
            w, b = torch.randn(cout, cin, k, k), torch.randn(cout)
            out[kind] = 1e3 * median_s(lambda: torch.relu(torch.nn.functional.conv2d(
                x, w, b, padding=pad, dilation=dilation)))
        a, c = torch.randn(2048, 2048), torch.randn(2048, 2048)
        out["sgemm2048_gflops"] = 2 * 2048 ** 3 / median_s(lambda: a @ c) / 1e9
    return out


def reference_line(torch_ms: dict) -> str:
    """The markdown line of :func:`torch_reference`'s figures.

    >>> line = reference_line({"dil14": 2.6, "sgemm2048_gflops": 391.0})
    >>> line.startswith("For scale, torch"), "dil14 2.60 ms (356 GFLOP/s)" in line
    (True, True)
    >>> line.endswith("; a 2048 sgemm 391 GFLOP/s.")
    True
    """
    kernels = "; ".join(f"{kind} {ms:.2f} ms ({gflop(kind) / ms * 1e3:.0f} GFLOP/s)"
                        for kind, ms in torch_ms.items() if kind in SHAPES)
    return (f"For scale, torch (oneDNN, 2 threads, median of 50 calls): {kernels}; "
            f"a 2048 sgemm {torch_ms['sgemm2048_gflops']:.0f} GFLOP/s.")


def main(argv=None) -> int:
    parser = forms_parser(__doc__, seeds=(0, 1))
    parser.add_argument("--torch", action="store_true",
                        help="only time torch's kernels of the same shapes (for scale) and add "
                             "them to the results written before")
    args = parser.parse_args(argv)
    if not args.torch:
        return run_forms("layout_forms", args, KERNELS, FORMS)
    out = ROOT / "benchmarks" / "results" / "layout_forms"
    results = json.loads(out.with_suffix(".json").read_text())
    results["torch_ms"] = torch_reference(SHAPES)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(results["rows"], results["trials_per_task"], FORMS)
                                      + "\n" + reference_line(results["torch_ms"]) + "\n")
    print(reference_line(results["torch_ms"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
