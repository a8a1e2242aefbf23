"""CPU weight prepacking: TVM's own, as ``relax.pipeline.static_shape_tuning_pipeline`` runs it
with ``cpu_weight_prepack=True``, here as a form of the prepared module.

Where it goes in the pipeline:

1. ``compile.prepare(mod, target, prepack=True)`` ends with ``AttachAttrLayoutFreeBuffers``
   (on an llvm target): each kernel's buffers fed by a Relax constant (the model's weights) get
   the PrimFunc attribute ``layout_free_buffers``, so MetaSchedule's ``RewriteLayout``
   postprocessor may give them a packed layout. Its kernels are tuning tasks of their own, other
   workloads than the plain form's (the attribute is part of the structural key): both forms'
   records live in the same target folder.
2. A prepacked kernel's tuned schedule reads its weight through a block annotated
   ``meta_schedule.layout_rewrite_preproc`` that packs it. After the records are applied,
   :func:`fold_packing` splits those blocks into PrimFuncs of their own
   (``SplitLayoutRewritePreproc``), and ``FoldConstant`` runs them on the constants at build
   time: the executable holds the packed weights, and ``main`` keeps the model's inputs.
   (TVM's pipeline runs ``LiftTransformParams`` between the two; it only acts on a ``main``
   with weights as parameters, ``num_input``, where it would change ``main``'s interface, and
   does nothing on the constants tvm_pet's modules hold: it is left out.)
3. A prepacked kernel without a record of its own form takes its *plain twin*'s records (the
   same PrimFunc without the attribute, :func:`plain_twin`): their trace replayed on it gives
   the plain form's schedule, unpacked, so today's records keep applying. Where it has both,
   whichever runs faster here is built (:func:`tvm_pet.tune.kernels.chosen_record`).

The kernel timing builds a prepacked schedule without its packing block
(``builder.fast_build``: the packing folds into constants at build time, so it costs nothing
per run); the record check runs it with the block, on the weights as the kernel takes them.
"""
from __future__ import annotations

import tvm
from tvm import relax

#: The PrimFunc attribute ``AttachAttrLayoutFreeBuffers`` sets: the indices of the parameters
#: fed by constants.
LAYOUT_FREE_ATTR = "layout_free_buffers"
#: Module attribute of a module ``compile.prepare`` prepared in the prepacked form.
PREPACKED_ATTR = "tvm_pet.prepacked"


def prepacks(target: tvm.target.Target, prepack: bool) -> bool:
    """Whether a build asked to ``prepack`` does so on ``target``: on CPU (llvm) targets only
    (``RewriteLayout`` is a CPU postprocessor; a GPU's schedules read the weights as they are)."""
    return bool(prepack) and target.kind.name == "llvm"


def is_prepacked(mod: tvm.IRModule) -> bool:
    """Whether a prepared module is in the prepacked form (its ``PREPACKED_ATTR``)."""
    return mod.attrs is not None and bool(mod.attrs.get(PREPACKED_ATTR, False))


def to_form(prepared: tvm.IRModule, prepack: bool) -> tvm.IRModule:
    """A prepared module in the asked form: plain made prepacked by ``AttachAttrLayoutFreeBuffers``
    (the last pass of the prepacked form's preparation), prepacked made plain by taking the
    attribute off every PrimFunc."""
    if is_prepacked(prepared) == prepack:
        return prepared
    if prepack:
        return relax.transform.AttachAttrLayoutFreeBuffers()(prepared).with_attr(
            PREPACKED_ATTR, True)
    functions = {gv: _without_layout_free(func) for gv, func in prepared.functions.items()}
    plain = tvm.IRModule(functions, attrs=prepared.attrs, global_infos=prepared.global_infos)
    return plain.without_attr(PREPACKED_ATTR)


def _without_layout_free(func):
    """A PrimFunc without ``LAYOUT_FREE_ATTR``; other functions as they are."""
    if isinstance(func, tvm.tirx.PrimFunc) and has_layout_free(func):
        return func.without_attr(LAYOUT_FREE_ATTR)
    return func


def has_layout_free(func) -> bool:
    """Whether a PrimFunc has layout-free buffers (``LAYOUT_FREE_ATTR``)."""
    return func.attrs is not None and LAYOUT_FREE_ATTR in func.attrs


def plain_twin(task_mod: tvm.IRModule) -> tvm.IRModule | None:
    """A prepacked task's plain twin: its ``main`` without ``LAYOUT_FREE_ATTR`` (the task as the
    plain form has it); None for a task without layout-free buffers."""
    main = task_mod["main"]
    if not has_layout_free(main):
        return None
    return tvm.IRModule({"main": main.without_attr(LAYOUT_FREE_ATTR)})


def as_task_form(workload_mod: tvm.IRModule, task_mod: tvm.IRModule) -> tvm.IRModule:
    """A record's workload module in the form of the task it is applied to: a plain twin's
    workload given the task's layout-free buffers (so that the build finds it for the prepacked
    task; its trace replays as it did), any other as it is. The record's own block names are
    kept (``record_check.scheduled`` says why)."""
    main = workload_mod["main"]
    if has_layout_free(main) or not has_layout_free(task_mod["main"]):
        return workload_mod
    return tvm.IRModule({"main": main.with_attr(LAYOUT_FREE_ATTR,
                                                task_mod["main"].attrs[LAYOUT_FREE_ATTR])})


def fold_packing(applied: tvm.IRModule) -> tvm.IRModule:
    """The prepacked module with its records applied, each weight packed once at build time:
    the packing blocks split into PrimFuncs (``SplitLayoutRewritePreproc``), folded into new
    constants (``FoldConstant``), and the PrimFuncs dropped (``DeadCodeElimination``). A plain
    module is returned as it is."""
    if not is_prepacked(applied):
        return applied
    return tvm.transform.Sequential([relax.transform.SplitLayoutRewritePreproc(),
                                     relax.transform.FoldConstant(),
                                     relax.transform.DeadCodeElimination()])(applied)
