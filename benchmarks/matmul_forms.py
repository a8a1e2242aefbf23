"""Do BERT's feed-forward matmuls tune faster in another form, at an equal budget per kernel?

    python benchmarks/matmul_forms.py --records DIR          # tunes into DIR/s<seed> first
    python benchmarks/matmul_forms.py --records DIR --seeds 0 1 2

BERT's two feed-forward kernels take three quarters of its time on this CPU (the shipped
records: 6.9 and 4.9 ms of 15.4 ms), at 87 and 123 GFLOP/s, where its QKV matmul, about the same
shape, runs at 205. If a rewrite of their matmul tuned faster, PET could win there. Each of
the two (``ffn1``: [128, 768] x [768, 3072] + bias, then GELU; ``ffn2``: [128, 3072] x
[3072, 768] + bias + residual) is built as a Relax module in three forms that compute the same:

- ``orig``: the matmul as BERT has it;
- ``trans``: its transpose, ``(W^T x^T)^T`` (the weight transposed at build time);
- ``colbatch``: the output columns in two batches (the weight as [2, K, N/2]; the rows
  reshaped back);
- ``pack<b>`` (``--forms``): the output columns in blocks ``b`` wide (the weight as
  [N/b, K, b], packed as a BLAS packs it; ``matmul_forms_packed.md``, 2026-11-30: ``pack64``
  x1.31 on ``ffn1`` and x0.77 on ``ffn2``, ``pack16`` x0.69 and x0.59, one seed).

Every form is tuned with MetaSchedule at 32 trials per task into ``DIR/s<seed>`` (reused when
the records are there: a second run times only), for each seed, and the three are timed
interleaved, spread over 5 fresh processes, with the outputs checked against ``orig``'s.
Results go to ``benchmarks/results/matmul_forms.{json,md}``; tuning never runs in CI, and
nothing here fails on timing.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.run import geomean  # noqa: E402

FORMS = ("orig", "trans", "colbatch")
#: Fresh processes the forms are timed in (a binary's speed is drawn once per process).
PROCESSES = 5
SHAPES = {"ffn1": (128, 768, 3072), "ffn2": (128, 3072, 768)}


def module(kind: str, form: str):
    """The Relax module of one form of a feed-forward kernel, and its inputs."""
    from tvm import relax

    m, k, n = SHAPES[kind]
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, n)) * 0.02).astype("float32")
    b = (rng.standard_normal((n,)) * 0.02).astype("float32")

    def const(a):
        return relax.const(np.ascontiguousarray(a, dtype="float32"))

    def scalar(v):
        return relax.const(v, "float32")

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((m, k), "float32"))
    r = relax.Var("r", relax.TensorType((m, n), "float32"))
    with bb.function("main", [x] if kind == "ffn1" else [x, r]):
        with bb.dataflow():
            if form == "orig":
                y = bb.emit(relax.op.matmul(x, const(w)))
            elif form == "trans":
                yt = bb.emit(relax.op.matmul(const(w.T), relax.op.permute_dims(x, [1, 0])))
                y = bb.emit(relax.op.permute_dims(yt, [1, 0]))
            else:  # colbatch: two column blocks; pack<b>: column blocks b wide
                width = n // 2 if form == "colbatch" else int(form[len("pack"):])
                blocks = w.reshape(k, n // width, width).transpose(1, 0, 2)
                y2 = bb.emit(relax.op.matmul(x, const(blocks)))
                y = bb.emit(relax.op.reshape(relax.op.permute_dims(y2, [1, 0, 2]), (m, n)))
            y = bb.emit(relax.op.add(y, const(b)))
            if kind == "ffn1":  # GELU as BERT's ONNX writes it: 0.5 y (1 + erf(y / sqrt 2))
                e = bb.emit(relax.op.erf(relax.op.multiply(y, scalar(0.70710677))))
                out = relax.op.multiply(relax.op.multiply(y, relax.op.add(e, scalar(1.0))),
                                        scalar(0.5))
            else:
                out = relax.op.add(y, r)
            out = bb.emit_output(bb.emit(out))
        bb.emit_func_output(out)
    data = np.random.default_rng(1)
    inputs = [data.standard_normal((m, k)).astype("float32")]
    if kind == "ffn2":
        inputs.append(data.standard_normal((m, n)).astype("float32"))
    return bb.get(), inputs


#: The kernels measured: shape (m, k, n), GFLOP per call, and the builder of their forms.
KERNELS = {kind: ((m, k, n), 2 * m * k * n / 1e9, module)
           for kind, (m, k, n) in SHAPES.items()}


def conv_relu_module(cin: int, cout: int, k: int, side: int, scales: tuple[float, float],
                     body):
    """A Relax module of a seeded k × k conv + bias + ReLU on a ``[1, cin, side, side]`` input,
    the conv written by ``body(bb, x, w)`` (one form of it), and that input.

    ``scales``: the weights' and the bias's standard deviations."""
    from tvm import relax

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((cout, cin, k, k)) * scales[0]).astype("float32")
    b = (rng.standard_normal((1, cout, 1, 1)) * scales[1]).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, cin, side, side), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = body(bb, x, w)
            y = bb.emit(relax.op.nn.relu(relax.op.add(y, relax.const(b))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get(), [np.random.default_rng(1).standard_normal((1, cin, side, side))
                      .astype("float32")]


def measure(records: pathlib.Path, seed: int, trials: int, kernels: dict | None = None,
            forms: tuple[str, ...] = FORMS) -> list[dict]:
    """Tune every form of each kernel at ``trials`` per task with ``seed`` (records reused),
    then time the forms of each interleaved in fresh processes, the first the reference.

    Args:
        records: the records folder (``records/s<seed>``).
        seed: the tuning seed.
        trials: trials per task.
        kernels: ``{kind: (shape, GFLOP per call, module(kind, form) -> (module, inputs))}``
            (default: the two feed-forward kernels).
        forms: the forms of every kernel, the reference first.
    """
    from tvm_pet.pipeline.confirm import process_ratios
    from tvm_pet.pipeline.toolchain import tvm_toolchain

    kernels = KERNELS if kernels is None else kernels
    toolchain = tvm_toolchain("llvm", str(records / f"s{seed}"), timing_processes=PROCESSES)
    rows = []
    for kind, (shape, gflop, build) in kernels.items():
        built = {form: build(kind, form) for form in forms}
        start = time.perf_counter()
        new_trials = sum(toolchain.tune(mod, trials, seed=seed).new_trials
                         for mod, _ in built.values())
        tuning_s = time.perf_counter() - start
        executables = {form: toolchain.build(mod) for form, (mod, _) in built.items()}
        inputs = built[forms[0]][1]
        reference = toolchain.run(executables[forms[0]], inputs)[0]
        for form in forms[1:]:
            got = toolchain.run(executables[form], inputs)[0]
            if not np.allclose(got, reference, rtol=1e-4, atol=1e-4):
                raise SystemExit(f"{kind} {form}: its outputs differ from {forms[0]}'s")
        timing = toolchain.time(executables, inputs, rounds=2 * PROCESSES, number=5, repeat=3)
        rows.append({
            "kernel": kind, "shape": list(shape), "seed": seed, "trials_per_task": trials,
            "new_trials": new_trials, "tuning_s": tuning_s,
            "median_ms": {f: 1e3 * t.median for f, t in timing.items()},
            "by_process_ms": {f: [1e3 * v for v in t.layouts] for f, t in timing.items()},
            "gflops": {f: gflop / t.median for f, t in timing.items()},
            # the reference's time over the form's, within each process, geometric mean
            "speedup_vs_orig": {f: geomean(list(process_ratios(timing[forms[0]], t)))
                                for f, t in timing.items()}})
        print(f"{kind} seed {seed}: " + ", ".join(
            f"{f} {1e3 * t.median:.2f} ms (x{rows[-1]['speedup_vs_orig'][f]:.2f})"
            for f, t in timing.items()), flush=True)
    return rows


def markdown(rows: list[dict], trials: int, forms: tuple[str, ...] = FORMS) -> str:
    """The table: per kernel and seed, each form's time, GFLOP/s and speed-up over the first."""
    lines = ["| kernel | seed | " + " | ".join(f"{f} ms (GFLOP/s, {forms[0]} / it)" for f in forms)
             + " | best form |", "|---|---|" + "---|" * (len(forms) + 1)]
    for row in rows:
        ms = row["median_ms"]
        lines.append(f"| {row['kernel']} | {row['seed']} | " + " | ".join(
            f"{ms[f]:.2f} ({row['gflops'][f]:.0f}, x{row['speedup_vs_orig'][f]:.2f})"
            for f in forms)
            + f" | {min(ms, key=ms.get)} |")
    lines.append("")
    lines.append(f"Each form tuned by MetaSchedule at {trials} trials per task (the budget held "
                 f"equal per kernel), with the row's seed; the {len(forms)} timed interleaved, "
                 f"{2 * PROCESSES} rounds of 3 samples of 5 calls, spread over {PROCESSES} fresh "
                 "processes; times are medians of the pooled samples, "
                 f"`{forms[0]} / it` the geometric mean of the processes' ratios of medians. TVM "
                 f"on 2 threads. Outputs checked against {forms[0]}'s.")
    return "\n".join(lines) + "\n"


