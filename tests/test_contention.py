"""Kernel times measured while other processes used the CPU (tvm_pet.tune.contention): found,
measured again, and never cached for later processes.

The test run itself has two workers on two cores, so the repository's ``conftest.py`` makes
kernel costing blind to the CPU in every other test; these tests give the watch their own
readers.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.records import TARGET, matmul_module
from tvm_pet.tune import contention, kernels
from tvm_pet.tune.compile import extract_tasks
from tvm_pet.tune.kernels import SHARED_RETRIES, task_times
from tvm_pet.tune.records import UNTUNED_FILE, UntunedTimes


@pytest.mark.skipif(contention.read_cpu() is None, reason="no /proc/stat: nothing to watch")
def test_a_process_running_flat_out_beside_a_measurement_makes_it_shared():
    # It says when it spins: a Python that starts slowly (a loaded machine, a sitecustomize that
    # imports tvm) must not leave the watch over a process still starting.
    busy = subprocess.Popen([sys.executable, "-c",
                             "import time\nprint('spinning', flush=True)\n"
                             "end = time.time() + 3\nwhile time.time() < end: pass"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout.readline().strip() == "spinning"
        time.sleep(0.1)
        with contention.CpuWatch() as watch:
            end = time.perf_counter() + 0.5
            while time.perf_counter() < end:  # this process's own work is not the others'
                pass
    finally:
        busy.kill()
        busy.wait()
    assert 0.3 < watch.other_s and watch.window_s >= 0.5 and watch.shared


class _Others:
    """A reader of CPU times where other processes use ``burst`` seconds during each measurement
    listed in ``shared`` (by its number, from 0)."""

    def __init__(self, shared: set[int], burst: float = 1.0) -> None:
        self.shared, self.burst, self.count, self.others = shared, burst, 0, 0.0

    def read(self):
        own = time.process_time()
        return own + self.others, own

    def measure(self, seconds):
        def run(_mod, _target, repeat):
            if self.count in self.shared:
                self.others += self.burst
            self.count += 1
            return seconds[self.count - 1]
        return run


@pytest.fixture
def watched(monkeypatch):
    """Install an ``_Others`` reader for kernel costing; returns a function that makes one."""
    def install(shared: set[int]) -> _Others:
        others = _Others(shared)
        monkeypatch.setattr(kernels, "CpuWatch",
                            lambda: contention.CpuWatch(reader=others.read, cores=2))
        return others
    return install


def _task():
    (task,) = extract_tasks(matmul_module(16, 32, 8), TARGET)
    return task


def test_a_kernel_measured_on_a_shared_cpu_is_measured_again(tmp_path, watched):
    task, cache = _task(), UntunedTimes(tmp_path / UNTUNED_FILE)
    others = watched({0})  # the first try shared, the second not
    (time_,) = task_times([task], TARGET, cache=cache,
                          measure_untuned=others.measure([9e-3, 1e-3]))
    assert others.count == 2 and time_.seconds == 1e-3 and time_.source == "untuned"
    assert cache.get(TARGET, task.shash) == 1e-3
    assert cache.held(TARGET, task.shash) is None


def test_a_time_shared_in_every_try_is_used_but_measured_again_by_the_next_process(
        tmp_path, watched):
    task, path = _task(), tmp_path / UNTUNED_FILE
    others = watched(set(range(10)))  # others busy throughout
    cache = UntunedTimes(path)
    (time_,) = task_times([task], TARGET, cache=cache,
                          measure_untuned=others.measure([5e-3, 4e-3]))
    assert others.count == 1 + SHARED_RETRIES and time_.seconds == 4e-3  # the fastest try
    assert cache.get(TARGET, task.shash) is None  # not cached as the kernel's time
    assert cache.held(TARGET, task.shash) == 4e-3
    saved = json.loads(path.read_text()) if path.exists() else {}
    assert not [k for k in saved if str(task.shash) in k]  # nothing of it in the file

    def fail(*_args, **_kwargs):
        raise AssertionError("measured again by the process that measured it")
    (again,) = task_times([task], TARGET, cache=cache, measure_untuned=fail)
    assert again.seconds == 4e-3

    quiet = watched(set())  # a later process, on a quiet CPU
    later = UntunedTimes(path)
    (fresh,) = task_times([task], TARGET, cache=later, measure_untuned=quiet.measure([1.2e-3]))
    assert quiet.count == 1 and fresh.seconds == 1.2e-3
    assert UntunedTimes(path).get(TARGET, task.shash) == 1.2e-3
    (reused,) = task_times([task], TARGET, cache=UntunedTimes(path), measure_untuned=fail)
    assert reused.seconds == 1.2e-3


def test_the_watch_reads_nothing_where_the_system_says_nothing():
    with contention.CpuWatch(reader=lambda: None, cores=os.cpu_count()) as watch:
        time.sleep(0.01)
    assert watch.other_s is None and not watch.shared and watch.window_s > 0


def test_optimize_says_how_much_of_the_cpu_others_used_while_a_look_was_timed(monkeypatch):
    """The TVM toolchain's timings carry the share of the CPU others used meanwhile (here a
    reader where others run flat out on one core of two all along)."""
    import numpy as np

    from tvm_pet.pipeline import tvm_backend
    from tvm_pet.pipeline.confirm import CPU_SHARED_ABOVE
    from tvm_pet.pipeline.toolchain import tvm_toolchain
    assert CPU_SHARED_ABOVE == contention.SHARE_LIMIT  # one limit, said in two layers

    def one_core_busy():
        own = time.process_time()
        return own + time.perf_counter(), own
    monkeypatch.setattr(tvm_backend, "CpuWatch",
                        lambda: contention.CpuWatch(reader=one_core_busy, cores=2))
    toolchain = tvm_toolchain("llvm")
    executable = toolchain.build(matmul_module(16, 32, 8))
    x = np.ones((16, 32), "float32")
    timings = toolchain.time({"a": executable, "b": executable}, [x], rounds=1, number=1,
                             repeat=2)
    assert set(timings) == {"a", "b"}
    assert all(t.others_share == pytest.approx(0.5, abs=0.05) for t in timings.values())
