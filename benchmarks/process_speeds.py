"""Is a binary's speed drawn per process, or set by the machine over time? Both builds of an
``optimize`` output timed in many fresh processes, one after another, kernel by kernel.

    python benchmarks/process_speeds.py --out pet_out --model csrnet_backend --processes 24

Each process loads ``baseline.so`` (TVM) and ``optimized.so`` (PET + TVM), times them
interleaved as ``benchmarks/run.py`` does (the order rotating every round, after 2 s untimed),
then times every kernel with the VM's instrument hook (:func:`kernel_times`). Every second
process runs with address-space randomization off (``setarch -R``; ``--aslr on`` to keep it on
throughout), so that a speed drawn from the address layout and one set by the machine's state
can be told apart:

- the processes are split at the widest gap between PET's sorted times, when that gap exceeds
  ``--gap`` of the median (else the speeds are called one mode);
- a runs test on the slow and fast processes in time order (Wald-Wolfowitz): far fewer runs than
  independent draws would give means the state lasts across processes, i.e. it is the machine's
  over time, not each process's draw;
- the slow and fast processes are counted with the randomization on and off;
- the kernels whose times differ most between slow and fast processes are listed.

Writes ``benchmarks/results/process_speeds-<model>.{md,json}`` (``--no-write`` to only print).
Timing is never a test: this is a measurement, read by a person.
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

BUILDS = (("tvm", "baseline.so"), ("pet", "optimized.so"))


def kernel_times(vm, args, rounds_out: list[dict[str, float]], calls: dict[str, int]) -> None:
    """Call ``vm["main"](*args)`` once with the VM's instrument hook; append ``{kernel:
    seconds}`` summed over the run to ``rounds_out``, and count each kernel's calls per run in
    ``calls``. The hook times every call of a kernel or builtin with the wall clock (its own
    cost, a few microseconds a call, is in every figure)."""
    from tvm.runtime.vm import VMInstrumentReturnKind

    started: dict[str, float] = {}
    spent: dict[str, float] = {}
    counted: dict[str, int] = {}

    def hook(func, symbol, before_run, ret_value, *call_args):
        now = time.perf_counter()
        if before_run:
            started[symbol] = now
        else:
            spent[symbol] = spent.get(symbol, 0.0) + now - started.pop(symbol, now)
            counted[symbol] = counted.get(symbol, 0) + 1
        return VMInstrumentReturnKind.NO_OP

    vm.set_instrument(hook)
    vm["main"](*args)
    rounds_out.append(spent)
    calls.update(counted)


def seeded_inputs(name: str) -> dict:
    """Seeded standard normal inputs for the model of :mod:`tvm_pet.models` named ``name``
    (BERT with one encoder layer, as the benchmarks of record run it), by input name."""
    import numpy as np

    from tvm_pet.models import build_model
    model = build_model(name, **({"layers": 1} if name == "bert_encoder" else {}))
    rng = np.random.default_rng(0)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input}


def worker(folder: pathlib.Path, feeds_path: pathlib.Path, rounds: int, number: int) -> dict:
    """In this (fresh) process: both builds' medians timed interleaved (ms), and each kernel's
    median over ``rounds`` instrumented runs (ms per run)."""
    from tvm_pet.tune.threads import size_thread_pool
    size_thread_pool()  # as optimize and run.py size TVM's pool, before TVM starts it

    import numpy as np
    import tvm
    from run import time_interleaved
    from tvm import relax

    device = tvm.cpu()
    with np.load(feeds_path) as npz:
        args = [tvm.runtime.tensor(npz[name], device) for name in npz.files]
    vms = {key: relax.VirtualMachine(tvm.runtime.load_module(str(folder / name)), device)
           for key, name in BUILDS}
    samples = time_interleaved({key: (lambda vm=vm: vm["main"](*args))
                                for key, vm in vms.items()}, rounds, number)
    kernels = {}
    for key, vm in vms.items():
        runs: list[dict] = []
        for _ in range(rounds):
            kernel_times(vm, args, runs, {})
        names = {name for run in runs for name in run}
        kernels[key] = {name: 1e3 * statistics.median(run.get(name, 0.0) for run in runs)
                        for name in names}
    return {"ms": {key: 1e3 * statistics.median(v) for key, v in samples.items()},
            "kernels": kernels}


def split(values: list[float], gap: float) -> float | None:
    """The threshold between two modes of ``values``: the midpoint of the widest gap between
    sorted neighbours, when that gap exceeds ``gap`` of the median; else None (one mode).

    >>> split([8.0, 8.1, 7.9, 9.9, 10.1, 8.0], 0.05)
    9.0
    >>> split([8.0, 8.1, 7.9, 8.2], 0.05) is None
    True
    """
    ordered = sorted(values)
    if len(ordered) < 2:
        return None
    width, low = max((b - a, a) for a, b in zip(ordered, ordered[1:]))
    return low + width / 2 if width > gap * statistics.median(ordered) else None


def runs_test(flags: list[bool]) -> dict:
    """Wald-Wolfowitz runs test on ``flags`` in time order: the runs seen, the runs expected
    were the flags independent draws with these counts, and the z score (negative: clustered).

    >>> r = runs_test([True] * 5 + [False] * 5)
    >>> r["runs"], r["expected"], round(r["z"], 2)
    (2, 6.0, -2.68)
    """
    n1, n2 = sum(flags), len(flags) - sum(flags)
    n = n1 + n2
    runs = 1 + sum(a != b for a, b in zip(flags, flags[1:])) if flags else 0
    if not n1 or not n2:
        return {"runs": runs, "expected": float(runs), "z": 0.0}
    expected = 1 + 2 * n1 * n2 / n
    variance = 2 * n1 * n2 * (2 * n1 * n2 - n) / (n * n * (n - 1))
    return {"runs": runs, "expected": expected,
            "z": (runs - expected) / math.sqrt(variance) if variance > 0 else 0.0}


def kernel_shifts(procs: list[dict], slow: list[bool], top: int) -> list[tuple]:
    """``(build, kernel, fast ms, slow ms)`` of the ``top`` kernels whose medians over the slow
    and over the fast processes differ most, in ms."""
    rows = []
    for key, _ in BUILDS:
        names = {name for p in procs for name in p["kernels"][key]}
        for name in names:
            fast_ms = [p["kernels"][key].get(name, 0.0) for p, s in zip(procs, slow) if not s]
            slow_ms = [p["kernels"][key].get(name, 0.0) for p, s in zip(procs, slow) if s]
            rows.append((key, name, statistics.median(fast_ms), statistics.median(slow_ms)))
    return sorted(rows, key=lambda r: -abs(r[3] - r[2]))[:top]


def analyse(procs: list[dict], gap: float, top: int) -> dict:
    """The modes of PET's times, the runs test, the randomization counts and the kernels that
    moved, from the processes' results in time order."""
    pet = [p["ms"]["pet"] for p in procs]
    threshold = split(pet, gap)
    result = {"threshold_ms": threshold}
    if threshold is None:
        return result
    slow = [t > threshold for t in pet]
    result["runs"] = runs_test(slow)
    result["aslr"] = {state: {"slow": sum(s for p, s in zip(procs, slow) if p["aslr"] == state),
                              "fast": sum(not s for p, s in zip(procs, slow)
                                          if p["aslr"] == state)}
                      for state in ("on", "off") if any(p["aslr"] == state for p in procs)}
    result["kernels"] = kernel_shifts(procs, slow, top)
    return result


