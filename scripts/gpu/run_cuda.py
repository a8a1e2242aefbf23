"""Time TVM against PET + TVM on a CUDA GPU, from builds made without one.

Runs on the GPU host with TVM's runtime only (``TVM_USE_RUNTIME_LIB=1``: no compiler, no
tvm_pet), on the folders written by ``tvm-pet optimize MODEL --target cuda --dry-run --out DIR``
and packed by ``scripts/gpu/pack.py``::

    TVM_USE_RUNTIME_LIB=1 PYTHONPATH=site python run_cuda.py DIR [DIR ...] --out RESULTS_DIR

Loading a library asks ``tvm_callback_cuda_compile`` for a binary of each CUDA source; this
script answers with the binary nvcc compiled for it off the GPU (``DIR/kernels/<sha256>.fatbin``)
and compiles only sources it has no binary for (counted in ``binaries``). For each folder it
checks that every build computes what the original computes, then times them interleaved
(rotating order every round), each sample a ``time_evaluator`` mean on the GPU, and writes
``RESULTS_DIR/cuda-<gpu>.json``: ``tvm`` is the original, ``pet`` the build the search chose
(``manifest.json``'s ``optimized``), and every mutant build with its ratio.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import re
import statistics
import sys
import time

import numpy as np


def _load_cuda_runtime() -> None:
    """Load TVM's CUDA runtime sidecar, which ``import tvm`` skips in runtime-only mode.

    ``TVM_USE_RUNTIME_LIB=1`` also turns off TVM's backend autoload, the only code that loads
    ``libtvm_runtime_cuda.so``; without it ``tvm.cuda(0)`` does not exist and a CUDA library
    cannot be loaded. Loading it registers the CUDA device API and module loader.
    """
    import ctypes

    from tvm.base import _LOADED_LIBS

    if "tvm_runtime_cuda" in _LOADED_LIBS:
        return
    lib_dir = pathlib.Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent
    try:
        _LOADED_LIBS["tvm_runtime_cuda"] = ctypes.CDLL(str(lib_dir / "libtvm_runtime_cuda.so"),
                                                       mode=ctypes.RTLD_LOCAL)
    except OSError as err:  # no libcuda.so.1 (no driver), or the sidecar is missing
        raise SystemExit(f"run_cuda.py: cannot load TVM's CUDA runtime: {err}") from None


def _install_binaries(folders: list[pathlib.Path], counts: dict) -> None:
    """Answer TVM's CUDA compile callback with the binaries compiled off the GPU."""
    import tvm_ffi

    def compile_cuda(code, *rest):
        key = hashlib.sha256(str(code).encode()).hexdigest()
        for folder in folders:
            path = folder / "kernels" / f"{key}.fatbin"
            if path.exists():
                counts["carried"] += 1
                return bytearray(path.read_bytes())
        counts["compiled_here"] += 1
        try:  # compiles for this GPU's arch (nvrtc or nvcc); may need TVM's compiler library
            from tvm.support import nvcc
            return nvcc.tvm_callback_cuda_compile(code)
        except (ImportError, AttributeError, RuntimeError, ValueError) as err:
            raise RuntimeError(f"no carried binary for CUDA source {key} and compiling it here "
                               f"failed ({err}); rerun the dry run and pack again") from err

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", compile_cuda, override=True)


def _outputs(result) -> list[np.ndarray]:
    if hasattr(result, "numpy"):
        return [result.numpy()]
    return [r.numpy() for r in result]


def _time(timers: dict, rounds: range) -> dict[str, list[float]]:
    """Interleaved rounds, the order rotating each round; each sample a mean over the timer's
    ``number`` calls."""
    names = list(timers)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in rounds:
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(float(timers[name]().mean))
    return samples


def _summary(values: list[float]) -> dict:
    ms = [v * 1e3 for v in values]
    return {"median": statistics.median(ms), "min": min(ms), "max": max(ms), "samples": ms}


def _weights(manifest: dict, device) -> list:
    """The weights every build of a ``weights="inputs"`` dry run reads: drawn here, seeded,
    scaled by 1/sqrt(fan-in) so that deep stacks stay in range."""
    import tvm
    rng = np.random.default_rng(manifest.get("param_seed", 0))
    values = []
    for _, shape in manifest.get("params", []):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        value = rng.standard_normal(shape).astype(np.float32) / np.float32(np.sqrt(fan_in))
        values.append(tvm.runtime.tensor(value, device))
    return values


def _arguments(vm, manifest: dict, inputs: list, weights: list) -> list:
    """``main``'s arguments for one build: the inputs, then its transformed weights."""
    if "params" not in manifest:
        return inputs
    transformed = vm[manifest["transform"]](weights)
    return inputs + list(transformed)


def _decide(samples: dict[str, list[float]], look: int) -> tuple[str, dict]:
    """PET's choice, by the rank rule: the build with the lowest median over the first ``look``
    rounds is kept when it beats the original's median both there and over the rest; else the
    original. Returns (choice, the medians of each look)."""
    first = {n: statistics.median(v[:look]) for n, v in samples.items()}
    second = {n: statistics.median(v[look:]) for n, v in samples.items()}
    best = min((n for n in samples if n != "original"), key=first.get, default="original")
    kept = (best != "original" and first[best] < first["original"]
            and second[best] < second["original"])
    return (best if kept else "original"), {"first": first, "second": second, "best": best}


