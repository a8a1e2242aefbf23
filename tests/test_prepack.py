"""TVM's CPU weight prepacking as a form of the prepared module (tvm_pet.tune.prepack).

The prepacked form's kernels are workloads of their own (their weights marked layout-free); a
kernel without a record of its form takes its plain twin's, so the records tuned before keep
applying; a record of the prepacked form packs its weight, and the build folds the packing into
the constants, so ``main`` keeps the model's inputs. The records here are hand-made with
MetaSchedule's own ``RewriteLayout`` postprocessor (as a tuned candidate gets it), or the
shipped ones; the one test that tunes is marked ``tuning``.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from tests.records import TARGET, matmul_module, write_records
from tvm_pet.models import build_model
from tvm_pet.onnx import import_model
from tvm_pet.pipeline.optimize import random_inputs
from tvm_pet.pipeline.report import onnxruntime_outputs
from tvm_pet.pipeline.tvm_backend import TVMToolchain
from tvm_pet.relax.adapter import program_to_module
from tvm_pet.tune import dbfile, extract_tasks, kernel_times, prepare
from tvm_pet.tune.compile import Task, apply_records, build_applied
from tvm_pet.tune.kernels import chosen_record
from tvm_pet.tune.prepack import LAYOUT_FREE_ATTR, fold_packing, is_prepacked, plain_twin
from tvm_pet.tune.record_check import CHECKS_FILE, record_key, schedule_agrees
from tvm_pet.tune.records import (OpenRecords, RecordChecks, RecordSources, UntunedTimes,
                                  costing_sources, db_dir, record_sources)
from tvm_pet.tune.shipped import shipped_records_dir
from tvm_pet.tune.targets import target_dir

SHIPPED = shipped_records_dir()
WRONG = pathlib.Path(__file__).parent / "data" / "wrong_record"
#: matmul_module(8, 8, 8)'s weight.
WEIGHT = np.random.default_rng(8 * 1000 + 8 * 10 + 8).standard_normal((8, 8)).astype("float32")


def _rewrite_layout(schedule: tvm.s_tir.Schedule) -> None:
    """Pack the layout-free buffers as MetaSchedule's ``RewriteLayout`` does to a candidate."""
    assert ms.postproc.RewriteLayout().apply(schedule)


def _packed_schedule(task_mod: tvm.IRModule) -> tvm.s_tir.Schedule:
    """The prepacked 8x8x8 matmul with its output columns split by 4 and its weight packed to
    [2, 4, 8] (columns by 4, then rows): what a tuned record of it looks like."""
    schedule = tvm.s_tir.Schedule(task_mod)
    _, columns, _ = schedule.get_loops(schedule.get_sblock("matmul"))
    schedule.split(columns, [None, 4])
    _rewrite_layout(schedule)
    return schedule


def _packed_records(root: pathlib.Path, task_mod: tvm.IRModule) -> OpenRecords:
    """A records root whose one record is ``_packed_schedule``'s; opened without lenders."""
    directory = db_dir(root, TARGET)
    directory.mkdir(parents=True)
    db = ms.database.JSONDatabase(work_dir=str(directory), module_equality="structural")
    schedule = _packed_schedule(task_mod)
    db.commit_tuning_record(ms.database.TuningRecord(
        schedule.trace, db.commit_workload(task_mod), [1e-5], TARGET,
        ms.arg_info.ArgInfo.from_entry_func(schedule.mod, remove_preproc=True)))
    return RecordSources(directory).open()


def _constant_shapes(mod: tvm.IRModule) -> list[tuple[int, ...]]:
    """The shapes of the constants ``main`` holds."""
    shapes = []
    relax.analysis.post_order_visit(
        mod["main"], lambda e: shapes.append(tuple(int(d) for d in e.value.shape))
        if isinstance(e, tvm.ir.expr.GenericConst) else None)
    return shapes


def _shashes(mod: tvm.IRModule) -> list[int]:
    """The structural hashes of a module's tasks."""
    return [task.shash for task in extract_tasks(mod, TARGET)]