def markdown(model: str, procs: list[dict], result: dict, args) -> list[str]:
    """The report: one line per process, then what the split, the runs test and the kernels
    say."""
    lines = [f"## {model}: both builds in {len(procs)} fresh processes "
             f"({time.strftime('%Y-%m-%d')})", "",
             f"Each process: {args.rounds} interleaved rounds of {args.number} calls a build "
             "(wall clock, the order rotating), then each kernel's median over as many "
             "instrumented runs. Processes ran one after another.", "",
             "| # | started (s) | ASLR | TVM ms | PET + TVM ms | PET / TVM |",
             "|---|---|---|---|---|---|"]
    for i, p in enumerate(procs):
        lines.append(f"| {i + 1} | {p['start_s']:.0f} | {p['aslr']} | {p['ms']['tvm']:.2f} | "
                     f"{p['ms']['pet']:.2f} | ×{p['ms']['tvm'] / p['ms']['pet']:.3f} |")
    lines.append("")
    if result["threshold_ms"] is None:
        return lines + [f"PET's times form one mode (no gap over {args.gap:.0%} of the median).",
                        ""]
    runs = result["runs"]
    lines += [f"PET's times split at {result['threshold_ms']:.2f} ms. Slow and fast in time "
              f"order: {runs['runs']} runs, {runs['expected']:.1f} expected of independent "
              f"draws (z = {runs['z']:.2f}; well below 0: the state lasts across processes).",
              "", "| ASLR | slow | fast |", "|---|---|---|"]
    lines += [f"| {state} | {c['slow']} | {c['fast']} |" for state, c in result["aslr"].items()]
    lines += ["", "| build | kernel | fast processes ms | slow processes ms | slow / fast |",
              "|---|---|---|---|---|"]
    lines += [f"| {key} | `{name}` | {f:.3f} | {s:.3f} | ×{s / f:.2f} |" if f else
              f"| {key} | `{name}` | {f:.3f} | {s:.3f} | |" for key, name, f, s in
              result["kernels"]]
    return lines + [""]


