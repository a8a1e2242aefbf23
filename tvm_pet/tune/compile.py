"""The compile pipeline: prepare a Relax module, list its tuning tasks, apply records, build.

Inputs are Relax IRModules with a ``main`` function, static shapes and the weights as constants.

The one rule that makes tuning records reusable: tasks are always taken from ``prepare(mod)``, the
fused form the final build compiles, both when tuning (:func:`tvm_pet.tune.tuner.tune`) and when
applying the records (:func:`build_with_records`). MetaSchedule keys a task by the structural hash
of its PrimFunc, attributes included, so tuning one pipeline stage and applying at another
silently finds nothing. The prepared form comes plain or prepacked (``prepare(..., prepack=True)``:
TVM's CPU weight prepacking, :mod:`tvm_pet.tune.prepack`); a build asked for one form tunes,
costs and applies that form's tasks, a prepacked task taking its plain twin's records too.

Typical use::

    target = resolve_target("llvm")
    fast = build_with_records(mod, target, records_dir="tuning_logs")   # applies the records
    slow = build_with_records(mod, target)                              # untuned
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import tvm
import tvm_ffi
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from tvm_pet.errors import PetError
from tvm_pet.tune import cuda, records
from tvm_pet.tune import prepack as packing
from tvm_pet.tune.targets import resolve_target

#: Module attribute that marks the output of ``prepare`` (so that ``prepare`` is idempotent).
PREPARED_ATTR = "tvm_pet.prepared"


@dataclass(frozen=True, slots=True)
class Task:
    """One distinct tuning task: a fused PrimFunc (as MetaSchedule's ``main``) and its weight."""
    name: str
    weight: int
    mod: tvm.IRModule = field(repr=False)
    shash: int



def reduces(task: Task) -> bool:
    """Whether a task's kernel reduces (a conv, a matmul, a pool): the kernels worth tuning.
    The others (pads, slices, layout copies, elementwise) have a search space of a schedule or
    few: MetaSchedule exhausts a pad's at one trial."""
    text = task.mod["main"].script()
    return "T.axis.reduce" in text or bool(re.search(r'T\.axis\.remap\("[SR]*R', text))

def prepare(mod: tvm.IRModule, target=None, prepack: bool | None = None) -> tvm.IRModule:
    """Return the canonical pre-tuning form of a Relax module: legalised, folded and fused.

    Runs the target's library dispatch, ``DecomposeOpsForInference`` (inference batch-norm),
    ``CanonicalizeBindings``, then the CPU/GPU default pipeline's legalisation stage
    (``LegalizeOps``, ``AnnotateTIROpPattern``, ``FoldConstant``, ``FuseOps``, ``FuseTIR``) and
    ``DeadCodeElimination``. The result is what ``relax.get_default_pipeline(target)`` compiles,
    before any schedule; tune and build both start from it. In the prepacked form (``prepack``
    on an llvm target) ``AttachAttrLayoutFreeBuffers`` ends it: the kernels' weights may take a
    packed layout (:mod:`tvm_pet.tune.prepack`). Already prepared modules are returned in the
    asked form.

    Args:
        mod: a Relax module with a ``main`` function.
        target: a target or spec for ``resolve_target`` (legalisation may depend on it).
        prepack: the prepacked form (True), the plain one (False), or, for None, a prepared
            module's own form and the plain form for any other.

    Returns:
        The prepared module, marked with the ``PREPARED_ATTR`` module attribute (and
        ``prepack.PREPACKED_ATTR`` in the prepacked form).
    """
    target = resolve_target(target)
    if mod.attrs is not None and PREPARED_ATTR in mod.attrs:
        if prepack is None:
            return mod
        with target:
            return packing.to_form(mod, packing.prepacks(target, prepack))
    _check_main(mod)
    passes = [
        *relax.pipeline.library_dispatch_passes(target),
        relax.transform.DecomposeOpsForInference(),
        relax.transform.CanonicalizeBindings(),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(),
    ]
    with target, tvm.transform.PassContext(opt_level=3):
        prepared = tvm.transform.Sequential(passes)(mod).with_attr(PREPARED_ATTR, True)
        return packing.to_form(prepared, packing.prepacks(target, bool(prepack)))


def extract_tasks(mod: tvm.IRModule, target=None, prepack: bool | None = None) -> list[Task]:
    """Return the distinct tuning tasks of a module, from its prepared form.

    Args:
        mod: a Relax module (prepared or not).
        target: a target or spec.
        prepack: the form, as :func:`prepare` takes it.

    Returns:
        One ``Task`` per structurally distinct kernel; ``weight`` counts its calls. Kernels that are
        already scheduled (``tirx.is_scheduled``) are not tasks.
    """
    target = resolve_target(target)
    extracted = ms.relax_integration.extract_tasks(prepare(mod, target, prepack), target,
                                                   module_equality=records.MODULE_EQUALITY)
    tasks = []
    for ext in extracted:
        task_mod = ext.dispatched[0]
        if task_mod["main"].attrs is not None and task_mod["main"].attrs.get("tirx.is_scheduled"):
            continue
        tasks.append(Task(str(ext.task_name), int(ext.weight), task_mod,
                          int(tvm_ffi.structural_hash(task_mod))))
    return tasks


def apply_records(mod: tvm.IRModule, target=None, records_dir: str | Path | None = None, *,
                  sources: tuple | None = None, prepack: bool | None = None
                  ) -> tuple[tvm.IRModule, int]:
    """Return the prepared module with the records' schedules applied, and how many applied.

    A kernel takes the target's own record, or a compatible target's where it has none
    (``records.record_sources``), compiled for this target; where it has both, whichever runs
    faster here (``kernels.chosen_record``: timed once, cached). It is its fastest record that
    computes what the kernel does (:mod:`tvm_pet.tune.record_check`: checked once per record on
    an llvm target, the verdict cached); a kernel none of whose records agree is built untuned.
    In the prepacked form a kernel's records are those of its form and those of its plain twin
    (:mod:`tvm_pet.tune.prepack`), the faster here taken.

    Args:
        mod: a Relax module.
        target: a target or spec.
        records_dir: the records root, or ``None`` for no records.
        sources: ``records.costing_sources(records_dir, target)``, opened already (a caller
            building many modules opens the records once: loading them takes seconds).
        prepack: the form, as :func:`prepare` takes it.

    Returns:
        (module, number of PrimFuncs scheduled from the records).
    """
    target = resolve_target(target)
    prepared = prepare(mod, target, prepack)
    opened, cache = sources or records.costing_sources(records_dir, target)
    if opened is None:
        return prepared, 0
    before = _scheduled_count(prepared)
    database = checked_database(prepared, target, opened, cache)
    with target, database, tvm.transform.PassContext(opt_level=3):
        applied = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(prepared)
    return applied, _scheduled_count(applied) - before


def checked_database(mod: tvm.IRModule, target, opened: records.OpenRecords,
                     cache: records.UntunedTimes | None = None) -> ms.database.Database:
    """A database holding, for each task of ``mod``, its fastest record that computes what the
    task's kernel does, own or borrowed (where it has both, the faster here:
    ``kernels.chosen_record``, its times cached in ``cache``, in memory when ``None``); tasks
    with no such record are left out (untuned).

    Each record is committed with its own workload module: structurally equal to the task's, so
    the build finds it, and named as the record's trace names its blocks (another model's kernel
    can be the same one under other block names: ``record_check.scheduled``); a plain twin's
    given the task's layout-free buffers (``prepack.as_task_form``)."""
    from tvm_pet.tune.kernels import chosen_record  # kernels builds on this module
    cache = records.UntunedTimes(None) if cache is None else cache
    database = ms.database.MemoryDatabase(module_equality=records.MODULE_EQUALITY)
    for task in extract_tasks(mod, target):
        record, _ = chosen_record(opened, task, target, cache)
        if record is not None:
            workload = database.commit_workload(packing.as_task_form(record.workload.mod,
                                                                     task.mod))
            database.commit_tuning_record(ms.database.TuningRecord(
                record.trace, workload, record.run_secs, target, record.args_info))
    return database


def build_with_records(mod: tvm.IRModule, target=None, records_dir: str | Path | None = None, *,
                       sources: tuple | None = None, prepack: bool | None = None):
    """Compile a Relax module for the target, with the tuned schedules when records exist.

    The module is prepared, the records applied (``apply_records``), and the rest of the target's
    default pipeline runs (:func:`build_applied`): in the prepacked form the weights packed into
    new constants, on GPUs dlight's default schedules for untuned kernels, then dataflow
    lowering and finalisation. Untuned CPU kernels stay naive loop nests.

    Args:
        mod: a Relax module.
        target: a target or spec.
        records_dir: the records root, or ``None`` to build untuned.
        sources: the records, opened already (as :func:`apply_records` takes them).
        prepack: the form, as :func:`prepare` takes it.

    Returns:
        A ``relax.VMExecutable``; run it with ``relax.VirtualMachine(ex, device)``; its ``main``
        takes the module's inputs, in either form.
    """
    target = resolve_target(target)
    applied, _ = apply_records(mod, target, records_dir, sources=sources, prepack=prepack)
    return build_applied(applied, target)


def build_applied(applied: tvm.IRModule, target=None):
    """Compile a module :func:`apply_records` returned: the rest of the target's default
    pipeline, as :func:`build_with_records` runs it; a prepacked module's weights packed first,
    at build time (:func:`tvm_pet.tune.prepack.fold_packing`)."""
    target = resolve_target(target)
    with target, tvm.transform.PassContext(opt_level=3):
        applied = packing.fold_packing(applied)
    backend = _backend_pipeline(target)
    already_run = {"LegalizeOps", "AnnotateTIROpPattern", "FoldConstant", "FuseOps", "FuseTIR"}
    rest = [p for p in backend.legalize_passes(target) if p.info.name not in already_run]
    rest += backend.dataflow_lower_passes(target) + backend.finalize_passes(target)
    rest = cuda.with_default_schedule(rest, target)  # dlight, surviving a rule that raises
    with tvm.transform.PassContext(opt_level=3):
        return tvm.compile(applied, target=target, relax_pipeline=tvm.transform.Sequential(rest))


def _backend_pipeline(target):
    """Return the module of the target's default Relax pipeline stages.

    ``relax.pipeline.dataflow_lower_passes`` cannot be used: it calls
    ``backend.<name>.dataflow_lower_passes``, which the backends' ``__init__`` do not export in
    TVM 0.27 (AttributeError), so the stage functions are taken from the pipeline module itself.
    """
    name = {"llvm": "cpu_generic", "cuda": "cuda"}.get(target.kind.name, "gpu_generic")
    return importlib.import_module(f"tvm.relax.backend.{name}.pipeline")


def _scheduled_count(mod: tvm.IRModule) -> int:
    """Return how many PrimFuncs in ``mod`` are marked ``tirx.is_scheduled``."""
    return sum(1 for _, func in mod.functions.items()
               if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None
               and bool(func.attrs.get("tirx.is_scheduled", False)))


def _check_main(mod: tvm.IRModule) -> None:
    """Raise ``PetError`` unless ``mod`` has a Relax ``main`` function."""
    names = [gv.name_hint for gv in mod.functions]
    if "main" not in names or not isinstance(mod["main"], relax.Function):
        raise PetError(f"the module has no Relax 'main' function (it has {names}); "
                       "build it with relax.BlockBuilder and bb.function('main', ...)")
