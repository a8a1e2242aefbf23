"""``relax.get_pipeline("pet_tuning", ...)``: PET inside TVM's tuning pipeline.

TVM's ``relax.pipeline.static_shape_tuning_pipeline(total_trials, target, work_dir,
cpu_weight_prepack, max_trials_per_task)`` tunes a module's kernels into ``work_dir``, applies the
records, and leaves the module for ``tvm.compile(mod, target)``. This pipeline takes the same
arguments and does the same with PET: ``tvm-pet optimize``'s stages
(:func:`tvm_pet.pipeline.optimize.optimize`) tune the original's kernels and PET's most
promising verified rewrites into ``work_dir``, search the model with measured costs, time the
best candidates against the original end to end, and keep the faster; the module it returns is
the kept program with its records applied, and, where the weights are prepacked, packed into
constants (``main`` keeps the module's inputs)::

    import tvm_pet
    mod = tvm_pet.tuning_pipeline(total_trials=2000, target=target, work_dir="tuning_logs",
                                  max_trials_per_task=64)(mod)
    ex = tvm.compile(mod, target)

Where it goes: on a Relax module with static shapes and the weights as constants (as the ONNX
and ``torch.export`` frontends give with ``keep_params_as_input=False``), before
``tvm.compile``. The CLI and this pipeline are one implementation seen from two doors;
``report.json`` and the artifacts of the run go to ``work_dir/pet``.
"""
from __future__ import annotations

from pathlib import Path

import tvm
from tvm import relax

from tvm_pet.search.config import SearchConfig

#: The pipeline's name for ``relax.get_pipeline``.
NAME = "pet_tuning"


def tuning_pipeline(total_trials: int, target, work_dir: str = "tuning_logs",
                    cpu_weight_prepack: bool = True, max_trials_per_task: int | None = None,
                    config: SearchConfig | None = None, time_limit: float | None = None,
                    **more) -> tvm.transform.Pass:
    """PET with measured costs and MetaSchedule tuning, as a Relax pass.

    Args:
        total_trials: with ``max_trials_per_task`` unset, the trials the original's kernels
            share through MetaSchedule's task scheduler (as ``tvm-pet optimize --budget``); PET's
            tuned rewrites then get the trials per task the original got.
        target: the TVM target (a CPU's ``llvm`` target, or ``cuda``).
        work_dir: the tuning records folder for this target, read and added to (a rerun tunes
            nothing new); the run's ``report.json`` and artifacts go to ``work_dir/pet``.
        cpu_weight_prepack: on a CPU, both sides' weights packed into the layouts the tuned
            kernels read (TVM's best build); off, TVM's default build.
        max_trials_per_task: where set, every kernel (the original's and PET's tuned rewrites')
            is tuned to this many trials (as ``tvm-pet optimize --trials``), and
            ``total_trials`` is not used.
        config: the search's budgets (default :class:`SearchConfig`).
        time_limit: seconds for the search and the end-to-end timing, tuning not counted
            (default: no limit).
        **more: any other field of :class:`~tvm_pet.pipeline.options.DriverOptions`, e.g.
            ``timing_processes=1`` or ``seed=1``.

    Returns:
        A module pass; ``tvm.compile`` of its result builds the kept program.
    """
    from tvm_pet.pipeline.options import DriverOptions, WholeBudget

    per_task = max_trials_per_task is not None
    options = DriverOptions(
        target=str(target), records_dir=str(work_dir), prepack=cpu_weight_prepack,
        trials=max_trials_per_task if per_task else 0,
        budget=None if per_task else WholeBudget(trials=int(total_trials)),
        time_limit=time_limit, **more)

    @tvm.transform.module_pass(opt_level=0, name="PetTuning")
    def _pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return tuned_pet(mod, options, config or SearchConfig(), Path(work_dir) / "pet")

    return _pipeline


def tuned_pet(mod: tvm.IRModule, options, config: SearchConfig, out_dir: Path) -> tvm.IRModule:
    """``mod`` through ``tvm-pet optimize``'s stages with ``options``: the kept program (PET's or
    the original), its records applied, as ``tvm.compile`` takes it."""
    from tvm_pet.pipeline.optimize import optimize
    from tvm_pet.pipeline.toolchain import tvm_toolchain

    report = optimize(mod, out_dir, config, options)
    confirmation = report.confirmation
    kept = confirmation.optimized_module if confirmation.keep else confirmation.baseline.module
    toolchain = tvm_toolchain(options.target, options.records_dir, prepack=options.prepack)
    return toolchain.compiled_form(kept)


def register() -> None:
    """Register ``"pet_tuning"`` with ``relax.get_pipeline`` (once; later calls do nothing).
    Importing :mod:`tvm_pet.relax` calls it."""
    if NAME not in relax.pipeline.PIPELINE_MAP:
        relax.register_pipeline(NAME)(tuning_pipeline)
