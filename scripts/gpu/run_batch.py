"""Time every candidate of a tuning batch on a GPU (``tvm_pet.contrib.cuda_offline.batch``'s
``prepare_batch`` built it).

Runs on the GPU machine with TVM's runtime only (``TVM_USE_RUNTIME_LIB=1``, no tvm_pet)::

    TVM_USE_RUNTIME_LIB=1 PYTHONPATH=site python run_batch.py BATCH_DIR --out times.json

Each task's library holds its candidates ``c0``, ``c1``, ... and ``dlight`` (TVM's default GPU
schedule); every function is run once on random arguments, then timed (``time_evaluator``:
``--repeat`` samples of at least ``--min-ms`` each, the median kept). A candidate that fails to
run is recorded as ``null`` (MetaSchedule's failed trial). The worker process writes each task's
times as soon as they are measured; a CUDA error can leave the process's context unusable, so
after a failure the worker checks the task's ``dlight`` function, and when that fails too it
exits and a fresh worker carries on from the next candidate, the failing one recorded as
``null``. ``--device cpu`` times an llvm batch, to check the flow without a GPU.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np

#: Exit status of a worker whose CUDA context failed (the parent starts a fresh one).
CONTEXT_LOST = 3


def _random_args(specs: list, device, rng) -> list:
    import tvm
    args = []
    for dtype, shape in specs:
        if dtype.startswith("float"):
            value = rng.uniform(-1, 1, size=shape).astype(dtype)
        else:
            value = np.zeros(shape, dtype=dtype)
        args.append(tvm.runtime.tensor(value, device))
    return args


def _measure(lib, name: str, args: list, device, repeat: int, min_ms: float) -> float:
    lib[name](*args)  # warm-up; also surfaces a launch error
    device.sync()
    timer = lib.time_evaluator(name, device, number=1, repeat=repeat, min_repeat_ms=int(min_ms))
    return float(statistics.median(timer(*args).results))


def worker(batch_dir: pathlib.Path, out: pathlib.Path, device_kind: str, repeat: int,
           min_ms: float) -> int:
    import tvm
    if device_kind == "cuda":
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
        from run_cuda import _install_binaries, _load_cuda_runtime
        _load_cuda_runtime()
        _install_binaries([batch_dir], {"carried": 0, "compiled_here": 0})
        device = tvm.cuda(0)
    else:
        device = tvm.cpu(0)
    batch = json.loads((batch_dir / "batch.json").read_text())
    times = json.loads(out.read_text()) if out.exists() else {"tasks": {}}
    rng = np.random.default_rng(0)
    for task in batch["tasks"]:
        done = times["tasks"].setdefault(task["shash"], {})
        todo = [f for f in task["functions"] if f not in done]
        if not todo:
            continue
        lib = tvm.runtime.load_module(str(batch_dir / task["library"]))
        args = _random_args(task["args"], device, rng)
        for name in todo:
            try:
                done[name] = _measure(lib, name, args, device, repeat, min_ms)
            except Exception as err:  # noqa: BLE001 - TVM raises its own error types
                done[name] = None
                done.setdefault("errors", {})[name] = str(err).strip().splitlines()[-1][:300]
                out.write_text(json.dumps(times) + "\n")
                try:
                    _measure(lib, "dlight", args, device, 1, 1)
                except Exception:  # noqa: BLE001
                    return CONTEXT_LOST
            out.write_text(json.dumps(times) + "\n")
        ran = [v for k, v in done.items() if k != "errors" and v]
        print(f"{task['name']}: best {min(ran, default=float('nan')) * 1e6:.1f} us, "
              f"dlight {(done.get('dlight') or float('nan')) * 1e6:.1f} us", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("batch", type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path, required=True, help="times.json")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--min-ms", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.batch, args.out, args.device, args.repeat, args.min_ms)
    start = time.perf_counter()
    for attempt in range(50):
        status = subprocess.call([sys.executable, __file__, str(args.batch), "--out",
                                  str(args.out), "--device", args.device, "--repeat",
                                  str(args.repeat), "--min-ms", str(args.min_ms), "--worker"])
        if status != CONTEXT_LOST:
            break
        print(f"run_batch.py: a candidate broke the CUDA context; fresh worker {attempt + 2}",
              flush=True)
    times = json.loads(args.out.read_text())
    n = sum(len([k for k in t if k != "errors"]) for t in times["tasks"].values())
    failed = sum(1 for t in times["tasks"].values() for k, v in t.items()
                 if k != "errors" and v is None)
    times["wall_s"] = time.perf_counter() - start
    args.out.write_text(json.dumps(times, indent=1) + "\n")
    print(f"run_batch.py: {n} functions timed ({failed} failed) in {times['wall_s']:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
