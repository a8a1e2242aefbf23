"""A kernel with a record of its own target and one borrowed from a compatible target is built
and costed with whichever runs faster here (tvm_pet.tune.kernels.chosen_record).

Under the Haswell target, Haswell records tuned at 32 trials per kernel ran ×0.75 of the borrowed
Skylake-AVX512 ones on conv5x5 and ×3.78 on the CSRNet back end: neither source is always the
faster. The times here are chosen by a stand-in for the measurement; the records are real
schedules (a split loop in the borrowed one), so the build can be checked to use the chosen one.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from tests.records import TARGET, matmul_module, write_records
from tvm_pet.tune import build_with_records, extract_tasks
from tvm_pet.tune.compile import checked_database
from tvm_pet.tune.kernels import chosen_record, task_times
from tvm_pet.tune.record_check import scheduled
from tvm_pet.tune.records import RecordSources, UntunedTimes, db_dir
from tvm_pet.tune.targets import target_dir


def _lender_key() -> str:
    """A records folder compatible with this host's target: the same CPU level, more cores."""
    return re.sub(r"-c(\d+)$", lambda m: f"-c{int(m[1]) + 2}", target_dir(TARGET))


def _split_record_dir(directory, task_mod, secs: float) -> None:
    """One record whose schedule splits the matmul's first loop by 4 (it computes the same)."""
    directory.mkdir(parents=True)
    db = ms.database.JSONDatabase(work_dir=str(directory), module_equality="structural")
    schedule = tvm.s_tir.Schedule(task_mod)
    schedule.split(schedule.get_loops(schedule.get_sblock("matmul"))[0], [None, 4])
    db.commit_tuning_record(ms.database.TuningRecord(
        schedule.trace, db.commit_workload(task_mod), [secs], TARGET,
        ms.arg_info.ArgInfo.from_prim_func(task_mod["main"])))


@pytest.fixture
def both(tmp_path):
    """A records root where the one task of an 8x8x8 matmul has an own record (an unchanged
    schedule, 1 ms recorded) and a borrowed one (a split loop, 2 ms recorded on its CPU)."""
    mod = matmul_module(8, 8, 8)
    (task,) = extract_tasks(mod, TARGET)
    write_records(db_dir(tmp_path, TARGET), [task.mod], per_task=1, valid=True)
    _split_record_dir(tmp_path / _lender_key(), task.mod, 2e-3)
    opened = RecordSources(db_dir(tmp_path, TARGET), (tmp_path / _lender_key(),)).open()
    found = opened.checked_by_source(task.mod, task.shash, TARGET)
    own, lent = found.get(None), found.get(_lender_key())
    assert own is not None and lent is not None
    return mod, task, opened, own, lent, tmp_path


def _measure(lent, own_s: float, lent_s: float, calls: list):
    """Stands in for the kernel measurement: ``lent_s`` for the borrowed record's schedule,
    ``own_s`` for anything else."""
    lent_mod = scheduled(lent)

    def measure(task_mod, _target, repeat):
        is_lent = tvm_ffi.structural_equal(task_mod, lent_mod)
        calls.append("lent" if is_lent else "own")
        return lent_s if is_lent else own_s

    return measure


# the own times stay within twice the own record's 1 ms: a slower one is measured again
# (kernels.suspect)
@pytest.mark.parametrize("own_s, lent_s, takes_lent", [(1.5e-3, 1e-3, True), (1e-3, 3e-3, False),
                                                       (1.5e-3, 1.5e-3, False)])
def test_the_faster_record_here_is_costed_and_a_tie_keeps_the_own(both, own_s, lent_s,
                                                                  takes_lent):
    _, task, opened, own, lent, _ = both
    calls, cache = [], UntunedTimes()
    measure = _measure(lent, own_s, lent_s, calls)
    record, lender = chosen_record(opened, task, TARGET, cache, measure_untuned=measure)
    assert lender == (_lender_key() if takes_lent else None)
    assert float(record.run_secs[0]) == (2e-3 if takes_lent else 1e-3)  # the record it names
    assert sorted(calls) == ["lent", "own"]  # each timed once
    (time,) = task_times([task], TARGET, cache=cache, database=opened, measure_untuned=measure)
    assert (time.source, time.seconds) == (("borrowed", lent_s) if takes_lent else
                                           ("tuned", own_s))
    assert len(calls) == 2  # both times were cached: costing measured nothing more


@pytest.mark.parametrize("own_s, lent_s", [(1.5e-3, 1e-3), (1e-3, 3e-3)])
def test_the_build_applies_the_record_the_costing_chose(both, own_s, lent_s):
    mod, task, opened, own, lent, _ = both
    cache = UntunedTimes()
    measure = _measure(lent, own_s, lent_s, [])
    (time,) = task_times([task], TARGET, cache=cache, database=opened, measure_untuned=measure)
    database = checked_database(mod, TARGET, opened, cache)  # the times are cached
    (applied,) = database.get_all_tuning_records()
    chosen = lent if lent_s < own_s else own
    assert time.source == ("borrowed" if chosen is lent else "tuned")
    assert float(applied.run_secs[0]) == float(chosen.run_secs[0])
    assert str(applied.trace) == str(chosen.trace)


