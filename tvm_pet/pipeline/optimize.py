"""``tvm-pet optimize``: PET on a model, end to end, with a compiler toolchain (TVM).

Load, then five steps, one stage each (tuning every candidate is unaffordable on a CPU: 1-3
minutes per kernel at 64 trials):

0. **Load** the model through TVM's frontend, with TVM's graph rewrites, and lift it
   (:mod:`tvm_pet.pipeline.load`); every later stage lowers into that imported module, in the
   layout both sides are built in (by default the faster on the tuned original:
   :mod:`tvm_pet.pipeline.layout`);
1. **Tune the original** and 2. **screen cheaply, tune the promising few**
   (:mod:`tvm_pet.pipeline.tune`, choices in :mod:`tvm_pet.pipeline.plan`; only with
   ``trials > 0``, a ``budget``, or by default where a few kernels have no record anywhere:
   :func:`records_plan`);
3. **search with measured costs** (:mod:`tvm_pet.pipeline.search`);
4. **confirm end to end** and 5. **look again at close calls** (:mod:`tvm_pet.pipeline.confirm`),
   within what ``time_limit`` leaves (``DriverOptions.confirm_budget``: the limit covers the
   whole run);

then the report and the artifacts (:mod:`tvm_pet.pipeline.report`). The stages reach TVM only
through a :class:`~tvm_pet.pipeline.toolchain.Toolchain`, and share one generator cache
(:class:`~tvm_pet.search.mutant_cache.MutantCache`) made for the run.
"""
from __future__ import annotations

import dataclasses
import pathlib
import time

import numpy as np

from tvm_pet.cost.model import CostModel
from tvm_pet.errors import PetError, UnsupportedOperator
from tvm_pet.ir.node import Program
from tvm_pet.pipeline.confirm import confirm
from tvm_pet.pipeline.layout import InLayout, choose_layout
from tvm_pet.pipeline.load import LoadedModel, describe, load
from tvm_pet.pipeline.options import DriverOptions
from tvm_pet.pipeline.baseline import (BaselineLowering, align_baseline,
                                      check_against_import)
from tvm_pet.pipeline.progress import Progress
from tvm_pet.pipeline.report import RecordsCounts, Report, make_report, write_artifacts
from tvm_pet.pipeline.search import cost_model, search
from tvm_pet.pipeline.toolchain import Toolchain, tvm_toolchain
from tvm_pet.pipeline.tune import TuneSummary, tune_model
from tvm_pet.search.config import SearchConfig
from tvm_pet.search.mutant_cache import MutantCache
from tvm_pet.verify.limits import check_tensor_sizes


