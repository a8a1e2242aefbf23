"""Where a model's time goes, kernel by kernel, in TVM's build and in PET's, side by side.

    python benchmarks/profile_kernels.py --model inception_v3
    python benchmarks/profile_kernels.py --out pet_out --model conv5x5   # a folder optimize wrote

Without ``--out`` it runs ``optimize`` first (the records of ``tuning_logs/``, ``--trials``
trials per task: 0 by default, so nothing is tuned and untuned kernels stay naive loops). It
then loads ``baseline.so`` and ``optimized.so`` and calls them with the VM's instrument hook
(``VirtualMachine.set_instrument``), which times every call of a kernel or builtin with the wall
clock, on the threads the kernels use. The rounds alternate between the two builds, after one
untimed call each. A kernel's time is the median over rounds of its summed time per run.

What it is for: a candidate's cost is the sum of its fused kernels' tuned times, and a rewrite
can change a kernel that the search did not cost (a PAD in front of a conv fuses into the
producer's epilogue and makes that kernel slower: stop 32). The per-kernel times show which.
The timings include the hook's own cost (a few microseconds a call): on Inception-v3 the
kernels sum to within a few percent of an uninstrumented run, but compare kernels, not totals,
with ``benchmarks/run.py``'s figures.

Writes ``benchmarks/results/profile-<model>.md`` (``--no-write`` to only print).
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUILDS = (("tvm", "baseline.so"), ("pet", "optimized.so"))


def kernel_times(vm, args, rounds_out: list[dict[str, float]], calls: dict[str, int],
                 shapes: dict[str, str] | None = None) -> None:
    """Call ``vm["main"](*args)`` once with the hook; append ``{kernel: seconds}`` summed over
    the run to ``rounds_out``, count each kernel's calls per run in ``calls``, and note in
    ``shapes`` the shapes of its tensor arguments at its first call (the output last)."""
    from tvm.runtime.vm import VMInstrumentReturnKind

    started: dict[str, float] = {}
    spent: dict[str, float] = {}
    counted: dict[str, int] = {}

    def hook(func, symbol, before_run, ret_value, *call_args):
        now = time.perf_counter()
        if before_run:
            if shapes is not None and symbol not in shapes:
                shapes[symbol] = ", ".join("x".join(map(str, a.shape)) for a in call_args
                                           if hasattr(a, "shape"))
            started[symbol] = now
        else:
            spent[symbol] = spent.get(symbol, 0.0) + now - started.pop(symbol, now)
            counted[symbol] = counted.get(symbol, 0) + 1
        return VMInstrumentReturnKind.NO_OP

    vm.set_instrument(hook)
    vm["main"](*args)
    rounds_out.append(spent)
    calls.update(counted)


def seeded_model(name: str) -> tuple:
    """``(the ONNX model of tvm_pet.models named name, seeded standard normal inputs for it)``;
    BERT with one encoder layer, as the benchmarks of record run it."""
    import numpy as np

    from tvm_pet.models import build_model
    model = build_model(name, **({"layers": 1} if name == "bert_encoder" else {}))
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in model.graph.input}
    return model, feeds


def profile(folder: pathlib.Path, feeds: dict, rounds: int) -> dict[str, dict]:
    """Return ``{build: {"kernels": {name: median seconds per run}, "calls": {name: calls},
    "shapes": {name: its arguments' shapes}}}``."""
    import tvm
    from tvm import relax

    device = tvm.cpu()
    args = [tvm.runtime.tensor(v, device) for v in feeds.values()]
    vms = {key: relax.VirtualMachine(tvm.runtime.load_module(str(folder / name)), device)
           for key, name in BUILDS}
    for vm in vms.values():  # untimed: first-call costs (allocation, page faults)
        vm["main"](*args)
    samples: dict[str, list] = {key: [] for key in vms}
    calls: dict[str, dict] = {key: {} for key in vms}
    shapes: dict[str, dict] = {key: {} for key in vms}
    for r in range(rounds):
        order = list(vms) if r % 2 == 0 else list(vms)[::-1]
        for key in order:
            kernel_times(vms[key], args, samples[key], calls[key], shapes[key])
    return {key: {"kernels": {name: statistics.median(s.get(name, 0.0) for s in samples[key])
                              for name in calls[key]},
                  "calls": calls[key], "shapes": shapes[key]} for key in vms}


def table(result: dict, top: int) -> list[str]:
    """The markdown table of the ``top`` costliest kernels of each build."""
    lines = []
    for key, label in (("tvm", "TVM (baseline.so)"), ("pet", "PET + TVM (optimized.so)")):
        kernels = result[key]["kernels"]
        total = sum(kernels.values())
        lines += [f"### {label}: {1e3 * total:.2f} ms summed over {len(kernels)} kernels and "
                  "builtins", "",
                  "| kernel | arguments (output last) | calls | ms per run | share |",
                  "|---|---|---|---|---|"]
        ranked = sorted(kernels.items(), key=lambda kv: -kv[1])
        for name, seconds in ranked[:top]:
            lines.append(f"| `{name}` | {result[key]['shapes'].get(name, '')} | "
                         f"{result[key]['calls'][name]} | {1e3 * seconds:.3f} | "
                         f"{100 * seconds / total:.1f} % |")
        rest = sum(seconds for _, seconds in ranked[top:])
        if rest:
            lines.append(f"| {len(ranked) - top} others | | | {1e3 * rest:.3f} | "
                         f"{100 * rest / total:.1f} % |")
        lines.append("")
    return lines


def kept_words(report: dict) -> str:
    """What optimize kept, from its ``report.json``: "optimized (x1.10: Conv -> Slice on sub10,
    ...)" or "original".

    >>> kept_words({"kept": "optimized", "speedup": 1.104,
    ...             "applied": [{"mutant": "Conv -> Slice", "subprogram": "sub10"}]})
    'optimized (x1.10: Conv -> Slice on sub10)'
    >>> kept_words({"kept": "original", "speedup": 1.0, "applied": []})
    'original'
    """
    if report["kept"] != "optimized":
        return str(report["kept"])
    rewrites = ", ".join(f"{a['mutant']} on {a['subprogram']}" for a in report["applied"])
    return f"optimized (x{report['speedup']:.2f}: {rewrites})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model of tvm_pet.models")
    parser.add_argument("--out", help="a folder `tvm-pet optimize` wrote (else optimize runs)")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--trials", type=int, default=0, help="trials per task if optimize runs")
    parser.add_argument("--records", default=str(ROOT / "tuning_logs"))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    import json
    import os

    from tvm_pet.tune.threads import size_thread_pool
    # TVM on the physical cores, as optimize runs it, before TVM starts (left to TVM's default,
    # Inception-v3's kernels summed 247 ms here for a 125 ms run)
    size_thread_pool()
    threads = os.environ.get("TVM_NUM_THREADS", "TVM's default number of")

    import onnx

    from tvm_pet.pipeline import DriverOptions, optimize_model
    from tvm_pet.search.config import SearchConfig

    model, feeds = seeded_model(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(args.out) if args.out else pathlib.Path(tmp) / "out"
        if not args.out:
            path = pathlib.Path(tmp) / "model.onnx"
            onnx.save(model, path)
            options = DriverOptions(target=args.target, trials=args.trials,
                                    records_dir=args.records, second_look=False)
            optimize_model(path, folder, SearchConfig(depth=3, rounds=1), options)
        report = folder / "report.json"
        kept = kept_words(json.loads(report.read_text())) if report.exists() else "not known"
        result = profile(folder, feeds, args.rounds)
    lines = [f"## {args.model}: per-kernel times ({time.strftime('%Y-%m-%d')})", "",
             f"Target {args.target}, TVM on {threads} threads; {args.rounds} rounds alternating "
             "the two builds, each kernel's median over rounds of its summed time per run (the "
             "VM's instrument hook; its own cost is in every figure). Kept: "
             f"{kept}.", ""] + table(result, args.top)
    print("\n".join(lines))
    if not args.no_write:
        out = ROOT / "benchmarks" / "results" / f"profile-{args.model}.md"
        out.write_text("\n".join(lines) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
