"""How fast could BERT's layer run here with the best library kernels this CPU has? A floor.

    python benchmarks/bert_bounds.py [--reps 30] [--threads 2]

PET's rewrites rearrange BERT's linear algebra: they keep every multiply-add of its products
(moved, merged or split, never removed) and every non-linear operator as it is, the GELU's
``erf`` included. TVM 0.27's LLVM code calls glibc's scalar ``erff`` once an element (checked
here in the assembly of TVM's own ``erf`` kernel). So any program PET + TVM can build for the
layer would take, with every product as fast as the fastest library measured here (a floor for
kernels as good as those; not the hardware's peak):

- its products' multiply-adds at the fastest rate a library reaches on each product's shape
  here, on ``--threads`` threads: onnxruntime's ``MatMul`` (MLAS; the weight a constant, as in
  BERT) or torch's ``matmul``, whichever is faster, the best of ``--reps`` timings of 10 calls;
- plus the ``erf`` calls at glibc's ``erff`` cost, timed here in a C loop on the same
  threads (``-O2``, no fast math: what TVM calls), the best of ``--reps``;
- plus nothing for the rest (softmax, layer norms, additions, data movement).

The issue's target, BERT at ×1.2 over TVM, needs the layer in TVM's time / 1.2; TVM's time is
the table's (``benchmarks/results/llvm.json``, its ``bert_encoder`` row). Writes
``benchmarks/results/bert_bounds.{json,md}``.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

#: BERT-base's layer at batch 1, sequence 128 (``tvm_pet.models.bert.bert_encoder``'s defaults),
#: its products as TVM runs them after ``CombineParallelMatmul`` (Q, K and V as one):
#: name, batch, m, k, n.
SEQ, HIDDEN, HEADS, FFN = 128, 768, 12, 3072
PRODUCTS = (
    ("QKV projection", 1, SEQ, HIDDEN, 3 * HIDDEN),
    ("attention scores Q K^T", HEADS, SEQ, HIDDEN // HEADS, SEQ),
    ("attention context P V", HEADS, SEQ, SEQ, HIDDEN // HEADS),
    ("output projection", 1, SEQ, HIDDEN, HIDDEN),
    ("feed-forward 1", 1, SEQ, HIDDEN, FFN),
    ("feed-forward 2", 1, SEQ, FFN, HIDDEN),
)
ERF_ELEMENTS = SEQ * FFN

C_SOURCE = r"""
#include <math.h>
void erf_all(const float *x, float *y, long n) {
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) y[i] = erff(x[i]);
}
"""


def best_seconds(fn, reps: int, number: int = 10) -> float:
    """The fastest of ``reps`` timings, each the mean of ``number`` calls (after 3 warm calls)."""
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def _ort_matmul(batch: int, m: int, k: int, n: int, threads: int):
    """A one-node onnxruntime session computing ``a @ b`` for a constant ``b``; its runner."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    shape_b = (k, n) if batch == 1 else (batch, k, n)
    b = numpy_helper.from_array(rng.standard_normal(shape_b).astype("f4"), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "matmul",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, (batch, m, k))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (batch, m, n))], [b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    onnx.checker.check_model(model)
    feed = {"a": rng.standard_normal((batch, m, k)).astype("f4")}
    return lambda: session.run(None, feed)


def product_times(reps: int, threads: int) -> list[dict]:
    import torch
    torch.set_num_threads(threads)
    rows = []
    for name, batch, m, k, n in PRODUCTS:
        a, b = torch.randn(batch, m, k), torch.randn(batch, k, n)
        seconds = {"torch": best_seconds(lambda: torch.matmul(a, b), reps),
                   "onnxruntime": best_seconds(_ort_matmul(batch, m, k, n, threads), reps)}
        best = min(seconds, key=seconds.get)
        macs = batch * m * k * n
        rows.append({"product": name, "shape": f"{batch}x{m}x{k} @ {batch}x{k}x{n}",
                     "macs": macs, "ms": seconds[best] * 1e3, "by": best,
                     "ms_by_library": {k: v * 1e3 for k, v in seconds.items()},
                     "gmac_per_s": macs / seconds[best] / 1e9})
    return rows


def erf_time(reps: int, threads: int) -> float:
    """Milliseconds for glibc's ``erff`` over the first feed-forward output, on ``threads``."""
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = pathlib.Path(tmp) / "erf.c", pathlib.Path(tmp) / "liberf.so"
        src.write_text(C_SOURCE)
        subprocess.run(["gcc", "-O2", "-fopenmp", "-shared", "-fPIC", str(src), "-o", str(lib),
                        "-lm"], check=True)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        erf = ctypes.CDLL(str(lib)).erf_all
        # the argument GELU gives erf: x / sqrt(2) for pre-activations of unit scale
        x = (np.random.default_rng(0).standard_normal(ERF_ELEMENTS) / np.sqrt(2)).astype("f4")
        y = np.empty_like(x)
        px, py = x.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p)
        seconds = best_seconds(lambda: erf(px, py, ctypes.c_long(x.size)), reps)
        assert np.allclose(y[:100], [math.erf(v) for v in x[:100].tolist()], atol=1e-6)
        return seconds * 1e3


