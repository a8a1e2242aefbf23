"""Faults during tuning and measurement: nothing is lost, no record file is ever half-written.

The default run needs no tuning: the databases are written directly (records with empty traces),
then damaged, merged from several processes at once, or left behind by a "killed" run. Tests
marked ``tuning`` run MetaSchedule with injected faults (candidates that fail to build, time out or
kill their worker; a run interrupted by SIGINT or killed by SIGKILL) and are selected with
``python -m pytest tests/test_tuning_faults.py -m tuning``.
"""
from __future__ import annotations

import functools
import itertools
import json
import multiprocessing
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import types
import warnings

import numpy as np
import pytest
import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import PyRunner

from tvm_pet.errors import PetError
from tests.records import embedding_module, matmul_module, task_mods, write_records
from tvm_pet.io import atomic_write, dir_lock
from tvm_pet.tune import (Task, TuningSearch, count_records, extract_tasks, open_database,
                          resolve_target, tune, tune_budget, tuner)
from tvm_pet.tune import dbfile
from tvm_pet.tune.builder import make_builder
from tvm_pet.tune.dbfile import CorruptDatabaseWarning
from tvm_pet.tune.records import (LazyDatabase, UntunedTimes, best_record, db_dir,
                                  mean_run_secs, pending_database, record_sources,
                                  recover_pending, workload_records)

F32 = "float32"
TARGET = resolve_target("llvm")
REPO = pathlib.Path(__file__).resolve().parents[1]
only_when_selected = pytest.mark.skipif("'tuning' not in config.getoption('markexpr')",
                                        reason="runs MetaSchedule; select it with -m tuning")


def times_by_task(db, mods) -> list[list[float]]:
    """The sorted record times of each task, rounded to the nanosecond."""
    return [sorted(round(mean_run_secs(rec), 9) for rec in workload_records(db, mod))
            for mod in mods]


@pytest.fixture(scope="module")
def mods():
    return task_mods(2)


@pytest.fixture
def shared(tmp_path, mods):
    """A valid target database with 2 tasks x 3 records; returns its directory."""
    directory = db_dir(tmp_path, TARGET)
    write_records(directory, mods)
    return directory


