"""Build, on a CPU host without a GPU, everything a GPU host needs to tune and time PET on CUDA.

For each model (ONNX): ``tvm-pet optimize --target cuda --dry-run`` with every mutant's library
and the weights as inputs (``dry_run(..., libraries="all", weights="inputs")``) into
``OUT/e2e/<model>``; and the tuning tasks of the original and of every verified mutant, put in
place with its corrections, listed in ``OUT/tasks.json``. With ``--batch-trials N`` the distinct
tasks' candidates are sampled, built and compiled into ``OUT/batch``
(``tvm_pet.contrib.cuda_offline.batch.prepare_batch``; only the tasks that reduce, see
``reduces``; ``--shard K/M`` builds every M-th task from K, for
parallel processes writing separate batch folders).

    python scripts/gpu/prepare_cuda.py conv5x5.onnx ... --out build/gpu [--batch-trials 32]
        [--records tvm_pet/tuning_logs] [--no-e2e]

After the GPU host has timed the batch, ``python scripts/gpu/commit_cuda.py`` commits the
measured records, and a second run of this script (records now applying; ``--suffix -tuned``,
``--combine TIMES...`` to add each model's combination of winning mutants, ``combined``) builds
the tuned programs.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
import warnings


def tasks_of(model: pathlib.Path, target, say, rewrites: bool = True,
             programs: list | None = None) -> list:
    """The tasks of the original and of every verified mutant in place (analytic-cost search's
    listing, as the dry run builds them: after TVM's graph rewrites unless ``rewrites`` is off;
    each mutant's from its fusion region, :func:`mutant_changes`), or of the given ``programs``
    only (each compiled whole)."""
    from tvm_pet.contrib.cuda_offline.dry_run import cuda_module
    from tvm_pet.tune.compile import extract_tasks
    if programs is None:
        program, changes = model_changes(model, target, rewrites, say)
        tasks = {t.shash: t for t in extract_tasks(cuda_module(program, rewrites=rewrites),
                                                   target)}
        for change in changes:
            for task, _ in change[-1]:
                tasks.setdefault(task.shash, task)
        say(f"{model.stem}: the original and {len(changes)} mutants, {len(tasks)} distinct "
            "tasks")
        return list(tasks.values())
    tasks, start = {}, time.perf_counter()
    for done, prog in enumerate(programs, 1):
        for task in extract_tasks(cuda_module(prog, rewrites=rewrites), target):
            tasks.setdefault(task.shash, task)
        if done % 10 == 0 and done < len(programs):
            spent = time.perf_counter() - start
            say(f"{model.stem}: listed the tasks of {done}/{len(programs)} programs, "
                f"{spent:.0f} s, ETA {spent / done * (len(programs) - done):.0f} s")
    say(f"{model.stem}: {len(programs)} programs, {len(tasks)} distinct tasks")
    return list(tasks.values())


_CHANGES: dict = {}


def model_changes(model: pathlib.Path, target, rewrites: bool = True, say=None) -> tuple:
    """``(program, changes)``: a model file imported and its :func:`mutant_changes`, listed
    once a process for the same file (its path, size and modification time), target and
    rewrites. A run with ``--combine`` and ``--batch-trials`` asks for a model's gains
    (:func:`gains_by_subprogram`) for its e2e folder and again for its batch, and
    :func:`tasks_of` lists the same changes: each mutant's region is lowered once."""
    from tvm_pet.onnx import import_model
    stat = model.stat()
    key = (str(model.resolve()), stat.st_size, stat.st_mtime_ns, str(target), rewrites)
    if key not in _CHANGES:
        program = import_model(model)
        _CHANGES[key] = (program, mutant_changes(program, target, rewrites, say=say,
                                                 stem=model.stem))
    return _CHANGES[key]


def mutant_changes(program, target, rewrites: bool = True, *, say=None, stem: str = "") -> list:
    """Every verified mutant of every subset (``mutants_by_part``, analytic cost) with the
    kernels it takes out of the whole model and those it brings, ``(name, part, mutant,
    corrected, lost, gained)`` with ``lost`` and ``gained`` lists of ``(Task, calls)``.

    They come from the mutant's fusion region (:mod:`tvm_pet.search.region`: the kernels a
    rewrite can change, bounded by the reducing operators around it), lowered alone before and
    after the rewrite, and TVM's rewrites on it unless ``rewrites`` is off; kernels both sides
    have cancel. Compiling the whole model with each mutant in place instead took Inception-v3
    more than 25 minutes. Where a region cannot be cut or lowered alone, or a matmul outside it
    reads what it reads (TVM's rewrites may combine the two), the whole model with the mutant
    in place is listed (a test checks both ways agree)."""
    from tvm_pet.cost.analytic import AnalyticCost
    from tvm_pet.contrib.cuda_offline.dry_run import mutants_by_part
    from tvm_pet.search.config import SearchConfig
    from tvm_pet.search.partition import replace_subprogram
    from tvm_pet.search.region import fusion_region
    from tvm_pet.tune.measured_cost import kernel_change
    listed = mutants_by_part(program, SearchConfig(), AnalyticCost())
    tasks, regions, out = _RegionTasks(target, rewrites), {}, []
    start = time.perf_counter()
    for done, (name, part, mutant, corrected) in enumerate(listed, 1):
        if part.nodes not in regions:  # a subset's region, or None: list the whole model
            region = fusion_region(program, part)
            regions[part.nodes] = (None if region is None or (
                rewrites and _matmul_beside(program, region)) else region)
        region = regions[part.nodes]
        after = None if region is None else region.after(part, corrected)
        pair = (None, None) if after is None else (tasks(region.before), tasks(after))
        if None in pair:
            pair = (tasks(program, whole=True),
                    tasks(replace_subprogram(program, part, corrected), whole=True))
        out.append((name, part, mutant, corrected, *kernel_change(*pair)))
        if say is not None and done % 25 == 0 and done < len(listed):
            spent = time.perf_counter() - start
            say(f"{stem}: listed the kernels of {done}/{len(listed)} mutants, {spent:.0f} s, "
                f"ETA {spent / done * (len(listed) - done):.0f} s")
    return out


def _matmul_beside(program, region) -> bool:
    """Whether a matmul outside ``region`` reads a tensor the region reads: TVM's
    ``CombineParallelMatmul`` may join it with the region's matmuls in the whole model, which
    the region lowered alone does not show (then the whole model is listed)."""
    from tvm_pet.ir.ops import Op
    position = {id(n): k for k, n in enumerate(program.nodes)}
    inside = set(region.nodes)
    return any(c.op is Op.MATMUL and position[id(c)] not in inside
               for name in region.before.input_names for c in program.consumers.get(name, ()))


class _RegionTasks:
    """A program's kernels by structural hash, memoised by its structure: a region lowered on
    its own (None when it cannot be), or a whole program."""

    def __init__(self, target, rewrites: bool):
        self.target, self.rewrites, self.memo = target, rewrites, {}

    def __call__(self, program, whole: bool = False) -> dict | None:
        from tvm_pet.errors import PetError
        from tvm_pet.ir.keys import canonical
        from tvm_pet.relax.adapter import region_to_module
        from tvm_pet.contrib.cuda_offline.dry_run import cuda_module
        from tvm_pet.relax.rewrites import tvm_rewrites
        from tvm_pet.tune.compile import extract_tasks
        key = (whole, canonical(program)[0])
        if key not in self.memo:
            try:
                module = (cuda_module(program, rewrites=self.rewrites) if whole
                          else region_to_module(program))
            except PetError:  # a region whose opaque operator reads a value outside it
                self.memo[key] = None
                return None
            if self.rewrites and not whole:
                module = tvm_rewrites(module)
            self.memo[key] = {t.shash: t for t in extract_tasks(module, self.target)}
        return self.memo[key]


def kernel_times(paths: list[pathlib.Path]) -> dict[str, float]:
    """Each timed task's fastest schedule (seconds), from run_batch.py's ``times.json`` files."""
    best = {}
    for path in paths:
        for shash, times in json.loads(path.read_text())["tasks"].items():
            ran = [v for k, v in times.items() if k != "errors" and v]
            if ran:
                best[shash] = min(ran)
    return best


def gains_by_subprogram(model: pathlib.Path, target, times: dict[str, float],
                        rewrites: bool = True) -> tuple:
    """Each subprogram's best mutant by the GPU's kernel times: ``(program, base, picks)`` with
    ``base`` the original's estimated cost and ``picks`` one ``(gain, part, mutant, corrected)``
    per subprogram whose best mutant (corrected, in place) costs less than the original, the
    largest gain first.

    The cost of a program is the sum over its tasks of calls × the fastest measured schedule
    (``kernel_times``), and a mutant's gain the time of the kernels it takes out less that of
    those it brings (:func:`mutant_changes`, from its fusion region: the same as the original's
    cost less the mutant's in place). Kernels that were not tuned (pads, slices, layout copies)
    were not timed and count 0, so the estimate favours mutants that add them: it only
    proposes, and the GPU's end-to-end timing decides (run_cuda.py's rank rule). A mutant that
    brings a kernel that reduces (``reduces``) and has no time, and that the original does not
    have untimed too, is never proposed: it would run on TVM's default schedule, which the
    batch never measured (one such fused conv + pad does not even build on sm_90).
    """
    from tvm_pet.tune.compile import reduces

    program, changes = model_changes(model, target, rewrites)
    base, untimed = estimated_cost(program, target, times, rewrites)
    best = {}  # subprogram name -> (gain, part, mutant, corrected)
    seconds = lambda kernels: sum(n * times.get(str(t.shash), 0.0)  # noqa: E731
                                  for t, n in kernels)
    for name, part, mutant, corrected, lost, gained in changes:
        brings_untimed = any(str(t.shash) not in times and str(t.shash) not in untimed
                             and reduces(t) for t, _ in gained)
        gain = seconds(lost) - seconds(gained)
        if not brings_untimed and gain > 0 and (name not in best or gain > best[name][0]):
            best[name] = (gain, part, mutant, corrected)
    return program, base, sorted(best.values(), key=lambda p: -p[0])


def estimated_cost(program, target, times: dict[str, float], rewrites: bool = True) -> tuple:
    """``(seconds, untimed)``: a program's cost by the kernel times (calls × the fastest
    schedule; kernels not timed count 0) and the structural hashes of its kernels that reduce
    but have no time."""
    from tvm_pet.contrib.cuda_offline.dry_run import cuda_module
    from tvm_pet.tune.compile import extract_tasks, reduces
    tasks = extract_tasks(cuda_module(program, rewrites=rewrites), target)
    untimed = {str(t.shash) for t in tasks if str(t.shash) not in times and reduces(t)}
    return sum(t.weight * times.get(str(t.shash), 0.0) for t in tasks), untimed


def combined(stem: str, program, base: float, picks: list, say, timed=None):
    """PET's choice across subprograms: every pick of :func:`gains_by_subprogram` applied
    together, checked against the original with tvm_pet's interpreter. Returns (program,
    mutant ops) or ``None`` when fewer than two combine. With ``timed`` (a program -> bool), a
    pick whose kernels, beside those already applied, are not all timed is left out: two
    mutants next to each other may fuse into a kernel that neither has alone. ``timed`` is asked
    of all the picks together first (one lowering of the whole model), and pick by pick only when
    that fails (Inception-v3: 61 picks, about 12 s each)."""
    import numpy as np

    from tvm_pet.verify.interpreter import evaluate
    whole, applied = _join(program, picks)
    if timed is not None and not timed(whole):
        whole, applied = _join(program, picks, timed, lambda pick: say(
            f"{stem}: {' -> '.join(pick[2].ops)} left out of the combination: a kernel that "
            "reduces and was not timed"))
    picks = applied
    if len(picks) < 2:
        say(f"{stem}: {len(picks)} subprogram(s) gain by the kernel times and combine; "
            "no combination to add")
        return None
    rng = np.random.default_rng(0)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in program.inputs}
    want, got = evaluate(program, feeds), evaluate(whole, feeds)
    for name in program.outputs:
        scale = max(1.0, float(np.abs(want[name]).max()))
        if not np.allclose(got[name], want[name], rtol=1e-3, atol=1e-3 * scale):
            say(f"{stem}: the combination computes something else; left out")
            return None
    ops = tuple(" -> ".join(p[2].ops) for p in picks)
    say(f"{stem}: combination of {len(picks)} mutants, estimated "
        f"{_estimate(base, sum(p[0] for p in picks))} on the tuned kernels")
    return whole, ops