def optimize(model, out_dir, config: SearchConfig = SearchConfig(),
             options: DriverOptions = DriverOptions(), *, toolchain: Toolchain | None = None,
             cost: CostModel | None = None, tuning: TuneSummary | None = None) -> Report:
    """Optimize a model with PET for a target, confirm it end to end, write artifacts.

    Args:
        model: an ONNX file path or ``ModelProto``, a ``.pt2`` file (``torch.export.save``),
            a Relax ``IRModule``, or a :class:`~tvm_pet.pipeline.load.LoadedModel`.
        out_dir: where ``report.json``, ``optimized.so``, ``baseline.so``, ``optimized.onnx``
            and ``optimized.py`` go (created).
        config: the search's budgets (its time limit within ``options.time_limit``).
        options: target, tuning budget, timing, confirmation and time-limit options.
        toolchain: the compiler (default: TVM for ``options.target``); it lowers into the
            loaded model's module (``with_lowering``).
        cost: the search's cost model (default: chosen by ``options.cost``).
        tuning: the tune stage's summary when the caller ran it (default: run here when
            ``options.trials > 0`` or a ``budget``).

    Returns:
        The :class:`~tvm_pet.pipeline.report.Report` (``report.json`` is its ``to_json``).
    """
    start = time.perf_counter()
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if options.confirm < 1:
        raise PetError(f"confirm={options.confirm}: at least one candidate must be timed")
    progress = Progress(options.progress)
    chosen = _loaded_in_layout(model, options, toolchain, progress)
    loaded, toolchain, baseline = chosen.loaded, chosen.toolchain, chosen.baseline
    program = loaded.program
    options, plan, counts = records_plan(toolchain, program, options)
    progress.note(plan)  # before anything slow: which kernels are tuned, and what happens
    mutants = MutantCache()  # one generator cache for the run: tune and search share it
    tuned_here = tuning is None
    if tuned_here:  # 1-2. tune the original and the promising mutants
        tuning = (tune_model(program, config, options, toolchain, mutants, progress.note)
                  if options.tunes else TuneSummary(str(toolchain.records_dir)))

    def elapsed() -> float:  # the time limit does not cover tuning
        return (time.perf_counter() - start - chosen.choice.tuning_s
                - (tuning.tuning_time_s if tuned_here else 0.0))

    # 3. search with the measured (or analytic) cost, within the time limit
    config = dataclasses.replace(config, time_limit=options.search_limit(
        config.time_limit, elapsed()))
    limit = "none" if config.time_limit is None else f"{config.time_limit:.0f} s"
    with progress.step(f"searching (time limit {limit}, cost: {options.cost}{_offered(config)})"):
        found = search(program, config, cost or cost_model(options, toolchain), mutants,
                       options.confirm)
    progress.note(found.line())
    # 4-5. time the candidates end to end, with a second look at close calls
    inputs = loaded.random_inputs(options.seed)
    confirmation = confirm(program, found.candidates, toolchain, options, list(inputs.values()),
                           budget_s=options.confirm_budget(elapsed()),
                           progress=progress)
    # the report, and the artifacts that were checked
    facts = _checked_facts(toolchain, confirmation, baseline, list(inputs.values()), progress)
    searched = frozenset(s.subprogram for s in found.result.subsets)
    report = make_report(loaded, toolchain, tuning, found, confirmation, inputs, **facts,
                         total_time_s=time.perf_counter() - start,
                         records_plan=plan, records_counts=counts, layout=chosen.choice,
                         flops_coverage=toolchain.coverage(program, searched))
    final = confirmation.chosen.program if confirmation.keep else program
    with progress.step("writing the artifacts"):
        return write_artifacts(out, report, final, toolchain, list(inputs.values()))


def _loaded_in_layout(model, options: DriverOptions, toolchain: Toolchain | None,
                      progress: Progress) -> InLayout:
    """Step 0: the model loaded, its tensors' sizes checked, and lowered in the layout both
    sides are built in (:func:`~tvm_pet.pipeline.layout.choose_layout`)."""
    loaded = load_model(model, options, progress)
    check_tensor_sizes(loaded.program)
    chosen = choose_layout(loaded, options, toolchain, progress)
    progress.note(chosen.choice.line())
    return chosen


def _checked_facts(toolchain: Toolchain, confirmation, baseline: BaselineLowering | None,
                   inputs: list[np.ndarray], progress: Progress) -> dict:
    """The report's kernel counts (:func:`_kernel_counts`) and ``baseline_lowering``, checked
    against TVM's import where the original was lowered as its candidates are."""
    if baseline is not None:
        with progress.step("checking the original, as lowered, against TVM's import"):
            baseline = check_against_import(baseline, toolchain, confirmation.baseline.outputs,
                                            inputs)
    with progress.step("counting the kernels the records schedule"):
        return {**_kernel_counts(toolchain, confirmation), "baseline_lowering": baseline}


def _kernel_counts(toolchain: Toolchain, confirmation) -> dict:
    """``kernels`` and ``kept_kernels`` of the report: (kernels, kernels the records schedule) of
    the original as built, and of the kept candidate (None when the original is kept)."""
    return {"kernels": toolchain.kernel_records(confirmation.baseline.module),
            "kept_kernels": (toolchain.kernel_records(confirmation.optimized_module)
                             if confirmation.keep else None)}