def corrupt_warnings(action):
    """Run ``action``; return (its result, the CorruptDatabaseWarnings it gave)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = action()
    return result, [w for w in caught if issubclass(w.category, CorruptDatabaseWarning)]


# ------------------------------------------------------------------------- damaged databases

def test_a_clean_database_opens_without_a_write(shared, mods):
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in shared.iterdir()}
    db, caught = corrupt_warnings(lambda: open_database(shared.parent, TARGET))
    assert not caught and len(db) == 6
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in shared.iterdir()} == before


def _edit(path: pathlib.Path, change) -> None:
    lines = path.read_bytes().split(b"\n")[:-1]
    path.write_bytes(change(lines))


REC, WL = dbfile.RECORD_FILE, dbfile.WORKLOAD_FILE
T0, T1 = [1e-3, 2e-3, 3e-3], [11e-3, 12e-3, 13e-3]  # the record times of the two tasks
#: name -> (file, edit of its lines, expected record times per task after the repair)
DAMAGE = {
    "truncated last record": (REC, lambda ls: b"\n".join(ls + [ls[0][:len(ls[0]) // 2]]),
                              [T0, T1]),
    "garbage record line": (REC, lambda ls: b"\n".join(ls[:2] + [b"\xff#{"] + ls[2:]) + b"\n",
                            [T0, T1]),
    "blank record line": (REC, lambda ls: b"\n".join(ls[:2] + [b""] + ls[2:]) + b"\n", [T0, T1]),
    "index past the workloads": (REC, lambda ls: b"\n".join(ls + [b"[7" + ls[0][2:]]) + b"\n",
                                 [T0, T1]),
    "valid JSON that TVM rejects": (
        REC, lambda ls: b"\n".join(ls + [b'[0,[[[["NoSuchInstruction",[],[],[]]],[]],[0.5],'
                                         b'{"kind":"llvm"},[]]]']) + b"\n", [T0, T1]),
    "damaged first workload": (WL, lambda ls: b"\n".join([b'["12", "AAAA'] + ls[1:]) + b"\n",
                               [[], T1]),
    "truncated last workload": (WL, lambda ls: b"\n".join(ls[:-1] + [ls[-1][:100]]), [T0, []]),
    "empty workload file": (WL, lambda ls: b"", [[], []]),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_database_opens_keeps_intact_records_and_backs_up(shared, mods, damage):
    name, edit, expected = DAMAGE[damage]
    _edit(shared / name, edit)
    damaged = {n: (shared / n).read_bytes() for n in (REC, WL)}

    db, caught = corrupt_warnings(lambda: open_database(shared.parent, TARGET))
    assert len(caught) == 1 and "skipped" in str(caught[0].message)
    assert times_by_task(db, mods) == expected
    backups = sorted(shared.glob("*.corrupt"))
    assert backups, "the damaged original must be kept"
    for backup in backups:  # each backup is the damaged original, byte for byte
        assert backup.read_bytes() == damaged[backup.name[:-len(".corrupt")]]

    again, caught = corrupt_warnings(lambda: open_database(shared.parent, TARGET))
    assert not caught and len(again) == len(db)
    assert sorted(shared.glob("*.corrupt*")) == backups


def _costing_reads(shared, mods):
    """The target's own records as costing opens them, each task's record times, and whether
    each task has a best record."""
    own = record_sources(shared.parent, TARGET).open().own
    return own, times_by_task(own, mods), [best_record(own, mod) is not None for mod in mods]


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_costing_loads_each_task_when_asked_with_the_records_metaschedule_loads(
        tmp_path, mods, damage):
    """RecordSources.open reads the lines and loads a task with TVM when it is first asked for
    (a LazyDatabase): the same records as open_database's, the damaged lines skipped with one
    warning, at open (not JSON) or when their task is loaded (what TVM rejects)."""
    name, edit, expected = DAMAGE[damage]
    shared = db_dir(tmp_path, TARGET)
    write_records(shared, mods, valid=True)  # records get_top_k ranks, for best_record
    _edit(shared / name, edit)
    (own, times, best), caught = corrupt_warnings(lambda: _costing_reads(shared, mods))
    assert isinstance(own, LazyDatabase)
    assert times == expected
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert len(own.get_all_tuning_records()) == sum(map(len, expected))
    full, _ = corrupt_warnings(lambda: open_database(shared.parent, TARGET))
    assert best == [best_record(full, mod) is not None for mod in mods] == \
        [bool(t) for t in expected]


def test_empty_database_files_open_as_an_empty_database(tmp_path):
    directory = db_dir(tmp_path, TARGET)
    directory.mkdir(parents=True)
    (directory / REC).write_bytes(b"")
    (directory / WL).write_bytes(b"")
    db, caught = corrupt_warnings(lambda: open_database(tmp_path, TARGET))
    assert len(db) == 0 and not caught


# ------------------------------------------------------------------ merging and pending runs

def test_merge_remaps_indices_dedupes_and_is_idempotent(tmp_path, shared, mods):
    source = tmp_path / "run"
    write_records(source, [mods[1], mods[0]], per_task=2, base=1e-4)  # other order, new times
    assert dbfile.merge(source, shared) == 4
    assert dbfile.merge(source, shared) == 0  # merging twice adds nothing
    tables = dbfile.read_tables(shared)
    assert len(tables.workloads) == 2 and not tables.dirty
    db = open_database(shared.parent, TARGET)  # the source's task 0 is the shared task 1
    assert times_by_task(db, mods) == [sorted(T0 + [1.1e-3, 1.2e-3]), sorted(T1 + [1e-4, 2e-4])]


def test_records_of_other_tunings_merge_into_the_shipped_ones_fastest_first(
        tmp_path, shared, mods, monkeypatch):
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "merge_records", pathlib.Path(__file__).parents[1] / "scripts" / "merge_records.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    draw = tmp_path / "draw"  # another tuning of both tasks, faster on task 1
    write_records(db_dir(draw, TARGET), mods, per_task=2, base=1e-4)
    monkeypatch.setattr(sys, "argv", ["merge_records.py", str(draw), "--into",
                                      str(shared.parent), "--keep", "2"])
    assert script.main() == 0
    db = open_database(shared.parent, TARGET)
    assert times_by_task(db, mods) == [[1e-4, 2e-4], [1.1e-3, 1.2e-3]]  # the draw's: faster
    # the dropped records still count as trials: 3 shipped + 2 merged per task
    assert sorted(dbfile.pruned_counts(shared).values()) == [3, 3]
    # a task whose search ran out in the draw stays marked so in the merged records
    draw_dir = db_dir(draw, TARGET)
    dbfile.mark_exhausted(draw_dir, "123", 5)
    dbfile.mark_exhausted(shared, "456", 7)
    assert script.main() == 0
    assert dbfile.exhausted(shared) == {"123": 5, "456": 7}
    # what the draw's tuned mutants showed of each kind joins the destination's
    from tvm_pet.pipeline.kinds import Evidence
    Evidence({"a": ("merged", 0.8)}).save(draw_dir)
    Evidence({"b": ("extents", 1.2)}).save(shared)
    assert script.main() == 0
    assert Evidence.load(shared).outcomes == {"a": ("merged", 0.8), "b": ("extents", 1.2)}
    monkeypatch.setattr(sys, "argv", ["merge_records.py", str(tmp_path / "none"), "--into",
                                      str(shared.parent)])
    assert script.main() == 2  # no records there: said, nothing merged


def _merge_worker(args) -> int:
    """Merge each source into the destination; after each merge the files must be whole."""
    sources, destination = args
    added = 0
    for source in sources:
        added += dbfile.merge(source, destination)
        with dir_lock(destination, shared=True):
            assert not dbfile.read_tables(destination).dirty
    return added


def test_concurrent_merges_lose_nothing(tmp_path, mods):
    destination = db_dir(tmp_path, TARGET)
    sources = []
    for i in range(12):  # 12 runs, 2 records each, tasks shared between the processes
        source = tmp_path / f"run{i}"
        write_records(source, [mods[i % 2]], per_task=2, base=1e-4 * (2 * i + 1))
        sources.append(str(source))
    jobs = [(sources[p::4], str(destination)) for p in range(4)]
    with multiprocessing.get_context("fork").Pool(4) as pool:
        added = pool.map(_merge_worker, jobs)
    assert sum(added) == 24
    tables = dbfile.read_tables(destination)
    assert not tables.dirty and len(tables.workloads) == 2 and len(tables.records) == 24
    db = open_database(tmp_path, TARGET)
    assert [len(t) for t in times_by_task(db, mods)] == [12, 12]


def test_pending_database_is_seeded_and_merged_on_interrupt(shared, mods):
    with pytest.raises(KeyboardInterrupt):
        with pending_database(shared.parent, TARGET, mods[0]) as db:
            assert len(workload_records(db, mods[0])) == 3  # seeded with the task's records
            workload = db.commit_workload(mods[0])
            trace = tvm.s_tir.Schedule(mods[0]).trace
            db.commit_tuning_record(ms.database.TuningRecord(trace, workload, [0.5], TARGET))
            raise KeyboardInterrupt
    db = open_database(shared.parent, TARGET)
    assert times_by_task(db, mods) == [T0 + [0.5], T1]  # seeds not duplicated
    assert list((shared / dbfile.PENDING_DIR).iterdir()) == []


def test_recover_merges_dead_runs_and_leaves_live_ones(shared, mods):
    pending = shared / dbfile.PENDING_DIR
    dead, live = pending / "1-dead", pending / "2-live"
    write_records(dead, [mods[0]], per_task=2, base=0.1)
    write_records(live, [mods[1]], per_task=2, base=0.2)
    _edit(dead / REC, lambda ls: b"\n".join(ls + [ls[0][:40]]))  # killed in the middle of a line
    with dir_lock(live):  # a live run holds its directory's lock
        added, caught = corrupt_warnings(lambda: recover_pending(shared.parent, TARGET))
    assert added == 2 and len(caught) == 1
    assert not dead.exists() and live.exists()
    assert recover_pending(shared.parent, TARGET) == 2  # now that the "live" run has died
    db = open_database(shared.parent, TARGET)
    assert [len(t) for t in times_by_task(db, mods)] == [5, 5]


# --------------------------------------------------------------------- atomic writes, locks

def test_atomic_write_failure_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    path.write_text("old")
    os.chmod(path, 0o640)

    def fail(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, "new" * 10000)
    monkeypatch.undo()

    def interrupt(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupt)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["report.json"]
    atomic_write(path, "new")
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == 0o640


def _rewrite_forever(path: str) -> None:
    """Replace ``path`` with ever new complete JSON documents until killed."""
    for i in range(10**9):
        atomic_write(path, json.dumps({"i": i, "pad": "x" * 200_000}))


def test_a_writer_killed_mid_write_never_leaves_a_partial_file(tmp_path):
    path = tmp_path / "records.json"
    atomic_write(path, json.dumps({"i": -1}))
    proc = multiprocessing.get_context("fork").Process(target=_rewrite_forever, args=(str(path),))
    proc.start()
    deadline = time.monotonic() + 30
    while json.loads(path.read_text())["i"] < 5 and time.monotonic() < deadline:
        time.sleep(0.01)  # every read along the way is a complete document too
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    assert json.loads(path.read_text())["i"] >= 5  # one complete document, the last one written


def test_dir_lock_shared_and_exclusive(tmp_path):
    with dir_lock(tmp_path, shared=True), dir_lock(tmp_path, shared=True, blocking=False) as held:
        assert held
        with dir_lock(tmp_path, blocking=False) as exclusive:
            assert not exclusive
    with dir_lock(tmp_path, blocking=False) as exclusive:
        assert exclusive


def test_untuned_times_merge_concurrent_writers_and_survive_damage(tmp_path):
    path = tmp_path / "untuned_times.json"
    first, second = UntunedTimes(path), UntunedTimes(path)
    first.put(TARGET, 1, 0.5)
    second.put(TARGET, 2, 0.25)  # second never saw the first's entry: it must not drop it
    assert UntunedTimes(path).get(TARGET, 1) == 0.5 and UntunedTimes(path).get(TARGET, 2) == 0.25
    path.write_text('{"llvm/1": 0.5, "trunc')
    cache, caught = corrupt_warnings(lambda: UntunedTimes(path))
    assert cache.get(TARGET, 1) is None and len(caught) == 1
    assert (tmp_path / "untuned_times.json.corrupt").read_text() == '{"llvm/1": 0.5, "trunc'


# ------------------------------------------------------------------------------- interrupts

def test_sigint_during_tuning_is_noticed_and_raised():
    # Python's own handler, as in an interactive run: pytest-xdist workers and earlier tests may
    # leave SIGINT ignored, and the watch (rightly) leaves an ignored SIGINT alone
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with tuner._watch_interrupts() as fired:
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)  # the handler runs at the next bytecode
            assert fired == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)


def test_an_interrupt_converted_by_tvm_is_raised_again(mods):
    def interrupted_in_callback(**_kwargs):
        raise RuntimeError("")  # what TVM's FFI makes of a KeyboardInterrupt in a callback

    class Context:  # a real TuneContext imports MetaSchedule's tensor intrinsics (slow)
        def __init__(self, **_kwargs):
            pass

        def clone(self):
            return self

    task = Task("matmul", 1, mods[0], 0)
    stand_ins = {"new_context": Context, "tune_tasks": interrupted_in_callback}
    search = TuningSearch(TARGET, None, None, 0, 1, 1, interrupted=[], **stand_ins)
    error = tuner._run_search(task, 1, None, pathlib.Path(), search, None)
    assert error.startswith("RuntimeError")
    search = TuningSearch(TARGET, None, None, 0, 1, 1, interrupted=[signal.SIGINT], **stand_ins)
    with pytest.raises(KeyboardInterrupt):
        tuner._run_search(task, 1, None, pathlib.Path(), search, None)


# ---------------------------------------------------------------- tuning (-m tuning only)

def claim(fault_dir: str, name: str) -> bool:
    """Claim a one-time fault: true for its first caller, over all processes."""
    try:
        os.close(os.open(os.path.join(fault_dir, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def faulty_build(fault_dir: str, mod, target, params):
    """``fast_build``, except that one candidate raises and one kills its worker process."""
    from tvm_pet.tune.builder import fast_build
    if claim(fault_dir, "build_error"):
        raise RuntimeError("injected build failure")
    if claim(fault_dir, "build_kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    return fast_build(mod, target, params)


def faulty_run(fault_dir: str, rt_mod, device, evaluator_config, repeated_args):
    """The default evaluator, except that one candidate hangs and one kills its worker process."""
    from tvm.s_tir.meta_schedule.runner.local_runner import default_run_evaluator
    if claim(fault_dir, "run_timeout"):
        time.sleep(600)
    if claim(fault_dir, "run_kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    return default_run_evaluator(rt_mod, device, evaluator_config, repeated_args)


FAST_EVALUATOR = ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=10)


@pytest.mark.tuning
@only_when_selected
def test_candidates_that_fail_hang_or_kill_their_worker_are_survived(tmp_path):
    import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests
    faults = tmp_path / "faults"
    faults.mkdir()
    builder = make_builder(max_workers=2, timeout_s=60)
    builder.f_build = functools.partial(faulty_build, str(faults))
    runner = ms.runner.LocalRunner(timeout_sec=5, evaluator_config=FAST_EVALUATOR,
                                   f_run_evaluator=functools.partial(faulty_run, str(faults)))
    try:
        stats = tune(matmul_module(32, 32, 32), TARGET, trials=8, records_dir=tmp_path,
                     trials_per_iter=8, builder=builder, runner=runner)
    finally:
        runner.pool.shutdown()
    task = stats.per_task[0]
    assert sorted(os.listdir(faults)) == ["build_error", "build_kill", "run_kill", "run_timeout"]
    assert task.error is None and task.new_trials == 8 and task.failed_trials >= 4
    assert task.best_s is not None  # the good candidates were measured and stored
    assert count_records(tmp_path, TARGET) == 8
    assert not dbfile.read_tables(db_dir(tmp_path, TARGET)).dirty


@derived_object
class SignalAtCall(PyRunner):
    """A LocalRunner that sends ``signum`` to its own process on its ``at_call``-th batch."""

    def __init__(self, at_call: int, signum: int) -> None:
        super().__init__()
        self.inner = ms.runner.LocalRunner(timeout_sec=60, evaluator_config=FAST_EVALUATOR)
        self.at_call, self.signum, self.calls = at_call, signum, 0

    def run(self, runner_inputs):
        self.calls += 1
        if self.calls == self.at_call:
            os.kill(os.getpid(), self.signum)
        return self.inner.run(runner_inputs)


def run_until_signal(records_dir, copies: int, trials: int, at_call: int, signum: int) -> int:
    """In a child process: tune ``copies`` tasks, one candidate per batch, signalled at
    ``at_call``; return its exit code (130 after a KeyboardInterrupt, -9 after SIGKILL)."""
    code = ("import sys\n"
            "from tests.test_tuning_faults import SignalAtCall, matmul_module, tune, TARGET\n"
            f"runner = SignalAtCall({at_call}, {int(signum)})\n"
            "try:\n"
            f"    tune(matmul_module(16, 16, 16, {copies}), TARGET, trials={trials},\n"
            f"         records_dir={str(records_dir)!r}, trials_per_iter=1, runner=runner)\n"
            "except KeyboardInterrupt:\n"
            "    sys.exit(130)\n"
            "sys.exit(3)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, timeout=600,
                          capture_output=True, text=True)
    assert proc.returncode in (130, -signal.SIGKILL), proc.stderr[-3000:]
    return proc.returncode


@pytest.mark.tuning
@only_when_selected
def test_interrupted_run_keeps_finished_work_and_the_rerun_resumes(tmp_path):
    # in this process (a second process would pay MetaSchedule's start-up again): 2 tasks x 2
    # trials, one candidate per batch, Ctrl-C on the 4th batch (task 2's second)
    mod = matmul_module(16, 16, 16, 2)
    runner = SignalAtCall(4, signal.SIGINT)
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(KeyboardInterrupt):
            tune(mod, TARGET, trials=2, records_dir=tmp_path, trials_per_iter=1, runner=runner)
        assert signal.getsignal(signal.SIGINT) is handler
        directory = db_dir(tmp_path, TARGET)
        assert list((directory / dbfile.PENDING_DIR).iterdir()) == []
        tables = dbfile.read_tables(directory)  # task 1 complete, task 2's first batch kept
        assert not tables.dirty and len(tables.workloads) == 2
        assert sorted(np.bincount([idx for idx, _ in tables.records])) == [1, 2]

        stats = tune(mod, TARGET, trials=2, records_dir=tmp_path, trials_per_iter=1,
                     runner=runner)
    finally:
        runner.inner.pool.shutdown()
    assert sorted((t.records_before, t.new_trials) for t in stats.per_task) == [(1, 1), (2, 0)]
    assert count_records(tmp_path, TARGET) == 4


@pytest.mark.tuning
@only_when_selected
def test_killed_run_is_recovered_and_the_rerun_resumes(tmp_path):
    # 1 task x 2 trials: SIGKILL on the 2nd batch, after the first batch was committed
    assert run_until_signal(tmp_path, 1, 2, 2, signal.SIGKILL) == -signal.SIGKILL
    directory = db_dir(tmp_path, TARGET)
    assert count_records(tmp_path, TARGET) == 0  # the task never finished...
    assert len(list((directory / dbfile.PENDING_DIR).iterdir())) == 1  # ...its work is pending

    runner = ms.runner.LocalRunner(timeout_sec=60, evaluator_config=FAST_EVALUATOR)
    try:
        stats = tune(matmul_module(16, 16, 16), TARGET, trials=2, records_dir=tmp_path,
                     trials_per_iter=1, runner=runner)
    finally:
        runner.pool.shutdown()
    assert [(t.records_before, t.new_trials) for t in stats.per_task] == [(1, 1)]
    assert count_records(tmp_path, TARGET) == 2
    assert list((directory / dbfile.PENDING_DIR).iterdir()) == []


# ------------------------------------------------------------------------------------ pruning

def test_prune_keeps_the_fastest_records_and_counts_the_dropped_ones(shared, mods):
    assert dbfile.prune(shared, keep=2) == 2  # 2 tasks x 3 records -> 2 x 2
    db = open_database(shared.parent, TARGET)
    assert times_by_task(db, mods) == [T0[:2], T1[:2]]  # the two fastest of each task
    counts = dbfile.pruned_counts(shared)
    assert sorted(counts.values()) == [1, 1]
    assert set(counts) == set(dbfile.read_tables(shared).shashes)
    assert dbfile.prune(shared, keep=2) == 0  # pruning again drops nothing, counts unchanged
    assert dbfile.pruned_counts(shared) == counts
    assert dbfile.prune(shared, keep=1) == 2 and sorted(dbfile.pruned_counts(shared).values()) == [2, 2]
    with pytest.raises(ValueError, match="keep=0"):
        dbfile.prune(shared, keep=0)


def test_drop_records_removes_the_chosen_ones_and_counts_them_as_pruned(shared, mods):
    tables = dbfile.read_tables(shared)
    by_task: dict = {}
    for idx, text in tables.records:
        by_task.setdefault(tables.shashes[idx], []).append(text)
    slowest = {(shash, max(texts, key=lambda text: json.loads(text)[1])) for shash, texts in
               by_task.items()}
    assert len(slowest) == 2
    assert dbfile.drop_records(shared, lambda shash, text: (shash, text) in slowest) == 2
    assert times_by_task(open_database(shared.parent, TARGET), mods) == [T0[:2], T1[:2]]
    assert sorted(dbfile.pruned_counts(shared).values()) == [1, 1]
    assert dbfile.drop_records(shared, lambda shash, text: False) == 0


# ---------------------------------------------------------------------- packed (shipped) files

PACKED = [WL + dbfile.PACKED_SUFFIX, REC + dbfile.PACKED_SUFFIX]


def _ship(directory: pathlib.Path, into: pathlib.Path) -> None:
    """Copy only a database's packed files, as a fresh clone of a repository holds them."""
    into.mkdir(parents=True)
    for name in PACKED:
        (into / name).write_bytes((directory / name).read_bytes())


