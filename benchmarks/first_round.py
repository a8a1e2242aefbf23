"""A minutes budget's first round, before and after 2026-11-29, at the same budget.

    python benchmarks/first_round.py [--model resnet18] [--minutes 5] [--processes 3]
        [--after-minutes M] [--before-records DIR --before-seconds S] [--work DIR]

MetaSchedule's gradient task scheduler gives every kernel one batch before it chooses, and
``tune_minutes`` does not cut that round short. The same model (built from code, seeded, loaded
and lowered as ``tvm-pet optimize`` does: TVM's frontend and rewrites) is tuned for ``--minutes``
from an empty records folder twice:

- ``before``: as before 2026-11-29, a first step of 16 trials per kernel (a round of 8 each),
  every batch drawn by the evolutionary search; reproduced here by patching
  ``tuner.first_round`` to say a whole batch (8) fits;
- ``after``: the code as it is: where a whole batch per kernel does not fit in the minutes at
  ``tuner.PRIOR_TRIAL_S`` a trial, a new kernel's first batch is what they hold, 1 to 7
  (``tuner.first_round``), drawn at random (``tuner._WholeModelSearch``); later batches of 8,
  by the evolutionary search, as before.

Results measured with two earlier versions of ``after`` are in
``benchmarks/results/first_round.md``.

``--after-minutes`` gives the new way another budget: where the old way ran past its minutes,
the new way can be given the time the old way really took. ``--before-records`` reuses the
records of an earlier run of the old way (``tvm-pet tune --budget`` before 2026-11-29), with
the seconds it tuned for. Both builds are checked against each other, then timed interleaved,
the rounds spread over ``--processes`` fresh processes; the ratio is the geometric mean of each
process's ratio of medians. Results go to ``benchmarks/results/first_round_<model>.{json,md}``;
nothing here fails on timing.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time
from unittest import mock

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def tune_variant(mod, target, minutes: float, records_dir: pathlib.Path, before: bool) -> dict:
    """Tune ``mod`` for ``minutes`` into ``records_dir``, the old way or the new."""
    from tvm_pet.tune import tuner
    patches = ([mock.patch.object(tuner, "first_round", lambda k, s, batch=8: None)]
               if before else [])
    for patch in patches:
        patch.start()
    try:
        start = time.perf_counter()
        stats = tuner.tune_minutes(mod, target, minutes, records_dir,
                                   progress=lambda line: print(line, flush=True))
        return {"tuning_s": time.perf_counter() - start, "new_trials": stats.new_trials}
    finally:
        for patch in patches:
            patch.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--after-minutes", type=float, help="(default: --minutes)")
    parser.add_argument("--before-records", help="records of the old way's run, reused")
    parser.add_argument("--before-seconds", type=float, help="what that run tuned for")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--work", help="where the records and builds go (default: a temporary "
                        "folder)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()

    import onnx

    from tvm_pet.models import build_model
    from tvm_pet.pipeline.optimize import load_model, random_inputs
    from tvm_pet.pipeline.options import DriverOptions
    from tvm_pet.pipeline.toolchain import tvm_toolchain
    from tvm_pet.tune.process_timing import time_in_processes

    with tempfile.TemporaryDirectory(prefix="first-round-") as tmp:
        work = pathlib.Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        model_path = work / f"{args.model}.onnx"
        onnx.save(build_model(args.model), str(model_path))
        loaded = load_model(str(model_path), DriverOptions())
        inputs = list(random_inputs(loaded.program, 0).values())
        row: dict = {"model": args.model, "minutes": args.minutes,
                     "after_minutes": args.after_minutes or args.minutes}
        libraries, outputs = {}, {}
        for name in ("before", "after"):
            records_dir = work / name
            toolchain = tvm_toolchain("llvm", str(records_dir), None).with_lowering(loaded.lower)
            module = toolchain.lower(loaded.program)
            row["target"] = str(toolchain.target)
            if name == "before" and args.before_records:
                records_dir = pathlib.Path(args.before_records)
                toolchain = tvm_toolchain("llvm", str(records_dir), None).with_lowering(
                    loaded.lower)
                row[name] = {"tuning_s": args.before_seconds, "reused": str(records_dir)}
            else:
                row[name] = tune_variant(module, toolchain.target, row["after_minutes"]
                                         if name == "after" else args.minutes, records_dir,
                                         name == "before")
            plan = toolchain.records_plan(module)
            row[name] |= {"kernels": plan.tasks, "scheduled": plan.own}
            print(name, row[name], flush=True)
            libraries[name] = str(work / f"{name}.so")
            toolchain.export(toolchain.build(module), libraries[name])
            outputs[name] = run_library(libraries[name], inputs)
        row["max_abs_diff"] = float(np.abs(outputs["before"] - outputs["after"]).max())
        timings = time_in_processes(libraries, inputs, processes=args.processes,
                                    rounds=args.rounds, number=3, repeat=3)
    by_process = [statistics.median(b) / statistics.median(a) for b, a in
                  zip(timings["before"].groups, timings["after"].groups)]
    row["median_ms"] = {k: t.median * 1e3 for k, t in timings.items()}
    row["by_process"] = by_process
    row["before_over_after"] = statistics.geometric_mean(by_process)
    out = pathlib.Path(args.out)
    stem = f"first_round_{args.model}"
    (out / f"{stem}.json").write_text(json.dumps(row, indent=1) + "\n")
    (out / f"{stem}.md").write_text(markdown(row))
    print(markdown(row))
    return 0


def run_library(path: str, inputs) -> np.ndarray:
    """The first output of an exported Relax VM library on ``inputs``."""
    import tvm
    from tvm import relax
    vm = relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(x) for x in inputs])
    return got.numpy() if hasattr(got, "numpy") else got[0].numpy()


def markdown(row: dict) -> str:
    b, a = row["before"], row["after"]
    trials = {k: row[k].get("new_trials", "(reused)") for k in ("before", "after")}
    lines = [f"{row['model']} ({b['kernels']} kernels), `tune_minutes` from an empty records "
             f"folder, target `{row['target']}`; each build's kernels scheduled by its records: "
             f"before {b['scheduled']}, after {a['scheduled']}.", "",
             "| | minutes asked | tuning s | new trials | model ms (median) |",
             "|---|---|---|---|---|",
             f"| before (a round of 8 per kernel, evolutionary) | {row['minutes']:g} | "
             f"{b['tuning_s']:.0f} | {trials['before']} | {row['median_ms']['before']:.2f} |",
             f"| after (where a whole batch does not fit: a new kernel's first smaller, at "
             f"random) | "
             f"{row['after_minutes']:g} | {a['tuning_s']:.0f} | {trials['after']} | "
             f"{row['median_ms']['after']:.2f} |", "",
             f"before / after: x{row['before_over_after']:.3f} (by process: "
             + ", ".join(f"x{r:.3f}" for r in row["by_process"])
             + f"); outputs within {row['max_abs_diff']:.1e} of each other."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