def run_processes(args, feeds_path: pathlib.Path) -> list[dict]:
    """The fresh processes, one after another, each's result with its start and ASLR state."""
    procs, start = [], time.perf_counter()
    for i in range(args.processes):
        aslr = "on" if args.aslr == "on" or i % 2 == 0 else "off"
        cmd = [sys.executable, __file__, "--worker", args.out, "--feeds", str(feeds_path),
               "--rounds", str(args.rounds), "--number", str(args.number)]
        if aslr == "off":
            cmd = ["setarch", platform.machine(), "-R", *cmd]
        began = time.perf_counter() - start
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise SystemExit(f"process {i + 1} failed: {proc.stderr.strip()[-500:]}")
        procs.append({**json.loads(lines[-1]), "start_s": began, "aslr": aslr})
        ms = procs[-1]["ms"]
        print(f"process {i + 1}/{args.processes} ({aslr}): TVM {ms['tvm']:.2f} ms, "
              f"PET {ms['pet']:.2f} ms", flush=True)
    return procs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="a folder `tvm-pet optimize` wrote")
    parser.add_argument("--model", help="its model, of tvm_pet.models (for the inputs' shapes)")
    parser.add_argument("--processes", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--number", type=int, default=10, help="calls per timing sample")
    parser.add_argument("--aslr", choices=("alternate", "on"), default="alternate")
    parser.add_argument("--gap", type=float, default=0.05,
                        help="the widest gap, as a share of the median, that splits two modes")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--feeds", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(pathlib.Path(args.worker), pathlib.Path(args.feeds),
                                args.rounds, args.number)), flush=True)
        return 0
    if not (args.out and args.model):
        parser.error("--out and --model are required")
    import numpy as np

    feeds = seeded_inputs(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        feeds_path = pathlib.Path(tmp) / "feeds.npz"
        np.savez(feeds_path, **feeds)
        procs = run_processes(args, feeds_path)
    result = analyse(procs, args.gap, args.top)
    lines = markdown(args.model, procs, result, args)
    print("\n".join(lines))
    if not args.no_write:
        stem = ROOT / "benchmarks" / "results" / f"process_speeds-{args.model}"
        stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
        stem.with_suffix(".json").write_text(json.dumps({"processes": procs, **result},
                                                        indent=1) + "\n")
        print(f"wrote {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
