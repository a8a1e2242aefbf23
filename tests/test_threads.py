"""TVM's CPU thread pool is sized to the physical cores (``tvm_pet.tune.threads``): TVM's own
default is half the logical CPUs on x86-64, which on a machine with one thread per core leaves
half the cores idle."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("tvm")

from tvm_pet.tune.threads import physical_cores  # noqa: E402

PROBE = ("import tvm; from tvm_pet.pipeline import tvm_toolchain; tvm_toolchain('llvm'); "
         "print(tvm.get_global_func('runtime.NumThreads')())")


def threads_in_child(**env: str) -> int:
    base = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", PROBE], env=base | env, capture_output=True,
                         text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def test_the_llvm_toolchain_runs_tvm_on_every_physical_core():
    cores = physical_cores()
    if cores is None:
        pytest.skip("this machine's CPU topology cannot be read")
    assert threads_in_child() == cores


def test_a_thread_count_the_user_set_is_kept():
    assert threads_in_child(TVM_NUM_THREADS="1") == 1


def test_the_test_run_leaves_each_worker_on_every_cpu():
    """The test settings (root conftest.py) give each pytest worker a one-thread TVM pool; TVM
    binds the thread that starts such a pool to CPU 0 unless ``TVM_BIND_THREADS=0``, and then
    both workers would share one core."""
    probe = ("import os, tvm; before = os.sched_getaffinity(0); "
             "tvm.get_global_func('runtime.NumThreads')(); "
             "print(before == os.sched_getaffinity(0))")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["TVM_NUM_THREADS"] = "1"  # the pool size that pins, whatever this run was given
    assert env["TVM_BIND_THREADS"] == "0"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip().splitlines()[-1] == "True"
