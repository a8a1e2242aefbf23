"""``tvm-pet optimize MODEL --target cuda --dry-run``: the CUDA flow up to the first kernel run.

Where it sits: beside the driver's ``optimize_model``, for a machine without a GPU. It does every
stage that needs none and stops where a kernel must run:

1. import the model and check that tvm_pet can lower it;
2. plan: the records under ``tuning_logs/cuda-<arch>/`` (how many), and the tuning tasks of the
   original (what ``--trials N`` would tune on a GPU);
3. search with the analytic cost model (the measured one times untuned kernels on the GPU);
4. build for the target, with TVM's default GPU schedules (dlight) for kernels without records,
   after TVM's own graph rewrites (:func:`cuda_module`; on both sides, as on the CPU): the
   original, every verified mutant put in place with its corrections, and the search's best
   program and runners-up; nvcc compiles each build's device code for ``arch``
   (:func:`tvm_pet.tune.cuda.compile_device_code`);
5. write the artifacts for ``scripts/gpu/run_cuda.py``: ``builds/<name>.so`` (the original and
   the search's programs; every build with ``libraries="all"``),
   ``kernels/<sha256>.fatbin``, ``inputs.npz``, ``manifest.json``, and ``dry_run.json`` (this
   report), then say what would run on a GPU.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import time
import warnings

import numpy as np

from tvm_pet.errors import PetError, UnsupportedOperator
from tvm_pet.io import quiet_native_stderr
from tvm_pet.io import atomic_write
from tvm_pet.ir.node import Program
from tvm_pet.search.config import SearchConfig

#: Version of ``manifest.json``, read by ``scripts/gpu/run_cuda.py``.
MANIFEST_VERSION = 1


@dataclasses.dataclass(frozen=True, slots=True)
class BuiltVariant:
    """One program built for CUDA: what it is, its library and its device binaries."""
    name: str
    kind: str                   # "original", "mutant" (in place, corrected) or "search"
    subprogram: str | None
    mutant: tuple[str, ...]
    partially_equivalent: bool
    library: str                # relative to the output folder; "" when not exported
    kernels: int
    binaries: tuple[str, ...]   # SHA-256 keys of the CUDA sources, see tune/cuda.py
    binary_bytes: int
    records_applied: int
    build_s: float
    nvcc_s: float               # 0 for binaries compiled by an earlier run (same source)
    schedule_fallbacks: tuple[str, ...]  # dlight rules that raised on a kernel (tune/cuda.py)
    error: str | None = None    # why it does not build for the GPU (then nothing is written)


@dataclasses.dataclass(frozen=True, slots=True)
class DryRun:
    """What ``dry_run`` did, and what remains for a GPU."""
    model: str
    target: str
    arch: str
    records_dir: str
    records: int
    original_tasks: int
    search_cost_model: str
    search_stop: str
    variants: tuple[BuiltVariant, ...]
    mutants_listed: int
    mutants_built: int
    distinct_binaries: int
    seconds: float
    gpu_work: tuple[str, ...]
    tvm_rewrites: tuple[str, ...] = ()  # TVM's graph rewrites every build had (both sides)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _lowerable(program: Program) -> None:
    """Refuse a program too large to verify or one tvm_pet cannot emit in Relax."""
    from tvm_pet.relax.adapter import program_to_module
    from tvm_pet.verify.limits import check_tensor_sizes
    check_tensor_sizes(program)
    try:
        program_to_module(program)
    except UnsupportedOperator as e:
        raise UnsupportedOperator(f"{e}. The dry run rebuilds the whole model from tvm_pet's "
                                  f"own import, as tvm-pet optimize does") from None


def mutants_by_part(program: Program, config: SearchConfig, cost) -> list[tuple]:
    """Every verified mutant of every subset, corrected: (subprogram name, the subset's
    ``Subprogram``, mutant, corrected program), as ``tvm-pet tune`` lists them."""
    from tvm_pet.search.optimizer import Optimizer, operator_subsets
    from tvm_pet.search.partition import partition
    opt = Optimizer(config, cost)
    listed = []
    for sub in partition(program):
        for subset in operator_subsets(program, sub, config.max_subset):
            part, mutants = opt.mutants_of(program, subset, sub.name)
            listed += [(sub.name, part, m, c) for m, c in mutants]
    return listed


def _mutants_in_place(program: Program, config: SearchConfig, cost) -> list[tuple]:
    """Every verified mutant of every subset, corrected and put in place in the whole program:
    (subprogram name, mutant, whole program)."""
    from tvm_pet.search.partition import replace_subprogram
    return [(name, m, replace_subprogram(program, part, c))
            for name, part, m, c in mutants_by_part(program, config, cost)]


def dry_run(model, out_dir, config: SearchConfig = SearchConfig(), *, arch: str = "sm_90",
            records_dir: str | None = None, trials: int = 0, seed: int = 0,
            max_mutants: int | None = None, libraries: str = "search",
            weights: str = "embedded", rewrites: bool = True, progress=None) -> DryRun:
    """Run the CUDA flow without a GPU, up to the point where a kernel must run.

    Args:
        model: an ONNX model (path or ``ModelProto``).
        out_dir: the folder of the artifacts (created).
        config: the search budgets.
        arch: the CUDA architecture to build for (``sm_90``: H100 and H200).
        records_dir: the tuning records root (default ``tuning_logs/cuda-<arch>``).
        trials: the per-task tuning budget a GPU run would use (only reported here).
        seed: the seed of the random inputs written to ``inputs.npz``.
        max_mutants: build at most this many mutants (all when ``None``).
        libraries: ``"search"`` (default) exports ``builds/<name>.so`` for the original and the
            search's programs, ``"all"`` for every build (each holds the weights: 34 MB apiece
            for CSRNet's back end); nvcc compiles every build either way.
        weights: ``"embedded"`` (default): the weights are constants inside each library.
            ``"inputs"``: they are parameters, and each library has ``main_transform_params``
            (``relax.transform.LiftTransformParams``: what a mutant computes from the weights
            alone, e.g. concatenated or padded kernels), run once before ``main``. The
            libraries are then small, and ``manifest.json`` lists the weights' names and shapes
            (``params``) for the GPU machine to fill: every build reads the same weights, so the
            builds still compute the same function.
        rewrites: TVM's graph rewrites on every build, both sides alike (:func:`cuda_module`).
        progress: a callable taking one line of progress, or ``None``.

    Returns:
        The ``DryRun`` report, also written to ``<out_dir>/dry_run.json``.

    Raises:
        PetError: when nvcc is missing or rejects a kernel, or the model cannot be lowered.
    """
    from tvm_pet.cost.analytic import AnalyticCost
    from tvm_pet.onnx import import_model
    from tvm_pet.search.dispatch import run_search

    say = progress or (lambda line: None)
    start = time.perf_counter()
    out = _check_and_make_folders(out_dir, libraries, weights)
    program = import_model(model)
    _lowerable(program)
    target, records, n_records, tasks = _target_and_tasks(program, arch, records_dir, rewrites,
                                                          say)
    cost = AnalyticCost()
    result = run_search(program, config, cost)
    say(f"search (analytic cost): {len(result.applied)} mutants applied, stopped: "
        f"{result.stop.value}")
    listed = _mutants_in_place(program, config, cost)
    chosen = listed if max_mutants is None else listed[:max_mutants]
    variants = _build_all(_to_build(program, chosen, result), program, target, records, out,
                          libraries, (weights, rewrites), say)
    if variants[0].error is not None:
        raise PetError(f"the original model does not build for {arch}: {variants[0].error}")
    _write_inputs_and_manifest(out, model, program, arch, target, variants, seed, weights,
                               rewrites)
    distinct = len({key for v in variants for key in v.binaries})
    gpu_work = _gpu_work(len(tasks), trials, target, variants)
    report = DryRun(str(model), str(target), arch, str(records), n_records, len(tasks),
                    cost.name, result.stop.value, tuple(variants), len(listed), len(chosen),
                    distinct, time.perf_counter() - start, gpu_work,
                    _rewrites_run(rewrites))
    atomic_write(out / "dry_run.json", json.dumps(report.to_json(), indent=2) + "\n")
    return report


__all__ = ["BuiltVariant", "DryRun", "cuda_module", "dry_run", "MANIFEST_VERSION",
           "weights_as_inputs"]


def _target_and_tasks(program, arch: str, records_dir, rewrites: bool, say) -> tuple:
    """(the CUDA target, its records folder, how many records it holds, the original's tasks)."""
    from tvm_pet.tune.compile import extract_tasks
    from tvm_pet.tune.cuda import cuda_target
    from tvm_pet.tune.records import count_records, default_records_dir
    from tvm_pet.tune.targets import target_dir
    target = cuda_target(arch)
    records = records_dir or default_records_dir(target)
    n_records = count_records(records, target) if pathlib.Path(records).exists() else 0
    tasks = extract_tasks(cuda_module(program, rewrites=rewrites), target)
    say(f"target {target_dir(target)}: {n_records} tuning records in {records}, "
        f"{len(tasks)} tuning tasks in the original")
    return target, records, n_records, tasks


def _check_and_make_folders(out_dir, libraries: str, weights: str) -> pathlib.Path:
    """Refuse a bad ``libraries`` or ``weights`` or a machine without nvcc; create ``builds/``
    and ``kernels/``."""
    from tvm_pet.tune.cuda import nvcc_path
    if libraries not in ("search", "all"):
        raise PetError(f"libraries={libraries!r}: use 'search' or 'all'")
    if weights not in ("embedded", "inputs"):
        raise PetError(f"weights={weights!r}: use 'embedded' or 'inputs'")
    if nvcc_path() is None:
        raise PetError("the CUDA dry run compiles every kernel with nvcc, which is not on PATH")
    out = pathlib.Path(out_dir)
    for folder in ("builds", "kernels"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    return out


def _to_build(program, chosen, result) -> list[tuple]:
    """(name, kind, subprogram, mutant ops, partially equivalent?, program) of each build: the
    original, the chosen mutants in place, and the search's best and runners-up."""
    todo = [("original", "original", None, (), False, program)]
    todo += [(f"mutant{i}", "mutant", sub, tuple(m.ops), m.partially_equivalent, whole)
             for i, (sub, m, whole) in enumerate(chosen)]
    if result.applied:
        found = [("search_best", result)] + [(f"search_runner_up{i + 1}", c)
                                             for i, c in enumerate(result.runners_up)]
        todo += [(name, "search", None, tuple(" -> ".join(a.mutant_ops) for a in c.applied),
                  any(a.partially_equivalent for a in c.applied), c.program)
                 for name, c in found]
    return todo


def _rewrites_run(rewrites: bool) -> tuple[str, ...]:
    from tvm_pet.relax.rewrites import REWRITES
    return REWRITES if rewrites else ()


def cuda_module(program: Program, weights: str = "embedded", rewrites: bool = True):
    """The ``tvm.IRModule`` a CUDA build of ``program`` starts from: tvm_pet's lowering, then TVM's
    own graph rewrites (:func:`~tvm_pet.relax.rewrites.tvm_rewrites`: ``CombineParallelMatmul``
    and the others, the baseline the CPU flow also gives both sides) unless ``rewrites`` is off;
    with ``weights="inputs"``, as :func:`weights_as_inputs`. Tuning tasks are extracted from the
    same module, so that a combined matmul is a task of its own."""
    from tvm_pet.relax.adapter import program_to_module
    from tvm_pet.relax.rewrites import tvm_rewrites
    if weights == "inputs":
        return weights_as_inputs(program, rewrites)
    module = program_to_module(program)
    return tvm_rewrites(module) if rewrites else module


def _build_all(todo: list, program: Program, target, records: str, out: pathlib.Path,
               libraries: str, form: tuple[str, bool], say) -> list:
    """Each entry of :func:`_to_build` built (:func:`_build_variant`), or left out when its
    weights are inputs and not the original's (:func:`_not_built`)."""
    return [_build_variant(entry, target, records, out, libraries, form, say)
            if form[0] == "embedded" or _same_weights(program, entry[-1])
            else _not_built(entry, say) for entry in todo]


def _same_weights(a: Program, b: Program) -> bool:
    """Whether two programs read the same weights (names and shapes)."""
    return ({n: w.shape for n, w in a.weights.items()}
            == {n: w.shape for n, w in b.weights.items()})


def _not_built(entry: tuple, say) -> "BuiltVariant":
    """A build left out with the weights as inputs: the program reads other weights than the
    original (the search's post-optimizations fold a reshape into a new weight), and the GPU
    machine feeds every build the original's."""
    name, kind, sub, ops, partial, _ = entry
    why = ("its weights are not the original's (folded by the search's post-optimizations); "
           "with the weights as inputs every build must read the original's")
    say(f"left out {name}: {why}")
    return BuiltVariant(name, kind, sub, ops, partial, "", 0, (), 0, 0, 0.0, 0.0, (), why)


def weights_as_inputs(program: Program, rewrites: bool = False):
    """A module whose ``main`` takes the program's inputs, then its weights (sorted by name), with
    what it computes from the weights alone lifted into ``main_transform_params``; with
    ``rewrites``, TVM's graph rewrites run before the lifting (a combined matmul's concatenated
    weights are then lifted too).

    ``main`` then takes the inputs followed by the outputs of ``main_transform_params``.
    Returns a ``tvm.IRModule``.
    """
    from tvm import relax

    from tvm_pet.ir.node import TensorSpec
    from tvm_pet.relax.adapter import program_to_module
    from tvm_pet.relax.rewrites import tvm_rewrites
    names = sorted(program.weights)
    as_inputs = Program(tuple(program.inputs)
                        + tuple(TensorSpec(n, program.weights[n].shape) for n in names),
                        {}, program.nodes, program.outputs, program.name)
    module = program_to_module(as_inputs)
    module["main"] = module["main"].with_attr("num_input", len(program.inputs))
    if rewrites:
        module = tvm_rewrites(module)
    return relax.transform.LiftTransformParams()(module)


def _build_variant(entry: tuple, target, records: str, out: pathlib.Path, libraries: str,
                   form: tuple[str, bool], say) -> "BuiltVariant":
    """Build one program for the GPU, compile its device code with nvcc, export its library
    (for the original and the search's programs, or all with ``libraries="all"``). ``form``:
    ``(weights, rewrites)`` of :func:`cuda_module`."""
    from tvm_pet.tune.compile import apply_records, build_with_records
    from tvm_pet.tune.cuda import DefaultScheduleFallback, compile_device_code
    name, kind, sub, ops, partial, prog = entry
    t0 = time.perf_counter()
    module = cuda_module(prog, *form)
    _, applied = apply_records(module, target, records)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DefaultScheduleFallback)
        executable = build_with_records(module, target, records)
    fallbacks = tuple(str(w.message) for w in caught
                      if issubclass(w.category, DefaultScheduleFallback))
    what = f"{name} ({kind}{', ' + ' '.join(ops) if ops else ''})"
    try:
        binaries = compile_device_code(executable, target, out / "kernels")
    except PetError as err:  # counted and reported: this program cannot run on the GPU
        say(f"FAILED {what}: {err}")
        return BuiltVariant(name, kind, sub, ops, partial, "", 0, (), 0, applied,
                            time.perf_counter() - t0, 0.0, fallbacks, str(err))
    library = pathlib.Path("builds") / f"{name}.so"
    if libraries == "all" or kind != "mutant":
        with quiet_native_stderr():
            executable.export_library(str(out / library))
    else:
        library = None
    variant = BuiltVariant(name, kind, sub, ops, partial, str(library or ""),
                           sum(len(b.kernels) for b in binaries),
                           tuple(b.sha256 for b in binaries),
                           sum(b.binary_bytes for b in binaries), applied,
                           time.perf_counter() - t0, sum(b.nvcc_s for b in binaries), fallbacks)
    say(f"built {what}: {variant.kernels} kernels for {target.attrs['arch']}, "
        f"{variant.binary_bytes / 1024:.0f} KiB, {variant.build_s:.1f} s (nvcc "
        f"{variant.nvcc_s:.1f} s)"
        + (f"; {len(fallbacks)} dlight rule(s) raised, next rule used" if fallbacks else ""))
    return variant


def _write_inputs_and_manifest(out: pathlib.Path, model, program, arch: str, target,
                               variants: list, seed: int, weights: str,
                               rewrites: bool = True) -> None:
    """``inputs.npz`` (seeded) and ``manifest.json``: what the GPU machine runs and compares."""
    rng = np.random.default_rng(seed)
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in program.inputs}
    np.savez(out / "inputs.npz", **inputs)
    manifest = {"version": MANIFEST_VERSION, "model": str(model), "arch": arch,
                "target": str(target), "inputs": [t.name for t in program.inputs],
                "baseline": "original", "tvm_rewrites": list(_rewrites_run(rewrites)),
                "optimized": next((v.name for v in variants
                                   if v.kind == "search" and v.error is None), "original"),
                "variants": [{"name": v.name, "kind": v.kind, "library": v.library,
                              "mutant": list(v.mutant), "binaries": list(v.binaries)}
                             for v in variants if v.library]}
    if weights == "inputs":  # the GPU machine draws them (seeded), the same for every build
        manifest["params"] = [[n, list(program.weights[n].shape)] for n in sorted(program.weights)]
        manifest["param_seed"] = seed
        manifest["transform"] = "main_transform_params"
    atomic_write(out / "manifest.json", json.dumps(manifest, indent=2) + "\n")


def _gpu_work(tasks: int, trials: int, target, variants: list) -> tuple[str, ...]:
    """What a GPU would do from here, one line per step."""
    from tvm_pet.tune.targets import target_dir
    return (
        f"tune: {tasks} tasks of the original with --trials {trials or 'N'} per task (and "
        f"the promising mutants with the same budget), MetaSchedule measuring on the GPU, into "
        f"tuning_logs/{target_dir(target)}/ (needs full TVM there: scripts/gpu/pack.py --full)",
        "search with the measured cost: untuned kernels timed with dlight's schedule on the GPU",
        f"confirm end to end: time original vs the search's candidates interleaved on the GPU "
        f"(scripts/gpu/run_cuda.py times the "
        f"{sum(bool(v.library) for v in variants)} libraries written here)",
    )