def test_a_kernel_built_with_the_borrowed_record_computes_the_same(both):
    """Measured for real: whichever record wins, the model's output is the matmul's."""
    mod, task, opened, own, lent, root = both
    record, _ = chosen_record(opened, task, TARGET, UntunedTimes(db_dir(root, TARGET)
                                                                 / "untuned_times.json"))
    assert record is not None
    x = np.random.default_rng(1).standard_normal((8, 8)).astype("float32")
    vm = tvm.relax.VirtualMachine(build_with_records(mod, TARGET, root), tvm.cpu())
    weight = np.random.default_rng(8 * 1000 + 8 * 10 + 8).standard_normal((8, 8))
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(),
                               x @ weight.astype("float32"), rtol=1e-5, atol=1e-5)


def test_without_an_own_record_the_borrowed_one_is_taken_unmeasured(tmp_path):
    (task,) = extract_tasks(matmul_module(8, 8, 8), TARGET)
    _split_record_dir(tmp_path / _lender_key(), task.mod, 2e-3)
    opened = RecordSources(db_dir(tmp_path, TARGET), (tmp_path / _lender_key(),)).open()
    calls = []
    record, lender = chosen_record(opened, task, TARGET, UntunedTimes(),
                                   measure_untuned=lambda *a, **k: calls.append(1) or 1.0)
    assert lender == _lender_key() and record is not None and calls == []


def _second_lender_key() -> str:
    """Another records folder compatible with this host's target: four more cores."""
    return re.sub(r"-c(\d+)$", lambda m: f"-c{int(m[1]) + 4}", target_dir(TARGET))


@pytest.mark.parametrize("first_s, second_s, takes_second", [(2e-3, 1e-3, True),
                                                             (1e-3, 2e-3, False),
                                                             (1e-3, 1e-3, False)])
def test_of_two_lenders_the_faster_here_is_taken_and_a_tie_keeps_the_first(
        tmp_path, first_s, second_s, takes_second):
    """A target without records of its own that borrows from two folders (a 4-core AVX2 CPU
    reads the Skylake and the Haswell records) builds each kernel they both hold with the
    record that runs faster here, not always the first folder's."""
    mod = matmul_module(8, 8, 8)
    (task,) = extract_tasks(mod, TARGET)
    _split_record_dir(tmp_path / _lender_key(), task.mod, 2e-3)
    write_records(tmp_path / _second_lender_key(), [task.mod], per_task=1, valid=True)
    opened = RecordSources(db_dir(tmp_path, TARGET), (tmp_path / _lender_key(),
                                                      tmp_path / _second_lender_key())).open()
    assert opened.sources_of(task.mod) == [_lender_key(), _second_lender_key()]
    found = opened.checked_by_source(task.mod, task.shash, TARGET)
    assert list(found) == [_lender_key(), _second_lender_key()]
    first_mod = scheduled(found[_lender_key()])
    calls = []

    def measure(task_mod, _target, repeat):
        is_first = tvm_ffi.structural_equal(task_mod, first_mod)
        calls.append("first" if is_first else "second")
        return first_s if is_first else second_s

    cache = UntunedTimes()
    record, lender = chosen_record(opened, task, TARGET, cache, measure_untuned=measure)
    assert lender == (_second_lender_key() if takes_second else _lender_key())
    assert str(record.trace) == str(found[lender].trace)
    assert sorted(calls) == ["first", "second"]  # each timed once, under its own key
    (time,) = task_times([task], TARGET, cache=cache, database=opened, measure_untuned=measure)
    assert (time.source, time.seconds, len(calls)) == ("borrowed", min(first_s, second_s), 2)
    (applied,) = checked_database(mod, TARGET, opened, cache).get_all_tuning_records()
    assert str(applied.trace) == str(record.trace)  # the build takes what the costing chose


def test_a_record_known_to_be_wrong_is_not_a_source_of_the_kernel(tmp_path):
    """The plan counts a kernel as held by two targets only where neither record is known to
    compute something else (a lender's shipped verdicts say so)."""
    import json

    from tvm_pet.tune.record_check import CHECKS_FILE, record_key
    (task,) = extract_tasks(matmul_module(8, 8, 8), TARGET)
    write_records(db_dir(tmp_path, TARGET), [task.mod], per_task=1, valid=True)
    _split_record_dir(tmp_path / _lender_key(), task.mod, 2e-3)
    sources = RecordSources(db_dir(tmp_path, TARGET), (tmp_path / _lender_key(),))
    assert sources.open().sources_of(task.mod) == [None, _lender_key()]
    (lent,) = [record for record, source in sources.open().ranked(task.mod) if source]
    (tmp_path / _lender_key() / CHECKS_FILE).write_text(
        json.dumps({record_key(task.shash, lent): False}))
    opened = sources.open()
    assert opened.sources_of(task.mod) == [None]
    assert opened.checked_by_source(task.mod, task.shash, TARGET).keys() == {None}