def _join(program, picks: list, timed=None, left_out=None) -> tuple:
    """``(program, picks applied)``: the picks in place together, each that fits (its part not
    interleaved with another's) and, with ``timed``, whose kernels beside those already applied
    are all timed (``left_out(pick)`` is told of each that is not)."""
    from tvm_pet.search.partition import replace_subprogram
    whole, used, applied = program, set(), []
    for pick in sorted(picks, key=lambda p: -min(p[1].nodes)):  # later parts first: the
        if used & set(pick[1].nodes):                            # earlier ones keep their
            continue                                             # node indices
        try:
            joined = replace_subprogram(whole, pick[1], pick[3])
        except ValueError:  # the parts of two subprograms interleave: leave this one out
            continue
        if timed is not None and not timed(joined):
            left_out(pick)
            continue
        whole = joined
        used |= set(pick[1].nodes)
        applied.append(pick)
    return whole, applied


def _estimate(base: float, saved: float) -> str:
    """The estimated speed-up in words; unbounded when every timed kernel is gone (what
    replaces them was not timed)."""
    left = base - saved
    return f"x{base / left:.3f}" if left > 0 else "unbounded (its kernels were not timed)"


def choices(model: pathlib.Path, target, args, say) -> tuple:
    """What the kernel times (``--combine``) propose for a model: ``(program, builds)`` with
    ``program`` the original and ``builds`` a list of ``(name, program, mutant ops)``: the
    combination, and with ``--singles K`` the K subprograms' best mutants that gain most, each
    alone in place."""
    from tvm_pet.search.partition import replace_subprogram
    times, rewrites = kernel_times(args.combine), not args.no_tvm_rewrites
    program, base, picks = gains_by_subprogram(model, target, times, rewrites)
    say(f"{model.stem}: {len(picks)} subprogram(s) gain by the kernel times")
    builds = []
    untimed = estimated_cost(program, target, times, rewrites)[1]
    found = combined(model.stem, program, base, picks, say, lambda whole: estimated_cost(
        whole, target, times, rewrites)[1] <= untimed)
    if found is not None:
        builds.append(("combined", found[0], found[1]))
    for i, (gain, part, mutant, corrected) in enumerate(picks[:args.singles]):
        say(f"{model.stem}: single{i} {' -> '.join(mutant.ops)}, estimated "
            f"{_estimate(base, gain)}")
        builds.append((f"single{i}", replace_subprogram(program, part, corrected),
                       (" -> ".join(mutant.ops),)))
    return program, builds


