"""Pack what a GPU host without TVM needs, in pieces that fit a 64 MiB transfer.

The GPU host is assumed to have Python 3.12, PyTorch, onnx, onnxruntime, cuda-bindings and
nvcc, but no TVM and no network, and to take at most 64 MiB a transfer, the repository's
working tree included. Two routes:

``--runtime DIR [DIR ...]`` (the default route): TVM's runtime only. DIRs are the output folders
of ``tvm-pet optimize MODEL --target cuda --dry-run --out DIR`` (libraries, nvcc binaries for
``sm_90``, inputs). The pack holds them, the ``tvm`` Python package without
``libtvm_compiler.so`` (``TVM_USE_RUNTIME_LIB=1`` loads only ``libtvm_runtime*.so``) and the
apache-tvm-ffi wheel for the GPU machine's Python. ``scripts/gpu/run_cuda.py`` times them there.

``--full``: all of TVM, for tuning (MetaSchedule) and ``tvm-pet optimize --target cuda`` on the
GPU machine. It does not fit one transfer beside the working tree, so it is split into parts of
``--part-mib``, copied over one after another (``scripts/gpu/on_gpu.sh`` stashes parts and
unpacks when all are there).

    python scripts/gpu/pack.py --runtime out/cuda_dry/* --ffi-wheel WHEEL --out build/gpu_pack
    python scripts/gpu/pack.py --full --ffi-wheel WHEEL --out build/gpu_pack_full

The wheel: ``pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
--platform manylinux_2_28_x86_64 apache-tvm-ffi==0.1.14.post1 -d build/wheels``. Prints the size
of every piece; the pack goes under ``build/`` (ignored by git), to be copied to the GPU host.
"""
from __future__ import annotations

import argparse
import io
import json
import lzma
import pathlib
import sys
import tarfile

#: Left out of the ``tvm`` package in every pack: sources and headers (not needed to run or to
#: compile with the prebuilt libraries).
TVM_EXCLUDED = ("src", "3rdparty", "include", "__pycache__")
#: Left out of the runtime pack as well.
COMPILER_LIB = "libtvm_compiler.so"
#: Bytes one transfer to the GPU host may hold in all (64 MiB).
CALL_LIMIT = 64 * 1024 * 1024


def _tvm_root() -> pathlib.Path:
    import importlib.util
    spec = importlib.util.find_spec("tvm")
    if spec is None or spec.origin is None:
        raise SystemExit("pack.py: tvm is not importable here (activate the project's venv)")
    return pathlib.Path(spec.origin).parent


def _add_tvm(tar: tarfile.TarFile, runtime_only: bool) -> None:
    root = _tvm_root()

    def keep(info: tarfile.TarInfo):
        parts = pathlib.PurePosixPath(info.name).parts
        if any(p in TVM_EXCLUDED for p in parts[2:3]) or "__pycache__" in parts:
            return None
        if runtime_only and parts[-1] == COMPILER_LIB:
            return None
        return info

    tar.add(root, arcname="site/tvm", filter=keep)


def _add_dry_runs(tar: tarfile.TarFile, folders: list[pathlib.Path], mutants: bool) -> None:
    """Add the dry-run folders: inputs, reports, and the libraries and binaries of the original
    and the search's programs (and of the mutants when ``mutants``), with a manifest that lists
    exactly what was added."""
    for folder in folders:
        if not (folder / "manifest.json").exists():
            raise SystemExit(f"pack.py: {folder} has no manifest.json (is it the --out of "
                             "tvm-pet optimize --target cuda --dry-run?)")
        for name in ("inputs.npz", "dry_run.json"):
            tar.add(folder / name, arcname=f"dry/{folder.name}/{name}")
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["variants"] = [v for v in manifest["variants"]
                                if mutants or v["kind"] != "mutant"]
        blob = (json.dumps(manifest, indent=2) + "\n").encode()
        info = tarfile.TarInfo(f"dry/{folder.name}/manifest.json")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
        for variant in manifest["variants"]:
            tar.add(folder / variant["library"], arcname=f"dry/{folder.name}/{variant['library']}")
            for key in variant["binaries"]:
                arc = f"dry/{folder.name}/kernels/{key}.fatbin"
                if arc not in tar.getnames():
                    tar.add(folder / "kernels" / f"{key}.fatbin", arcname=arc)


