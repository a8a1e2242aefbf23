"""Build, here and without a GPU, everything one GPU call needs to tune and time PET on CUDA.

For each model (ONNX): ``tvm-pet optimize --target cuda --dry-run`` with every mutant's library
and the weights as inputs (``dry_run(..., libraries="all", weights="inputs")``) into
``OUT/e2e/<model>``; and the tuning tasks of the original and of every verified mutant, put in
place with its corrections, listed in ``OUT/tasks.json``. With ``--batch-trials N`` the distinct
tasks' candidates are sampled, built and compiled into ``OUT/batch``
(``tvm_pet.tune.cuda_batch.prepare_batch``; only the tasks that reduce, see
``has_reduction``; ``--shard K/M`` builds every M-th task from K, for
parallel processes writing separate batch folders).

    python scripts/gpu/prepare_cuda.py conv5x5.onnx ... --out build/gpu [--batch-trials 32]
        [--records tuning_logs] [--no-e2e]

After the GPU call: ``python scripts/gpu/commit_cuda.py`` commits the measured records, and a
second run of this script (``--no-batch``, records now applying) builds the tuned programs.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import time
import warnings


def has_reduction(task) -> bool:
    """Whether a task's kernel reduces (a conv, a matmul): the kernels tuned. The others (pads,
    slices, layout copies, elementwise) keep TVM's default GPU schedule on both sides."""
    text = task.mod["main"].script()
    return "T.axis.reduce" in text or bool(re.search(r'T\.axis\.remap\("[SR]*R', text))


def tasks_of(model: pathlib.Path, target, say) -> list:
    """The tasks of the original and of every verified mutant in place (analytic-cost search's
    listing, as the dry run builds them)."""
    from tvm_pet.cost.analytic import AnalyticCost
    from tvm_pet.onnx import import_model
    from tvm_pet.relax.adapter import program_to_module
    from tvm_pet.relax.cuda_dry_run import _mutants_in_place
    from tvm_pet.search.config import SearchConfig
    from tvm_pet.tune.compile import extract_tasks
    program = import_model(model)
    programs = [program] + [whole for _, _, whole in
                            _mutants_in_place(program, SearchConfig(), AnalyticCost())]
    tasks = {}
    for prog in programs:
        for task in extract_tasks(program_to_module(prog), target):
            tasks.setdefault(task.shash, task)
    say(f"{model.stem}: {len(programs)} programs, {len(tasks)} distinct tasks")
    return list(tasks.values())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--records", default=None, help="records root (tuning_logs)")
    parser.add_argument("--batch-trials", type=int, default=0)
    parser.add_argument("--shard", default="0/1")
    parser.add_argument("--no-e2e", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")

    from tvm_pet.relax.cuda_dry_run import dry_run
    from tvm_pet.search.config import SearchConfig
    from tvm_pet.tune.cuda import cuda_target
    from tvm_pet.tune.cuda_batch import prepare_batch
    target = cuda_target(args.arch)
    say = lambda line: print(line, flush=True)  # noqa: E731
    start = time.perf_counter()
    if not args.no_e2e:
        for model in args.models:
            report = dry_run(model, args.out / "e2e" / model.stem, SearchConfig(time_limit=60),
                             arch=args.arch, records_dir=args.records, libraries="all",
                             weights="inputs", seed=args.seed)
            failed = [v.name for v in report.variants if v.error]
            say(f"{model.stem}: {len(report.variants)} builds ({len(failed)} failed: "
                f"{', '.join(failed) or '-'}), {report.records} records, "
                f"{report.seconds:.0f} s")
    if args.batch_trials:
        shard, shards = (int(x) for x in args.shard.split("/"))
        tasks = {}
        for model in args.models:
            for task in tasks_of(model, target, say):
                tasks.setdefault(task.shash, task)
        tuned = [t for t in tasks.values() if has_reduction(t)]
        ordered = sorted(tuned, key=lambda t: t.shash)[shard::shards]
        (args.out / "tasks.json").write_text(json.dumps(
            {"tasks": len(tasks), "tuned": len(tuned), "shard": args.shard,
             "this_shard": len(ordered)}) + "\n")
        say(f"{len(tasks)} distinct tasks, {len(tuned)} that reduce; this shard "
            f"builds {len(ordered)}")
        suffix = "" if shards == 1 else f"_{shard}"
        prepare_batch(ordered, target, args.batch_trials, args.out / f"batch{suffix}",
                      seed=args.seed, progress=say)
    say(f"prepare_cuda.py: done in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