def optimize_model(model, out_dir, config: SearchConfig = SearchConfig(),
                   options: DriverOptions = DriverOptions(), **stages) -> dict:
    """:func:`optimize`, returning ``report.json`` as a dict (``stages``: its keyword
    arguments)."""
    return optimize(model, out_dir, config, options, **stages).to_json()


def records_plan(toolchain: Toolchain, program: Program,
                 options: DriverOptions) -> tuple[DriverOptions, str, RecordsCounts]:
    """The records plan, stated before anything slow (its line, and its counts for the report),
    and the options it leads to: where no tuning was asked and some kernels have no record
    anywhere, they are tuned for this target at ``options.untuned_trials`` per kernel, up to
    ``options.untuned_cap`` kernels; with more, the whole model within
    ``options.untuned_minutes`` (:meth:`~tvm_pet.pipeline.options.DriverOptions.tuning_for`);
    with neither, the line says how to tune them."""
    found = toolchain.records_plan(toolchain.lower(program))
    chosen = options.tuning_for(found.untuned)
    too_many = (not options.tunes and options.untuned_trials > 0
                and found.untuned > options.untuned_cap)
    inside = chosen.budget is not None and chosen.charge == "inside"
    line = found.summary(chosen.trials, chosen.budget,
                         by_default=chosen.tunes and not options.tunes,
                         default_cap=options.untuned_cap if too_many else None,
                         inside_share=chosen.mutant_share if inside else None)
    return chosen, line, RecordsCounts.of(found)


def load_model(model, options: DriverOptions = DriverOptions(),
               progress: Progress = Progress()) -> LoadedModel:
    """Load a model as ``optimize``, ``tune`` and ``explore`` do: through TVM's frontend, with
    TVM's rewrites unless ``options.tvm_rewrites`` is off (:func:`~tvm_pet.pipeline.load.load`)."""
    with progress.step(f"importing {describe(model)} through TVM's frontend"):
        loaded = load(model, rewrites=options.tvm_rewrites,
                      layout="NCHW" if options.layout == "auto" else options.layout,
                      fast_math=options.fast_math, input_shapes=dict(options.input_shapes))
    progress.note(f"lifted {len(loaded.program.nodes)} operators "
                  f"({sum(n.op.value == 'Opaque' for n in loaded.program.nodes)} left opaque)")
    return loaded


def random_inputs(program: Program, seed: int) -> dict[str, np.ndarray]:
    """Standard normal float32 inputs for ``program``, by name, in its input order."""
    return LoadedModel.from_program(program).random_inputs(seed)


def base_toolchain(options: DriverOptions) -> Toolchain:
    """TVM's toolchain for the run's target, records, RPC, timing processes and prepacking."""
    return tvm_toolchain(options.target, options.records_dir, options.rpc,
                         timing_processes=options.timing_processes, prepack=options.prepack)


def toolchain_for(loaded: LoadedModel, options: DriverOptions, toolchain: Toolchain | None,
                  progress: Progress = Progress()
                  ) -> tuple[Toolchain, BaselineLowering | None]:
    """The toolchain (TVM's by default) lowering into the loaded model's module, checked on the
    original before any tuning or search; and, where the original is lowered as its candidates
    are (:func:`~tvm_pet.pipeline.baseline.align_baseline`), how."""
    toolchain = (toolchain or base_toolchain(options)).with_lowering(loaded.lower)
    try:
        toolchain.lower(loaded.program)
    except UnsupportedOperator as e:
        raise UnsupportedOperator(f"{loaded.source}: {e}") from None
    baseline = align_baseline(loaded, toolchain)
    if baseline is not None:
        progress.note(baseline.line())
    return toolchain, baseline


def _offered(config: SearchConfig) -> str:
    """What the search offers besides its own rewrites, as the progress line says it."""
    return ((", 3x3 convolutions by Winograd's F(4x4, 3x3) too" if config.winograd else "")
            + (", convolutions as a product over their windows too" if config.im2col else ""))