def test_a_packed_database_is_unpacked_on_first_use_and_every_write_repacks_it(tmp_path, shared,
                                                                                mods):
    import lzma
    plain = {name: (shared / name).read_bytes() for name in (WL, REC)}
    assert 0 < dbfile.pack(shared) < sum(len(data) for data in plain.values())
    clone = db_dir(tmp_path / "clone", TARGET)
    _ship(shared, clone)
    assert dbfile.has_database(clone) and not (clone / WL).exists()
    assert count_records(clone.parent, TARGET) == 6  # counting unpacks
    assert {name: (clone / name).read_bytes() for name in (WL, REC)} == plain
    assert times_by_task(open_database(clone.parent, TARGET), mods) == [T0, T1]
    assert not dbfile.unpack(clone)  # made once; then only the hashes are compared

    assert dbfile.prune(clone, keep=2) == 2  # a write rewrites the packed copies
    for name in (WL, REC):
        assert lzma.decompress((clone / (name + dbfile.PACKED_SUFFIX)).read_bytes()) == (
            clone / name).read_bytes()
    assert not dbfile.unpack(clone)

    _ship(clone, tmp_path / "pulled" / clone.name)  # other packed copies arrive (a git pull)
    for name in PACKED:
        (shared / name).write_bytes((tmp_path / "pulled" / clone.name / name).read_bytes())
    assert times_by_task(open_database(shared.parent, TARGET), mods) == [T0[:2], T1[:2]]