def _add_batches(tar: tarfile.TarFile, folders: list[pathlib.Path]) -> None:
    """Add tuning batches (``tvm_pet.contrib.cuda_offline.batch.prepare_batch``): ``batch.json``,
    each task's library and its binaries (the staging records stay here, for ``commit_batch``)."""
    for folder in folders:
        batch = json.loads((folder / "batch.json").read_text())
        tar.add(folder / "batch.json", arcname=f"batch/{folder.name}/batch.json")
        for task in batch["tasks"]:
            tar.add(folder / task["library"], arcname=f"batch/{folder.name}/{task['library']}")
            for key in task["binaries"]:
                tar.add(folder / "kernels" / f"{key}.fatbin",
                        arcname=f"batch/{folder.name}/kernels/{key}.fatbin")


def pack(out: pathlib.Path, wheel: pathlib.Path, runtime: list[pathlib.Path] | None,
         part_mib: int, mutants: bool = False,
         batches: list[pathlib.Path] = ()) -> list[pathlib.Path]:
    """Write the pack (xz-compressed tar, split into parts of ``part_mib``); return the parts."""
    if not wheel.exists():
        raise SystemExit(f"pack.py: no wheel at {wheel} (see the module docstring)")
    buffer = io.BytesIO()
    with lzma.open(buffer, "wb", preset=9) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        _add_tvm(tar, runtime_only=runtime is not None)
        tar.add(wheel, arcname=f"wheels/{wheel.name}")
        if runtime is not None:
            _add_dry_runs(tar, runtime, mutants)
            _add_batches(tar, list(batches))
    data = buffer.getvalue()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("pack.tar.xz.part*"):
        old.unlink()
    size = part_mib * 1024 * 1024
    parts = []
    for i in range(0, len(data), size):
        path = out / f"pack.tar.xz.part{i // size:02d}"
        path.write_bytes(data[i:i + size])
        parts.append(path)
    route = "full" if runtime is None else "runtime"  # runtime may be [] (batches only)
    (out / "parts.json").write_text(json.dumps({"parts": [p.name for p in parts],
                                                "bytes": len(data), "route": route}) + "\n")
    return parts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    route = parser.add_mutually_exclusive_group(required=True)
    route.add_argument("--runtime", nargs="*", type=pathlib.Path, metavar="DIR",
                       help="dry-run folders to pack with TVM's runtime (none: tuning "
                       "batches only, with --batch)")
    route.add_argument("--full", action="store_true", help="all of TVM, in parts")
    parser.add_argument("--ffi-wheel", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--part-mib", type=int, default=48,
                        help="largest part (MiB); the working tree travels beside it (48)")
    parser.add_argument("--batch", nargs="*", type=pathlib.Path, default=[], metavar="DIR",
                        help="tuning batches to time (tvm_pet.contrib.cuda_offline.batch), "
                             "runtime route")
    parser.add_argument("--mutants", action="store_true",
                        help="also pack every mutant's library (each holds the weights)")
    args = parser.parse_args(argv)
    parts = pack(args.out, args.ffi_wheel, args.runtime, args.part_mib, args.mutants, args.batch)
    total = sum(p.stat().st_size for p in parts)
    for p in parts:
        print(f"{p}: {p.stat().st_size / 2**20:.1f} MiB")
    print(f"pack: {total / 2**20:.1f} MiB in {len(parts)} part(s); each call carries one part "
          f"plus the working tree, at most {CALL_LIMIT // 2**20} MiB")
    if len(parts) > 1 and args.runtime is not None:
        print("pack.py: the runtime pack needs several calls; pack fewer dry-run folders per "
              "pack (one model per call) to time them in one call each", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