def add_choices(folder: pathlib.Path, model: pathlib.Path, target, args, say) -> None:
    """Add to a dry-run folder what the kernel times propose (:func:`choices`)."""
    from tvm_pet.tune.shipped import shipped_records_dir
    records = args.records or str(shipped_records_dir())
    for name, program, ops in choices(model, target, args, say)[1]:
        add_build(folder, name, program, ops, target, records, not args.no_tvm_rewrites)


def add_build(folder: pathlib.Path, name: str, program, ops: tuple, target, records,
              rewrites: bool = True) -> None:
    """Build one more program into a dry-run folder (weights as inputs) and list it."""
    from tvm_pet.contrib.cuda_offline.dry_run import _build_variant
    variant = _build_variant((name, "search", None, ops, True, program), target, records,
                             folder, "all", ("inputs", rewrites), print)
    if variant.error is not None:
        print(f"{folder.name}: {name} does not build: {variant.error}")
        return
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["variants"] = [v for v in manifest["variants"] if v["name"] != name] + [
        {"name": name, "kind": "search", "library": variant.library, "mutant": list(ops),
         "binaries": list(variant.binaries)}]
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--records", default=None,
                        help="records root (default: the shipped tvm_pet/tuning_logs)")
    parser.add_argument("--batch-trials", type=int, default=0)
    parser.add_argument("--shard", default="0/1")
    parser.add_argument("--no-e2e", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-mutants", type=int, default=None,
                        help="build at most this many mutants end to end (default: all)")
    parser.add_argument("--singles", type=int, default=0, metavar="K",
                        help="with --combine: also build the K best single mutants by the "
                        "kernel times (for whole models built with --max-mutants 0)")
    parser.add_argument("--no-tvm-rewrites", action="store_true",
                        help="build without TVM's graph rewrites (on both sides by default)")
    parser.add_argument("--suffix", default="", help="appended to each e2e folder's name")
    parser.add_argument("--combine", nargs="*", type=pathlib.Path, default=[],
                        metavar="TIMES", help="run_batch.py times: also build each model's "
                        "combination of the mutants that gain by them (see combined); with "
                        "--batch-trials, tune only the kernels of the originals and of those "
                        "choices (a longer tuning of what an earlier round chose)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")

    from tvm_pet.contrib.cuda_offline.dry_run import dry_run
    from tvm_pet.search.config import SearchConfig
    from tvm_pet.tune.compile import reduces
    from tvm_pet.tune.cuda import cuda_target
    from tvm_pet.contrib.cuda_offline.batch import prepare_batch
    target = cuda_target(args.arch)
    say = lambda line: print(line, flush=True)  # noqa: E731
    start = time.perf_counter()
    if not args.no_e2e:
        for model in args.models:
            folder = args.out / "e2e" / (model.stem + args.suffix)
            report = dry_run(model, folder, SearchConfig(time_limit=60),
                             arch=args.arch, records_dir=args.records, libraries="all",
                             weights="inputs", seed=args.seed, max_mutants=args.max_mutants,
                             rewrites=not args.no_tvm_rewrites)
            failed = [v.name for v in report.variants if v.error]
            say(f"{model.stem}: {len(report.variants)} builds ({len(failed)} failed: "
                f"{', '.join(failed) or '-'}), {report.records} records, "
                f"{report.seconds:.0f} s")
            if args.combine:
                add_choices(folder, model, target, args, say)
    if args.batch_trials:
        shard, shards = (int(x) for x in args.shard.split("/"))
        tasks = {}
        for model in args.models:
            programs = None
            if args.combine:  # a longer tuning of what an earlier round's times chose
                program, builds = choices(model, target, args, say)
                programs = [program] + [b[1] for b in builds]
            for task in tasks_of(model, target, say, not args.no_tvm_rewrites, programs):
                tasks.setdefault(task.shash, task)
        tuned = [t for t in tasks.values() if reduces(t)]
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