def test_writes_into_a_fresh_clones_packed_records_keep_what_they_hold(tmp_path, shared, mods):
    """A fresh clone holds the shipped records packed only, and nothing has unpacked them yet:
    merging other records into them, pruning them or packing them keeps their records (merging
    once started from empty plain files and repacked the shipped records as the merged ones
    only)."""
    other = db_dir(tmp_path / "other", TARGET)
    write_records(other, task_mods(3)[2:], per_task=1)  # a third workload
    dbfile.pack(shared)
    writes = {"merge": lambda d: dbfile.merge(other, d), "prune": lambda d: dbfile.prune(d, 3),
              "pack": dbfile.pack}
    for name, write in writes.items():
        clone = db_dir(tmp_path / name, TARGET)
        _ship(shared, clone)
        write(clone)
        assert times_by_task(open_database(clone.parent, TARGET), mods) == [T0, T1], name
    assert len(dbfile.read_tables(tmp_path / "merge" / clone.name).records) == 7


def test_a_merge_repacks_when_its_process_exits(tmp_path, shared, mods):
    """A tuning run merges once per task, and packing a large workload file takes seconds: a
    merge leaves the packed copies behind, the plain files in use (a rerun, or a process killed
    before its exit, reads them), and they are repacked once, as the process exits."""
    import lzma
    other = db_dir(tmp_path / "other", TARGET)
    write_records(other, task_mods(3)[2:], per_task=1)  # a third workload
    dbfile.repack_deferred()  # what earlier tests' merges left, in this process
    dbfile.pack(shared)
    before = {name: (shared / name).read_bytes() for name in PACKED}
    assert dbfile.merge(other, shared) == 1
    assert {name: (shared / name).read_bytes() for name in PACKED} == before
    assert not dbfile.unpack(shared)  # the lagging copies do not overwrite the plain files
    assert len(dbfile.read_tables(shared).records) == 7
    assert dbfile.repack_deferred() == 1  # what the exit runs
    for name in (WL, REC):
        assert lzma.decompress((shared / (name + dbfile.PACKED_SUFFIX)).read_bytes()) == (
            shared / name).read_bytes()
    assert dbfile.repack_deferred() == 0


def test_a_damaged_packed_copy_leaves_the_plain_files_in_use_with_a_warning(shared, mods):
    dbfile.pack(shared)
    (shared / PACKED[0]).write_bytes(b"not xz")
    made, caught = corrupt_warnings(lambda: dbfile.unpack(shared))
    assert not made and len(caught) == 1 and "packed tuning database" in str(caught[0].message)
    assert times_by_task(open_database(shared.parent, TARGET), mods) == [T0, T1]


# ------------------------------------------------------------------------ whole-model budgets

def test_a_budget_already_spent_measures_nothing(tmp_path):
    mod = matmul_module(8, 8, 8, copies=2)  # two tasks
    directory = db_dir(tmp_path, TARGET)
    write_records(directory, [t.mod for t in extract_tasks(mod, TARGET)], per_task=3)
    stats = tune_budget(mod, TARGET, 6, tmp_path)
    assert stats.tasks == 2 and stats.new_trials == 0
    assert [s.records_before for s in stats.per_task] == [3, 3]
    dbfile.prune(directory, keep=1)  # pruned records still count toward the budget
    assert tune_budget(mod, TARGET, 6, tmp_path).new_trials == 0
    with pytest.raises(PetError, match="budget=0"):
        tune_budget(mod, TARGET, 0, tmp_path)