def _run(executable, *inputs: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()


# ------------------------------------------------------------------------------- the two forms

def test_the_prepacked_form_marks_the_weights_and_its_kernels_are_twins_of_the_plain_ones():
    mod = matmul_module(8, 8, 8)
    plain, packed = prepare(mod, TARGET), prepare(mod, TARGET, prepack=True)
    assert is_prepacked(packed) and not is_prepacked(plain)
    assert prepare(packed, TARGET) is packed and prepare(plain, TARGET) is plain  # idempotent
    for form, other in ((plain, packed), (packed, plain)):  # one form made from the other
        made = prepare(other, TARGET, prepack=is_prepacked(form))
        assert is_prepacked(made) == is_prepacked(form)
        assert _shashes(made) == _shashes(form)
    (task,), (plain_task,) = extract_tasks(mod, TARGET, prepack=True), extract_tasks(mod, TARGET)
    assert list(task.mod["main"].attrs[LAYOUT_FREE_ATTR]) == [1]  # the weight, not the input
    assert task.shash != plain_task.shash  # another workload
    assert tvm_ffi.structural_equal(plain_twin(task.mod), plain_task.mod)
    assert plain_twin(plain_task.mod) is None


def test_a_gpu_target_and_tvm_default_build_the_plain_form():
    assert not TVMToolchain("cuda", "records", run_here=False).prepack
    assert TVMToolchain("cuda", "records", run_here=False).build_name == "TVM default"
    cpu = TVMToolchain("llvm", "records")
    assert cpu.prepack and cpu.build_name == "TVM best: weights prepacked"
    default = TVMToolchain("llvm", "records", prepack=False)
    assert default.build_name == "TVM default"
    mod = matmul_module(8, 8, 8)
    assert tvm_ffi.structural_equal(default._apply(mod)[0], prepare(mod, TARGET))  # today's
    assert is_prepacked(cpu._apply(mod)[0])


# ------------------------------------------------------------------ today's records still apply

@pytest.mark.skipif(not dbfile.has_database(SHIPPED / target_dir(TARGET)),
                    reason=f"no shipped records for target {target_dir(TARGET)}")
@pytest.mark.parametrize("name", ["conv5x5", "csrnet_backend", "bert_encoder"])
def test_the_prepacked_build_applies_the_shipped_records_and_computes_the_same(name):
    """Every kernel the plain build schedules from the shipped records is scheduled in the
    prepacked build too (its plain twin's record), and the outputs are the plain build's and
    onnxruntime's."""
    model = build_model(name)
    program = import_model(model)
    mod = program_to_module(program)
    sources = costing_sources(SHIPPED, TARGET)
    inputs = list(random_inputs(program, 0).values())
    outputs, counts = {}, {}
    for prepack in (False, True):
        applied, counts[prepack] = apply_records(mod, TARGET, SHIPPED, sources=sources,
                                                 prepack=prepack)
        assert is_prepacked(applied) == prepack
        outputs[prepack] = _run(build_applied(applied, TARGET), *inputs)
    kernels = len(extract_tasks(mod, TARGET))
    assert counts[True] == counts[False] > 0
    if name != "bert_encoder":  # one of BERT's kernels has no shipped record
        assert counts[True] == kernels
    np.testing.assert_allclose(outputs[True], outputs[False], rtol=1e-5, atol=1e-5)
    (reference,) = onnxruntime_outputs(model, inputs)
    np.testing.assert_allclose(outputs[True], reference, rtol=1e-4, atol=1e-4)


def test_a_prepacked_kernel_is_costed_with_its_plain_twins_record_and_time(tmp_path):
    """With records of its plain form only, a prepacked kernel is costed with its twin's record,
    measured once for both forms."""
    mod = matmul_module(8, 8, 8)
    (plain_task,) = extract_tasks(mod, TARGET)
    write_records(db_dir(tmp_path, TARGET), [plain_task.mod], per_task=1, valid=True)
    opened, cache = RecordSources(db_dir(tmp_path, TARGET)).open(), UntunedTimes()
    plain = kernel_times(mod, TARGET, tmp_path, cache=cache, database=opened)
    packed = kernel_times(mod, TARGET, tmp_path, cache=cache, database=opened, prepack=True)
    assert [t.source for t in packed] == [t.source for t in plain] != ["untuned"]
    assert [t.seconds for t in packed] == [t.seconds for t in plain]  # measured once
    assert [t.shash for t in packed] != [t.shash for t in plain]


def test_an_untuned_prepacked_kernel_is_timed_as_its_plain_twin():
    """Unscheduled, the layout-free mark changes no code: one time serves both forms."""
    mod, calls, cache = matmul_module(8, 8, 8), [], UntunedTimes()

    def measure(task_mod, _target, repeat):
        calls.append(task_mod)
        return 1e-3

    times = [kernel_times(mod, TARGET, cache=cache, database=OpenRecords(None),
                          measure_untuned=measure, prepack=prepack) for prepack in (False, True)]
    assert len(calls) == 1 and LAYOUT_FREE_ATTR not in calls[0]["main"].attrs
    assert [(t.source, t.seconds) for t in times[1]] == [("untuned", 1e-3)]


@pytest.mark.parametrize("verdict", [True, False])
def test_the_verdict_on_a_plain_record_holds_for_its_twin(tmp_path, verdict):
    mod = matmul_module(8, 8, 8)
    (plain_task,) = extract_tasks(mod, TARGET)
    write_records(db_dir(tmp_path, TARGET), [plain_task.mod], per_task=1, valid=True)
    (record,) = ms.database.JSONDatabase(work_dir=str(db_dir(tmp_path, TARGET))
                                         ).get_all_tuning_records()
    checks = db_dir(tmp_path, TARGET) / CHECKS_FILE
    checks.write_text(json.dumps({record_key(plain_task.shash, record): verdict}))
    sources = (RecordSources(db_dir(tmp_path, TARGET)).open(), UntunedTimes())
    _, applied = apply_records(mod, TARGET, tmp_path, sources=sources, prepack=True)
    assert applied == int(verdict)
    assert json.loads(checks.read_text()) == {record_key(plain_task.shash, record): verdict}


# ------------------------------------------------------------- a record of the prepacked form

def test_a_prepacked_record_packs_the_weight_into_a_constant_and_computes_the_same(tmp_path):
    mod = matmul_module(8, 8, 8)
    (task,) = extract_tasks(mod, TARGET, prepack=True)
    opened = _packed_records(tmp_path, task.mod)
    sources = (opened, UntunedTimes())
    applied, count = apply_records(mod, TARGET, tmp_path, sources=sources, prepack=True)
    assert count == 1
    with TARGET:
        folded = fold_packing(applied)
    assert _constant_shapes(prepare(mod, TARGET, prepack=True)) == [(8, 8)]
    assert _constant_shapes(folded) == [(2, 4, 8)]  # packed once, at build time
    assert [p.name for p in folded["main"].params] == ["a"]  # the model's input
    assert not any(gv.name_hint.endswith("_weight_prepack") for gv in folded.functions)
    # the plain form has no record: the prepacked form's are its own workloads
    assert apply_records(mod, TARGET, tmp_path, sources=sources)[1] == 0
    x = np.random.default_rng(1).standard_normal((8, 8)).astype("float32")
    executable = build_applied(applied, TARGET)
    np.testing.assert_allclose(_run(executable, x), x @ WEIGHT, rtol=1e-5, atol=1e-5)
    executable.export_library(str(tmp_path / "packed.so"))  # as optimize writes optimized.so
    loaded = tvm.runtime.load_module(str(tmp_path / "packed.so"))
    np.testing.assert_allclose(_run(loaded, x), x @ WEIGHT, rtol=1e-5, atol=1e-5)
    # timed as it runs in the build: without its packing block, on packed weights
    (time,) = kernel_times(mod, TARGET, tmp_path, cache=UntunedTimes(), database=opened,
                           prepack=True)
    assert time.source == "tuned" and time.seconds > 0


def test_with_both_forms_the_faster_record_here_is_built(tmp_path):
    """A prepacked kernel with a record of its own form and its twin's is built with the one
    that runs faster here, each timed once (the twin's as the plain kernel)."""
    mod = matmul_module(8, 8, 8)
    (task,), (plain_task,) = extract_tasks(mod, TARGET, prepack=True), extract_tasks(mod, TARGET)
    _packed_records(tmp_path, task.mod)
    write_records(db_dir(tmp_path, TARGET), [plain_task.mod], per_task=1, valid=True)
    opened = RecordSources(db_dir(tmp_path, TARGET)).open()
    for packed_s, takes_packed in ((1e-6, True), (3e-6, False)):
        calls = []

        def measure(task_mod, _target, repeat):
            is_packed = "meta_schedule.layout_rewrite_preproc" in task_mod.script()
            calls.append(is_packed)
            return packed_s if is_packed else 2e-6

        record, lender = chosen_record(opened, task, TARGET, UntunedTimes(),
                                       measure_untuned=measure)
        assert lender is None and sorted(calls) == [False, True]
        assert (LAYOUT_FREE_ATTR in record.workload.mod["main"].attrs) == takes_packed


def test_the_record_check_runs_a_packed_schedule_on_the_weights_as_the_kernel_takes_them():
    (task,) = extract_tasks(matmul_module(8, 8, 8), TARGET, prepack=True)
    assert schedule_agrees(task.mod, _packed_schedule(task.mod).mod, TARGET)
    # the schedule that leaves CSRNet's padded output unwritten, with its weights packed
    db = ms.database.JSONDatabase(work_dir=str(WRONG), module_equality="structural")
    (record,) = db.get_all_tuning_records()
    packed_task = tvm.IRModule({"main": record.workload.mod["main"].with_attr(
        LAYOUT_FREE_ATTR, [1, 2])})  # its conv weight and bias
    wrong = tvm.s_tir.Schedule(packed_task)
    record.trace.apply_to_schedule(wrong, remove_postproc=False)
    _rewrite_layout(wrong)
    assert "meta_schedule.layout_rewrite_preproc" in wrong.mod.script()
    assert not schedule_agrees(packed_task, wrong.mod, TARGET)
    # nor is the plain record taken for its prepacked twin
    twin_task = Task("wrong", 1, packed_task, int(tvm_ffi.structural_hash(packed_task)))
    opened = OpenRecords(db, checks=RecordChecks())
    assert chosen_record(opened, twin_task, TARGET, UntunedTimes()) == (None, None)
    assert opened.checks.known_wrong(tvm_ffi.structural_hash(record.workload.mod), record)


@pytest.mark.tuning
def test_a_record_tuned_in_the_prepacked_form_is_applied_and_packs_its_weight(tmp_path):
    """Tuned for real at a few trials: MetaSchedule's candidates of a prepacked conv pack its
    weight, and the kernel built from its record computes what the plain one does."""
    from tvm_pet.tune import build_with_records, tune
    mod = program_to_module(import_model(build_model("conv5x5")))
    stats = tune(mod, TARGET, 4, tmp_path, prepack=True)
    assert stats.new_trials == 4
    sources = (RecordSources(db_dir(tmp_path, TARGET)).open(), UntunedTimes())  # no lenders
    applied, count = apply_records(mod, TARGET, tmp_path, sources=sources, prepack=True)
    assert count == 1
    (func,) = [f for _, f in applied.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert "meta_schedule.layout_rewrite_preproc" in func.script()
    with TARGET:
        assert len(_constant_shapes(fold_packing(applied))[0]) > 4  # [64, 48, 5, 5] packed
    x = np.random.default_rng(0).standard_normal((1, 48, 38, 38)).astype("float32")
    np.testing.assert_allclose(_run(build_applied(applied, TARGET), x),
                               _run(build_with_records(mod, TARGET), x), rtol=1e-4, atol=1e-4)


def test_a_module_built_again_from_the_same_records_is_compiled_once(tmp_path):
    """The original, built to choose the layout and again to confirm, is compiled once; a
    module of other content, or records opened again after tuning added some, builds anew."""
    toolchain = TVMToolchain(TARGET, records_dir=str(tmp_path))
    first = toolchain.build(matmul_module(8, 8, 8))
    assert toolchain.build(matmul_module(8, 8, 8)) is first  # equal content, same records
    other = toolchain.build(matmul_module(8, 8, 16))
    assert other is not first and toolchain.build(matmul_module(8, 8, 8)) is first
    x = np.ones((8, 8), "float32")
    np.testing.assert_array_equal(toolchain.run(first, [x])[0],
                                  toolchain.run(toolchain.with_lowering(None).build(
                                      matmul_module(8, 8, 8)), [x])[0])


@pytest.mark.tuning
def test_a_module_is_built_anew_once_tuning_added_records(tmp_path):
    toolchain = TVMToolchain(TARGET, records_dir=str(tmp_path))
    mod = matmul_module(8, 8, 8)
    first = toolchain.build(mod)
    assert toolchain.tune(mod, 2, seed=0).new_trials > 0
    assert toolchain.build(mod) is not first
