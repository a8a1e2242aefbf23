"""Tune whole models into the shipped records, one task at a time, for long background runs.

    nohup python scripts/tune_models.py --models resnet18,csrnet --layouts NCHW,NHWC --trials 64 \
        > tune.log 2>&1 &

Each model is built from code (seeded) and loaded as ``tvm-pet optimize`` loads it: TVM's ONNX
frontend and TVM's own graph rewrites (:func:`tvm_pet.relax.rewrites.tvm_rewrites`), lowered as
optimize's baseline is (tvm_pet's lowering of the unchanged model where that gives other kernels
than the import, :mod:`tvm_pet.pipeline.baseline`), then every task is tuned to ``--trials`` records
into the host target's directory under the shipped ``tvm_pet/tuning_logs/``. Records are merged
into the shared database as each task ends (an interrupted run keeps them), and after each model
its records are checked against their kernels and the wrong ones dropped
(``scripts/check_records.py``), then the database
is pruned to the ``--keep`` fastest records per workload (``tvm_pet.tune.dbfile.prune``), so what is
committed stays small. Checked first: pruned first, a workload whose fastest records leave elements
unwritten would keep only those, and lose its right record. A second run measures nothing for
tasks already tuned.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The paper's five models at batch 1, with the sizes of the benchmarks of record.
MODELS = ("resnet18", "csrnet", "bert_encoder", "resnet3d_18", "inception_v3")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated names")
    parser.add_argument("--trials", type=int, default=32, help="records per task (default 32)")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--records", default=str(ROOT / "tvm_pet" / "tuning_logs"))
    parser.add_argument("--keep", type=int, default=4, help="records kept per workload")
    parser.add_argument("--layouts", default="NCHW",
                        help="comma-separated convolution layouts to tune each model in "
                             "(NCHW, NHWC; default NCHW)")
    parser.add_argument("--tvm-default", action="store_true",
                        help="tune the kernels of TVM's default build (default: the prepacked "
                             "ones optimize builds, tvm_pet.tune.prepack)")
    args = parser.parse_args()

    from tvm_pet.models import build_model
    from tvm_pet.pipeline.optimize import load_model, toolchain_for
    from tvm_pet.pipeline.options import DriverOptions
    from tvm_pet.pipeline.toolchain import tvm_toolchain
    from tvm_pet.tune import dbfile, resolve_target, tune
    from tvm_pet.tune.records import db_dir

    sys.path.insert(0, str(ROOT / "scripts"))
    from check_records import check

    target = resolve_target(args.target)
    jobs = [(name, layout) for name in args.models.split(",")
            for layout in args.layouts.split(",")]
    for name, layout in jobs:
        options = DriverOptions(target=args.target, prepack=not args.tvm_default, layout=layout)
        start = time.perf_counter()
        print(f"== {name} ({layout}): importing", flush=True)
        # the original's module as optimize builds it: TVM's import with its rewrites, or, where
        # tvm_pet's lowering of the unchanged model gives other kernels, that lowering
        # (tvm_pet.pipeline.baseline; for ResNet3D-18, records tuned on the import's kernels
        # matched only 3 of the 18 kernels optimize builds)
        loaded = load_model(build_model(name), options)
        toolchain, aligned = toolchain_for(loaded, options, tvm_toolchain(
            args.target, None, prepack=options.prepack))
        if aligned is not None:
            print(f"  {name}: {aligned.line()}", flush=True)
        mod = toolchain.lower(loaded.program)
        stats = tune(mod, target, args.trials, args.records, prepack=options.prepack,
                     progress=lambda line: print(f"  {name}: {line}", flush=True))
        work_dir = db_dir(args.records, target)
        wrong = check(work_dir, target, drop=True)
        dropped = dbfile.prune(work_dir, keep=args.keep)
        print(f"== {name} ({layout}): {stats.tasks} tasks, {stats.new_trials} new trials, "
              f"{time.perf_counter() - start:.0f} s; {len(wrong)} wrong records dropped, "
              f"pruned {dropped}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