def forms_parser(doc: str, seeds: tuple[int, ...] = (0, 1, 2)) -> argparse.ArgumentParser:
    """The options every forms benchmark takes: the records folder, the seeds and the trials."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--records", required=True, help="records folder (DIR/s<seed>)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(seeds))
    parser.add_argument("--trials", type=int, default=32)
    return parser


def run_forms(stem: str, args: argparse.Namespace, kernels: dict, forms: tuple[str, ...],
              **extra) -> int:
    """Measure every kernel's forms for each of ``args.seeds`` (:func:`measure`) and write
    ``benchmarks/results/<stem>.json`` (with ``extra`` fields) and ``<stem>.md``."""
    from tvm_pet.tune.threads import size_thread_pool
    size_thread_pool()  # TVM on the physical cores, as optimize runs it, before TVM starts
    rows = [row for seed in args.seeds
            for row in measure(pathlib.Path(args.records), seed, args.trials, kernels, forms)]
    out = ROOT / "benchmarks" / "results"
    (out / f"{stem}.json").write_text(json.dumps(
        {**extra, "trials_per_task": args.trials, "seeds": args.seeds, "rows": rows},
        indent=1) + "\n")
    (out / f"{stem}.md").write_text(markdown(rows, args.trials, forms))
    print(f"wrote {out / stem}.json and .md")
    return 0


def main(argv=None) -> int:
    parser = forms_parser(__doc__, seeds=(0, 1))
    parser.add_argument("--forms", nargs="+", default=list(FORMS),
                        help="orig, trans, colbatch or pack<b> (column blocks b wide); the "
                        "first is the reference")
    parser.add_argument("--stem", default="matmul_forms", help="the results' file name")
    args = parser.parse_args(argv)
    return run_forms(args.stem, args, KERNELS, tuple(args.forms))


if __name__ == "__main__":
    sys.exit(main())