def tvm_erf_calls_erff() -> bool:
    """Whether TVM's own ``erf`` kernel for this CPU calls glibc's scalar ``erff``."""
    sys.path.insert(0, str(ROOT))
    import tvm
    from tvm import relax
    from tvm_pet.tune.targets import resolve_target
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, SEQ, FFN), "float32"))
    with bb.function("main", [x]):
        bb.emit_func_output(bb.emit(relax.op.erf(x)))
    lib = tvm.compile(bb.get(), target=resolve_target("llvm")).mod
    text = ""
    for module in [lib, *lib.imports]:
        try:
            text += module.inspect_source("asm")
        except Exception:   # a module without assembly (the VM's own)
            pass
    return "erff@PLT" in text or "call\terff" in text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS / "bert_bounds"))
    args = parser.parse_args()
    rows = product_times(args.reps, args.threads)
    erf_ms = erf_time(args.reps, args.threads)
    table = json.loads((RESULTS / "llvm.json").read_text())
    bert = next(r for r in table["rows"] if r["model"] == "bert_encoder")
    tvm_ms = bert["times_ms"]["tvm"]["median"]
    pet_ms = bert["times_ms"]["pet"]["median"]
    floor = sum(r["ms"] for r in rows) + erf_ms
    result = {
        "date": datetime.date.today().isoformat(), "threads": args.threads, "reps": args.reps,
        "products": rows, "erf_ms": erf_ms, "erf_elements": ERF_ELEMENTS,
        "tvm_erf_calls_glibc_erff": tvm_erf_calls_erff(),
        "floor_ms": floor, "tvm_ms": tvm_ms, "pet_ms": pet_ms,
        "best_possible_ratio": tvm_ms / floor, "target_ms": tvm_ms / 1.2,
    }
    out = pathlib.Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


def markdown(r: dict) -> str:
    lines = [f"## BERT's layer: a floor at the best library rates on this CPU ({r['date']})", "",
             f"`python benchmarks/bert_bounds.py --reps {r['reps']} --threads {r['threads']}`; "
             "every product at the best rate for its shape of onnxruntime's `MatMul` (MLAS) "
             "and torch's `matmul`, the GELU's "
             "`erf` at glibc's `erff` cost (TVM's kernel calls `erff`: "
             f"{'yes' if r['tvm_erf_calls_glibc_erff'] else 'no'}), everything else free.", "",
             "| part | shape | multiply-adds | onnxruntime ms | torch ms | floor ms | GMAC/s |",
             "|---|---|---|---|---|---|---|"]
    for p in r["products"]:
        by = p["ms_by_library"]
        lines.append(f"| {p['product']} | {p['shape']} | {p['macs'] / 1e6:.1f} M | "
                     f"{by['onnxruntime']:.3f} | {by['torch']:.3f} | {p['ms']:.3f} | "
                     f"{p['gmac_per_s']:.0f} |")
    lines += [f"| GELU's `erf` (glibc `erff`) | {r['erf_elements']} elements | | | | "
              f"{r['erf_ms']:.3f} | |",
              f"| **floor** | | {sum(p['macs'] for p in r['products']) / 1e6:.0f} M | | | "
              f"**{r['floor_ms']:.2f}** | |", "",
              f"TVM's layer in the table: {r['tvm_ms']:.2f} ms (PET + TVM {r['pet_ms']:.2f}). "
              f"×1.2 needs {r['target_ms']:.2f} ms; the floor is "
              f"**×{r['best_possible_ratio']:.3f}** faster than TVM: as fast as these libraries' "
              "kernels, the products would leave room for it.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