def test_tune_leaves_the_kernels_it_is_told_to_skip_as_they_are(tmp_path):
    mod = matmul_module(8, 8, 8, copies=2)  # two tasks with 1 record each
    tasks = extract_tasks(mod, TARGET)
    write_records(db_dir(tmp_path, TARGET), [t.mod for t in tasks], per_task=1)
    stats = tune(mod, TARGET, trials=4, records_dir=tmp_path,
                 skip=frozenset(str(t.shash) for t in tasks))  # else 6 trials measured
    assert stats.new_trials == 0 and [s.records_before for s in stats.per_task] == [1, 1]
    assert not any(s.exhausted for s in stats.per_task)  # left alone, not searched out


def test_tune_minutes_adds_each_tasks_trials_over_its_steps_by_name(tmp_path, monkeypatch):
    mod = matmul_module(8, 8, 8, copies=2)  # two tasks
    names = [t.name for t in extract_tasks(mod, TARGET)]
    trials = {names[0]: [5, 3], names[1]: [7, 0]}  # per step

    def step(mod, target, total, records_dir, *, seed, rpc, progress, progress_line, deadline,
             first_batch):
        k = seed  # tune_minutes gives step k the seed k
        per_task = [tuner.TaskStats(n, 1, 0, trials[n][k], 0, 0.0, 1e-3 * (k + 1))
                    for n in (names if k == 0 else names[::-1])]  # a step may list them otherwise
        return tuner.TuneStats("key", "dir", tuple(per_task), 0.0)

    monkeypatch.setattr(tuner, "tune_budget", step)
    clock = iter([0.0, 0.0, 1.0, 120.0, 120.0, 120.0])  # start, two steps, the minute spent
    monkeypatch.setattr(tuner, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    stats = tuner.tune_minutes(mod, TARGET, 1.0, tmp_path)
    assert {t.name: t.new_trials for t in stats.per_task} == {names[0]: 8, names[1]: 7}
    assert {t.name: t.best_s for t in stats.per_task} == {n: 2e-3 for n in names}


def test_tune_minutes_sizes_a_later_step_to_the_time_left(tmp_path, monkeypatch):
    mod = matmul_module(8, 8, 8, copies=2)  # two tasks: a full step is 16 x 2 = 32 trials
    asked, lines, deadlines = [], [], []

    def step(mod, target, total, records_dir, *, seed, rpc, progress=None, progress_line=None,
             deadline=None, first_batch=None):
        asked.append(total)
        deadlines.append(deadline)
        lines.append(progress_line and progress_line(6, 32, 0.0))
        return tuner.TuneStats("key", "dir", (tuner.TaskStats("t", 1, 0, 12, 0, 0.0, 1e-3),),
                               0.0)

    monkeypatch.setattr(tuner, "tune_budget", step)
    # 12 trials took 100 s; 20 s of the 2 minutes are left, which hold 2 trials; then 0 s
    clock = iter([0.0, 0.0, 30.0, 100.0, 100.0, 120.0, 120.0, 120.0])
    monkeypatch.setattr(tuner, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    stats = tuner.tune_minutes(mod, TARGET, 2.0, tmp_path, progress=print)
    assert asked == [32, 34]  # a whole step first, then only what the time left holds
    assert deadlines == [120.0, 120.0]  # each step ends when the 2 minutes are spent
    assert stats.per_task[0].new_trials == 24
    assert lines == ["tuning 6 trials, 30s of 2m00s, ETA 1m30s",
                     "tuning 18 trials, 1m40s of 2m00s, ETA 20s"]
    # the same budget again: its 2 minutes were spent on these records, so no step is started,
    # and the records are read as they are (a budget of what they hold: nothing measured)
    del asked[:], lines[:]
    monkeypatch.setattr(tuner, "time", types.SimpleNamespace(perf_counter=lambda: 0.0))
    tuner.tune_minutes(mod, TARGET, 2.0, tmp_path, progress=print)
    assert asked == [1] and lines == [None]
    # a larger budget tunes for the difference, and its line counts the earlier minutes
    del asked[:], lines[:]
    clock = itertools.chain([0.0, 0.0, 0.0], itertools.repeat(60.0))  # the minute left spent
    monkeypatch.setattr(tuner, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    tuner.tune_minutes(mod, TARGET, 3.0, tmp_path, progress=print)
    assert asked == [32] and lines == ["tuning 6 trials, 2m00s of 3m00s, ETA 1m00s"]
    assert deadlines[-1] == 60.0  # the minute left


def test_a_short_minutes_budget_starts_with_a_round_that_fits_it(tmp_path, monkeypatch):
    # the scheduler's first round is not cut short: at 8 trials a kernel, Inception-v3 at 330
    # (62 kernels) tuned for 12 minutes of a 3-minute budget here
    mod = matmul_module(8, 8, 8, copies=2)  # two tasks: a step of 16 each, batches of 8
    asked = []

    def step(mod, target, total, records_dir, *, seed, rpc, progress=None, progress_line=None,
             deadline=None, first_batch=None):
        asked.append((total, first_batch))
        return tuner.TuneStats("key", "dir", (tuner.TaskStats("t", 1, 0, total, 0, 0.0, 1e-3),),
                               0.0)

    monkeypatch.setattr(tuner, "tune_budget", step)
    for minutes, records_dir in ((0.2, tmp_path / "a"), (0.05, tmp_path / "b"),
                                 (30.0, tmp_path / "c")):
        clock = itertools.chain([0.0, 0.0], itertools.repeat(minutes * 60))  # one step, spent
        monkeypatch.setattr(tuner, "time",
                            types.SimpleNamespace(perf_counter=lambda: next(clock)))
        tuner.tune_minutes(mod, TARGET, minutes, records_dir)
    # the step is whole; its new kernels' first batch is what the time holds at 1.7 s a trial:
    # 12 s hold 7 trials, 3 a kernel; 3 s still 1; 30 minutes a whole batch of 8, which the
    # evolutionary search draws, as before (None)
    assert tuner.PRIOR_TRIAL_S == 1.7
    assert asked == [(32, 3), (32, 1), (32, None)]


def test_an_interrupted_step_of_a_minutes_budget_counts_its_time(tmp_path, monkeypatch):
    mod = matmul_module(8, 8, 8, copies=2)
    asked = []

    def step(mod, target, total, records_dir, *, seed, rpc, progress=None, progress_line=None,
             deadline=None, first_batch=None):
        asked.append(total)
        raise KeyboardInterrupt  # Ctrl-C 50 s into the first step

    monkeypatch.setattr(tuner, "tune_budget", step)
    clock = iter([0.0, 0.0, 50.0])
    monkeypatch.setattr(tuner, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    with pytest.raises(KeyboardInterrupt):
        tuner.tune_minutes(mod, TARGET, 2.0, tmp_path)
    # the rerun has 70 s of the 2 minutes left, which a full step (32 trials) then starts on
    clock = itertools.chain([0.0, 0.0], itertools.repeat(0.0))
    monkeypatch.setattr(tuner, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    with pytest.raises(KeyboardInterrupt):
        tuner.tune_minutes(mod, TARGET, 2.0, tmp_path)
    spent = tuner.MinutesSpent(db_dir(tmp_path, TARGET) / tuner.MinutesSpent.FILE)
    key = tuner.MinutesSpent.key(extract_tasks(mod, TARGET))
    assert asked == [32, 32] and spent.get(key) == 50.0
    asked.clear()
    monkeypatch.setattr(tuner, "tune_budget", lambda *a, **k: asked.append(a[2]) or "read")
    assert tuner.tune_minutes(mod, TARGET, 50 / 60, tmp_path) == "read"  # no step: time spent
    assert asked == [1]


def test_an_interrupt_or_a_failure_of_tvm_in_a_whole_model_search(tmp_path, mods):
    def interrupted_in_callback(**_kwargs):
        if search.interrupted:  # what TVM's FFI makes of a KeyboardInterrupt in a callback
            raise RuntimeError("")
        raise RuntimeError("Traceback (most recent call last):\n  File task_scheduler.cc, "
                           "line 198\nCheck failed: (!task->is_terminated) is false: ")

    class Context:
        def __init__(self, **_kwargs):
            pass

        def clone(self):
            return self

    tasks = [Task("matmul", 1, mods[0], 0)]
    stand_ins = {"new_context": Context, "tune_tasks": interrupted_in_callback}
    search = TuningSearch(TARGET, None, None, 0, 1, 1, interrupted=[], **stand_ins)
    with pytest.raises(PetError, match=r"^MetaSchedule's task scheduler failed: RuntimeError: "
                       r"Check failed: \(!task->is_terminated\) is false:\. The records"):
        tuner._tune_together(tasks, 4, tmp_path, None, search)  # a failure of TVM's own
    search = TuningSearch(TARGET, None, None, 0, 1, 1, interrupted=[signal.SIGINT], **stand_ins)
    with pytest.raises(KeyboardInterrupt):
        tuner._tune_together(tasks, 4, tmp_path, None, search)


class FakeStrategy:
    """MetaSchedule's search strategy as :class:`tuner._WholeModelSearch` calls it: each call
    finds a batch of two candidates, named by the strategy and their order."""

    def __init__(self, name: str = "b"):
        self.name, self.batches, self.calls = name, 0, []

    def generate_measure_candidates(self):
        self.batches += 1
        return [f"{self.name}{self.batches}c0", f"{self.name}{self.batches}c1"]

    def __getattr__(self, name):  # the other methods are passed on as they are
        return lambda *args: self.calls.append((name, args))


def test_a_deadline_holds_back_a_tasks_batches_after_its_first():
    clock = [30.0]  # already past the deadline at the first call
    inner = FakeStrategy()
    search = tuner._WholeModelSearch(20.0, inner, now=lambda: clock[0],
                                     fresh=FakeStrategy("random"))._inst
    # the first batch is never held back: the scheduler's first round is not cut short
    assert search.generate_measure_candidates() == ["b1c0", "b1c1"]
    assert search.generate_measure_candidates() is None  # then the task ends itself
    assert inner.batches == 1
    clock[0] = 10.0  # before the deadline, every batch is the inner search's
    assert search.generate_measure_candidates() == ["b2c0", "b2c1"]
    search.pre_tuning(8, 2, ["space"], "db", "model")
    search.notify_runner_results(["b2c0"], ["r"])
    search.post_tuning()
    assert inner.calls == [("pre_tuning", (8, 2, ["space"], "db", "model")),
                           ("notify_runner_results", (["b2c0"], ["r"])), ("post_tuning", ())]


def test_an_empty_batch_ends_the_task():
    # MetaSchedule's evolutionary search returns an empty batch once a space is spent; the task
    # scheduler ends a task only on None, and looped on a CSRNet combination's layout kernel
    inner = FakeStrategy()
    inner.generate_measure_candidates = lambda: []
    search = tuner._WholeModelSearch(None, inner)._inst
    assert search.generate_measure_candidates() is None
    inner.generate_measure_candidates = lambda: ["c0"]  # a batch with candidates passes on
    assert search.generate_measure_candidates() == ["c0"]


def test_a_tasks_own_search_ends_on_an_empty_batch_too(tmp_path, monkeypatch):
    # one task topped up (tune, not a whole-model budget) searches with the same wrapper
    search = ShortSearch(found=1)
    strategies, original = [], search.context

    def context(**kwargs):
        strategies.append(kwargs["search_strategy"])
        return original(**kwargs)

    monkeypatch.setattr(search, "context", context)
    tune_with(search, monkeypatch, tmp_path, trials=8)
    (strategy,) = strategies
    assert isinstance(strategy, tuner._WholeModelSearch)
    assert strategy.deadline is None and strategy.first is None


class FakeDatabase:
    """A database that holds records of the task modules in ``tuned`` only."""

    def __init__(self, tuned):
        self.tuned = tuned

    def has_workload(self, mod):
        return mod in self.tuned

    def commit_workload(self, mod):
        return mod

    def get_top_k(self, workload, k):
        return ["record"][:k]


def test_a_kernel_without_records_draws_its_first_batch_at_random():
    # where a minutes budget cannot give every kernel a whole first batch, a new kernel's
    # smaller one is drawn at random: the evolutionary search ranks its samples by a cost model
    # that has no data during the scheduler's first round, 4-8 s a kernel
    for tuned, first, drawn in ((["other"], 2, "random1"), (["task"], 2, "b1"),
                                (["other"], None, "b1")):
        inner, fresh = FakeStrategy(), FakeStrategy("random")
        search = tuner._WholeModelSearch(None, inner, fresh=fresh, first=first)._inst
        search._initialize_with_tune_context(types.SimpleNamespace(mod="task"))
        search.pre_tuning(8, 4, ["space"], FakeDatabase(tuned), "model")
        assert search.generate_measure_candidates()[0] == f"{drawn}c0"
        search.notify_runner_results(["c"], ["r"])
        assert search.generate_measure_candidates()[0] == ("b1c0" if drawn != "b1" else "b2c0")
        search.post_tuning()
        # the evolutionary search counts every trial; the random draw is set up only when used,
        # for a batch of `first` trials
        assert [c[0] for c in inner.calls] == ["_initialize_with_tune_context", "pre_tuning",
                                               "notify_runner_results", "post_tuning"]
        assert inner.calls[1][1][1] == 4
        if drawn == "random1":
            assert [c[0] for c in fresh.calls] == ["_initialize_with_tune_context", "pre_tuning",
                                                   "notify_runner_results", "post_tuning"]
            assert fresh.calls[1][1][1] == 2
        else:
            assert [c[0] for c in fresh.calls] == ["_initialize_with_tune_context"]
    assert not tuner._has_records(None, "task")  # no database: no records


@pytest.mark.tuning
@only_when_selected
def test_a_deadline_passed_after_the_first_round_ends_the_search_cleanly(tmp_path,
                                                                         monkeypatch):
    # swin_t, 30 minutes in: terminating the tasks from a measure callback let the gradient
    # scheduler pick a task just terminated, and TVM failed its check `!task->is_terminated`
    mod = matmul_module(16, 16, 16, copies=3)
    clock = itertools.chain([0.0] * 2, itertools.repeat(1e9))  # tune_budget's start, 1 batch
    monkeypatch.setattr(tuner, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    stats = tune_budget(mod, TARGET, 240, tmp_path, deadline=1.0)
    # 240 trials for 3 tasks: batches of 40; the first round (3 batches) and the one batch sent
    # before the deadline, each measured and kept; every task then ends at its next turn
    assert stats.new_trials == 4 * 40 and count_records(tmp_path, TARGET) == 4 * 40


@pytest.mark.tuning
@only_when_selected
def test_a_budget_is_spread_over_the_tasks_and_reused(tmp_path):
    mod = matmul_module(16, 16, 16, copies=2)
    lines = []
    stats = tune_budget(mod, TARGET, 12, tmp_path, progress=lines.append)
    assert stats.new_trials == 12 and count_records(tmp_path, TARGET) == 12
    assert lines and lines[-1].startswith("tuning 12/12 trials")
    # the scheduler builds every task's first batch before it counts a trial: said as it goes
    assert re.fullmatch(r"tuning 0/12 trials \S+ \(first round: 1/2 kernels sent to measure; "
                        r"the trials are counted once every kernel is\)", lines[0]), lines[0]
    assert tune_budget(mod, TARGET, 12, tmp_path).new_trials == 0


@pytest.mark.tuning
@only_when_selected
def test_a_deadline_already_passed_ends_the_search_after_the_first_round(tmp_path):
    mod = matmul_module(16, 16, 16, copies=2)
    stats = tune_budget(mod, TARGET, 40, tmp_path, deadline=time.perf_counter())
    # the first round (10 candidates a task) is measured and kept, nothing after it
    assert 0 < stats.new_trials <= 20 and count_records(tmp_path, TARGET) == stats.new_trials


def test_the_first_round_is_reported_until_a_trial_is_counted(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(tuner.time, "perf_counter", lambda: clock[0])
    lines = []
    progress = tuner._Progress(40, lines.append, kernels=4, every_s=20.0)
    for step in (30.0, 5.0, 20.0, 25.0):  # the second comes 5 s after the first: not said
        clock[0] += step
        progress.built(8)
    assert lines == [  # the first kernel's 30 s hold the workers' start: no pace from it
        "tuning 0/40 trials 30s (first round: 1/4 kernels sent to measure; the trials are "
        "counted once every kernel is)",
        # two kernels in the 25 s since the first: 12.5 s for the last one
        "tuning 0/40 trials 55s (first round: 3/4 kernels sent to measure, about 12s left of "
        "it; the trials are counted once every kernel is)",
        "tuning 0/40 trials 1m20s (first round: 4/4 kernels sent to measure; "
        "the trials are counted once every kernel is)"]
    clock[0] += 5.0
    progress._inst.apply(None, 0, [None] * 8, [], [])  # the first batch counted
    clock[0] += 60.0
    progress.built(8)  # later builds say nothing: the counted trials have their own lines
    assert lines[3:] == ["tuning 8/40 trials 1m25s, ETA 5m40s"]


# ------------------------------------------------------------------ exhausted search spaces

class ShortSearch:
    """Stand-ins for MetaSchedule's ``TuneContext`` and ``tune_tasks`` (a real context loads
    MetaSchedule's tensor intrinsics): the search commits ``found`` records for its task, whatever
    it was asked for, or raises ``error``; ``asked`` keeps the trials of each call."""

    def __init__(self, found: int, error: Exception | None = None):
        self.found, self.error, self.asked = found, error, []

    @staticmethod
    def context(**kwargs):
        context = types.SimpleNamespace(mod=kwargs["mod"])
        context.clone = lambda: context
        return context

    def tune_tasks(self, *, tasks, database, max_trials_global, **_kwargs):
        self.asked.append(max_trials_global)
        if self.error is not None:
            raise self.error
        (context,) = tasks
        workload = database.commit_workload(context.mod)
        args = ms.arg_info.ArgInfo.from_prim_func(context.mod["main"])
        for r in range(self.found):
            trace = tvm.s_tir.Schedule(context.mod).trace
            database.commit_tuning_record(
                ms.database.TuningRecord(trace, workload, [1e-3 * (r + 1)], TARGET, args))


def tune_with(search: ShortSearch, monkeypatch, records_dir, trials: int):
    """``tune`` one small task with ``search`` in place of MetaSchedule's."""
    monkeypatch.setattr(tuner, "TuningSearch", functools.partial(
        TuningSearch, new_context=search.context, tune_tasks=search.tune_tasks))
    return tune(matmul_module(8, 8, 8), TARGET, trials=trials, records_dir=records_dir,
                builder=object(), runner=object())


def test_a_search_that_runs_out_of_candidates_is_not_searched_again(tmp_path, monkeypatch):
    # a layout kernel's search space can hold one candidate: asked for 8, the search finds 1
    search = ShortSearch(found=1)
    stats = tune_with(search, monkeypatch, tmp_path, trials=8)
    assert search.asked == [8] and stats.new_trials == 1 and stats.per_task[0].exhausted
    (task,) = extract_tasks(matmul_module(8, 8, 8), TARGET)
    directory = db_dir(tmp_path, TARGET)
    assert dbfile.exhausted(directory) == {str(task.shash): 1}
    # again, and at a larger budget: the search is not run, nothing is measured
    for trials in (8, 512):
        stats = tune_with(search, monkeypatch, tmp_path, trials=trials)
        assert search.asked == [8] and stats.new_trials == 0
        assert [(t.records_before, t.new_trials, t.exhausted) for t in stats.per_task] == [
            (1, 0, True)]
    assert tuner._progress_line(list(stats.per_task), 1, 0.0).endswith(
        "already tuned, search space exhausted at 1 trial) 0s")
    # a whole-model budget leaves it out of the search too
    monkeypatch.setattr(tuner, "_make_runner", lambda *a: types.SimpleNamespace(
        pool=types.SimpleNamespace(shutdown=lambda: None)))
    monkeypatch.setattr(tuner, "_tune_together",
                        lambda tasks, *a: pytest.fail(f"searched {[t.name for t in tasks]}"))
    assert tune_budget(matmul_module(8, 8, 8), TARGET, 100, tmp_path).new_trials == 0


def _transpose_module() -> tvm.IRModule:
    """A kernel that does not reduce: a transpose of a [16, 24] input."""
    from tvm import relax
    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((16, 24), "float32"))
    with bb.function("main", [a]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.permute_dims(a, (1, 0))))
        bb.emit_func_output(out)
    return bb.finalize()


def test_a_kernel_that_does_not_reduce_gets_a_few_trials_at_random(tmp_path, monkeypatch):
    """A layout kernel's space is a schedule or few: MetaSchedule's evolutionary search spent
    minutes looking for new candidates where there were none. It gets at most
    ``SPATIAL_TRIALS``, drawn at random, and is not searched again; a product is searched as
    before."""
    search, strategies = ShortSearch(found=2), []

    def context(**kwargs):
        strategies.append(kwargs["search_strategy"])
        return ShortSearch.context(**kwargs)
    monkeypatch.setattr(tuner, "TuningSearch", functools.partial(
        TuningSearch, new_context=context, tune_tasks=search.tune_tasks))
    stats = tune(_transpose_module(), TARGET, trials=32, records_dir=tmp_path,
                 builder=object(), runner=object())
    assert search.asked == [tuner.SPATIAL_TRIALS] and stats.new_trials == 2
    assert stats.per_task[0].exhausted
    assert isinstance(strategies[0].inner, ms.search_strategy.ReplayTrace)
    again = tune(_transpose_module(), TARGET, trials=512, records_dir=tmp_path,
                 builder=object(), runner=object())
    assert search.asked == [tuner.SPATIAL_TRIALS] and again.new_trials == 0
    # a product: the evolutionary search, up to the trials asked
    tune(matmul_module(8, 8, 8), TARGET, trials=32, records_dir=tmp_path, builder=object(),
         runner=object())
    assert search.asked[-1] == 32
    assert isinstance(strategies[-1].inner, ms.search_strategy.EvolutionarySearch)


@pytest.mark.parametrize("search", [ShortSearch(found=8), ShortSearch(found=0,
                                                                     error=RuntimeError("boom"))],
                         ids=["found its budget", "failed"])
def test_a_search_that_found_its_budget_or_failed_is_not_marked_exhausted(tmp_path, monkeypatch,
                                                                         search):
    stats = tune_with(search, monkeypatch, tmp_path, trials=8)
    assert dbfile.exhausted(db_dir(tmp_path, TARGET)) == {} and not stats.per_task[0].exhausted
    tune_with(search, monkeypatch, tmp_path, trials=16)  # a larger budget searches it again
    assert search.asked == [8, 16 - search.found]


def test_a_damaged_exhausted_file_warns_and_searches_again(tmp_path):
    directory = db_dir(tmp_path, TARGET)
    directory.mkdir(parents=True)
    dbfile.mark_exhausted(directory, "123", 4)
    dbfile.mark_exhausted(directory, "123", 2)  # the most trials it had is kept
    assert dbfile.exhausted(directory) == {"123": 4}
    (directory / dbfile.EXHAUSTED_FILE).write_text("[1, ")
    result, caught = corrupt_warnings(lambda: dbfile.exhausted(directory))
    assert result == {} and len(caught) == 1
    assert "search runs again at a larger budget" in str(caught[0].message)


def test_tune_counts_trials_in_a_database_the_caller_opened(tmp_path, monkeypatch):
    mod = matmul_module(8, 8, 8)
    directory = db_dir(tmp_path, TARGET)
    write_records(directory, [t.mod for t in extract_tasks(mod, TARGET)], per_task=3)
    database = open_database(tmp_path, TARGET)
    monkeypatch.setattr(tuner.records, "open_database",
                        lambda *a, **k: pytest.fail("opened the records again"))
    stats = tune(mod, TARGET, trials=3, records_dir=tmp_path, database=database)
    assert stats.new_trials == 0 and [t.records_before for t in stats.per_task] == [3]


def test_a_task_named_longer_than_a_file_name_gets_a_log_file(tmp_path):
    # Inception-v3's ReshapeTranspose mutant fused 25 operators into one task, whose log file
    # name passed the file system's 255 bytes: tuning stopped with "File name too long"
    from tvm_pet.tune.tuner import _task_logger, log_name
    name = "fused_reshape2_transpose1_" + "strided_slice_concatenate_" * 12 + "relu"
    assert len(name) > 255
    with _task_logger(tmp_path, name) as logger:
        logger.info("a line")
    (log,) = (tmp_path / "logs").iterdir()
    assert log.name == f"{log_name(name)}.log" and "a line" in log.read_text()
    assert log_name(name).startswith("fused_reshape2_transpose1_strided_slice")
    assert log_name(name) != log_name(name[:-1] + "x")  # the hash tells long names apart


# ------------------------------------------------------------------ gathers by index

def test_the_runner_times_candidates_on_in_bounds_indices():
    """MetaSchedule's default fills integer arguments at random: a gather by them (BERT's
    embedding ``take``) read out of bounds, killed the runner, and kept no record."""
    info = [("TENSOR", "int64", [1, 16]), ("TENSOR", "float32", [8, 3])]
    repeated = tuner.in_bounds_arguments(tvm.cpu(), info, 2)
    assert len(repeated) == 2
    for index, table in repeated:
        assert index.numpy().dtype == np.int64 and not index.numpy().any()
        assert table.numpy().std() > 0  # random floats, as MetaSchedule's default
    with pytest.raises(NotImplementedError):
        tuner.in_bounds_arguments(tvm.cpu(), [("SCALAR", "int64", [])], 1)


@pytest.mark.tuning
@only_when_selected
def test_an_embedding_take_gets_a_record(tmp_path):
    stats = tune_budget(embedding_module(), TARGET, 2, tmp_path)
    assert [s.best_s is not None for s in stats.per_task] == [True]


def test_the_plan_says_what_earlier_runs_spent_of_a_whole_model_budget(tmp_path):
    # swin_t, rerun with the --budget 30m its first run had spent: the plan said "tuning the
    # whole model within 30 minutes for this target first", and tuned nothing
    from tvm_pet.pipeline.options import WholeBudget
    from tvm_pet.tune.records_plan import records_plan
    mod = matmul_module(8, 8, 8, copies=2)
    tasks = extract_tasks(mod, TARGET)
    fresh = records_plan(mod, TARGET, tmp_path)
    assert (fresh.own_trials, fresh.tuned_s) == (0, 0.0)
    assert "tuning the whole model within 30 minutes for this target first (MetaSchedule" in \
        fresh.summary(budget=WholeBudget(minutes=30.0))
    write_records(db_dir(tmp_path, TARGET), [t.mod for t in tasks], per_task=3)
    spent = tuner.MinutesSpent(db_dir(tmp_path, TARGET) / tuner.MinutesSpent.FILE)
    spent.put(tuner.MinutesSpent.key(tasks), 1805.7)
    plan = records_plan(mod, TARGET, tmp_path)
    assert (plan.own_trials, plan.tuned_s) == (6, 1805.7)
    assert plan.summary(budget=WholeBudget(minutes=30.0)).endswith(
        "; the whole-model budget of 30 minutes was spent by earlier runs on these records "
        "(30m05s): the original's kernels are not tuned again")
    forty = plan.summary(budget=WholeBudget(minutes=40.0))
    assert "within 40 minutes for this target first (30m05s of it spent by earlier runs on " \
           "these records, 9m54s left) (MetaSchedule" in forty
    assert "within 100 trials for this target first (6 trials of it spent by earlier runs " \
           "on these records, 94 trials left)" in plan.summary(budget=WholeBudget(trials=100))
    assert "budget of 6 trials was spent" in plan.summary(budget=WholeBudget(trials=6))
    # the same with PET's mutants charged inside the budget (the line had said nothing of it)
    inside = plan.summary(budget=WholeBudget(trials=100), inside_share=0.25)
    assert "within 100 trials (PET's mutants inside it: 25% kept for them) for this target " \
           "first (6 trials of it spent by earlier runs on these records, 94 trials left)" \
           in inside
    assert "budget of 6 trials (PET's mutants inside it: 25% kept for them) was spent" in \
        plan.summary(budget=WholeBudget(trials=6), inside_share=0.25)
    # the first round: kernels without records of their own get what the time left holds at
    # 1.7 s a trial (9m54s: all 8 of a batch), or half a budget in trials over the kernels
    assert plan.own == 0  # the records written here are stand-ins, not schedules to apply
    assert ("after a first round that it does not cut short: one batch per kernel, 8 trials for "
            "each of the 2 kernels (about 27s at 1.7 s a trial))" in forty)
    assert "the 2 kernels, at random (about 3s at 1.7 s a trial)" in plan.summary(  # 3 s: 1
        budget=WholeBudget(minutes=1805.7 / 60 + 0.05))
    assert "one batch per kernel, 25 trials for each of the 2 kernels)" in \
        fresh.summary(budget=WholeBudget(trials=100))