def run_folder(folder: pathlib.Path, device, rounds: int, number: int) -> dict:
    """Check and time the builds of one dry-run folder; return its row."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    manifest = json.loads((folder / "manifest.json").read_text())
    feeds = np.load(folder / "inputs.npz")
    inputs = [tvm.runtime.tensor(feeds[name], device) for name in manifest["inputs"]]
    weights = _weights(manifest, device)
    vms, args, errors, load_s, refused = {}, {}, {}, {}, {}

    def refuse(name: str, why: str) -> None:  # this build is not timed; the others still are
        refused[name] = f"{why}; not timed"
        print(f"{folder}: build {name} {refused[name]}", flush=True)
        del vms[name]

    def raised(err: Exception) -> str:
        return f"raised {type(err).__name__}: {str(err).strip()[:300]}"

    for variant in manifest["variants"]:
        start = time.perf_counter()
        lib = tvm.runtime.load_module(str(folder / variant["library"]))
        vms[variant["name"]] = VirtualMachine(lib, device)
        try:  # e.g. a build whose weights are not the ones drawn here
            args[variant["name"]] = _arguments(vms[variant["name"]], manifest, inputs, weights)
        except Exception as err:  # noqa: BLE001
            refuse(variant["name"], raised(err))
        load_s[variant["name"]] = time.perf_counter() - start
    reference = _outputs(vms["original"]["main"](*args["original"]))
    for name, vm in list(vms.items()):
        try:
            got = _outputs(vm["main"](*args[name]))
        except Exception as err:  # noqa: BLE001
            refuse(name, raised(err))
            continue
        errors[name] = max(float(np.abs(a - b).max()) for a, b in zip(reference, got))
        scale = max(1.0, max(float(np.abs(a).max()) for a in reference))
        if not all(np.allclose(a, b, rtol=1e-4, atol=1e-4 * scale) for a, b in zip(reference, got)):
            refuse(name, f"differs from the original by {errors[name]:.3g}")
    timers = {}
    for name, vm in vms.items():
        evaluator = vm.time_evaluator("main", device, number=number, repeat=1)
        timers[name] = (lambda e, a: lambda: e(*a))(evaluator, args[name])
    samples = _time(timers, range(rounds))
    look = rounds // 2
    choice, looks = _decide(samples, look)
    times = {name: _summary(values) for name, values in samples.items()}
    base = times["original"]["median"]
    pet = manifest["optimized"] if manifest["optimized"] in times else "original"
    second = looks["second"]
    return {
        "folder": folder.name,
        "model": manifest["model"], "arch": manifest["arch"], "target": manifest["target"],
        "weights": "inputs (drawn on the GPU machine)" if "params" in manifest else "embedded",
        "tvm_ms": base, "pet_ms": times[pet]["median"], "pet_build": pet,
        "speedup_pet_vs_tvm": base / times[pet]["median"],
        "measured_choice": {
            "rule": f"lowest median over rounds 1-{look}; kept if it beats the original there "
                    f"and over rounds {look + 1}-{rounds}; ratio from those later rounds",
            "best_first_look": looks["best"], "kept": choice,
            "tvm_ms": second["original"] * 1e3, "pet_ms": second[choice] * 1e3,
            "speedup_pet_vs_tvm": second["original"] / second[choice]},
        "variants": [{"name": v["name"], "kind": v["kind"], "mutant": v["mutant"],
                      "median_ms": times[v["name"]]["median"] if v["name"] in times else None,
                      "ratio_vs_tvm": (base / times[v["name"]]["median"]
                                       if v["name"] in times else None),
                      "refused": refused.get(v["name"]),
                      "max_abs_err_vs_original": errors.get(v["name"]),
                      "load_s": load_s[v["name"]]} for v in manifest["variants"]],
        "times_ms": times,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path, required=True, help="results folder")
    parser.add_argument("--name", default=None, help="results file name (cuda-<gpu>.json)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--number", type=int, default=20, help="calls averaged per sample")
    args = parser.parse_args(argv)

    import tvm

    _load_cuda_runtime()
    device = tvm.cuda(0)
    if not tvm.runtime.enabled("cuda") or not device.exist:
        print("run_cuda.py: no CUDA GPU visible to TVM's runtime", file=sys.stderr)
        return 2
    counts = {"carried": 0, "compiled_here": 0}
    _install_binaries(args.folders, counts)
    name = str(device.device_name)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-")
    slug = slug.split("-")[0] if slug else "gpu"
    start = time.perf_counter()
    rows, failed = [], {}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / (args.name or f"cuda-{slug}.json")
    for folder in args.folders:
        try:
            rows.append(run_folder(folder, device, args.rounds, args.number))
        except Exception as err:  # noqa: BLE001 - report it, and time the next folder
            failed[str(folder)] = f"{type(err).__name__}: {str(err).strip()[-500:]}"
            print(f"{folder}: FAILED {failed[str(folder)]}", flush=True)
            continue
        chosen = rows[-1]["measured_choice"]
        print(f"{rows[-1]['model']}: tvm {chosen['tvm_ms']:.3f} ms, pet {chosen['pet_ms']:.3f} ms "
              f"(x{chosen['speedup_pet_vs_tvm']:.3f}, {chosen['kept']}; "
              f"{len(rows[-1]['variants'])} builds)", flush=True)
        _write(path, name, device, args, counts, start, rows, failed)
    _write(path, name, device, args, counts, start, rows, failed)
    print(f"wrote {path}")
    return 0 if rows else 1


def _write(path, name, device, args, counts, start, rows, failed) -> None:
    result = {"device": name, "compute_version": str(device.compute_version),
              "mode": "runtime-only: builds from tvm-pet optimize --dry-run (dlight default "
                      "schedules, tuning records where shipped), timed here",
              "timing": f"{args.rounds} interleaved rounds, order rotating; each sample the "
                        f"mean of {args.number} calls (time_evaluator, device-synchronised)",
              "binaries": counts, "wall_s": time.perf_counter() - start, "rows": rows,
              "failed": failed}
    path.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
