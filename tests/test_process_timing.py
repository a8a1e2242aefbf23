"""Timing spread over fresh processes (tvm_pet.tune.process_timing) and its use by the TVM
toolchain, the confirm stage's looks and the CLI."""
from __future__ import annotations

import filecmp

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402

from tvm_pet.errors import PetError  # noqa: E402
from tvm_pet.pipeline.tvm_backend import TVMToolchain  # noqa: E402
from tvm_pet.tune.process_timing import time_in_processes  # noqa: E402
from tvm_pet.tune.targets import resolve_target  # noqa: E402

F32 = "float32"


def matmul_module(n: int) -> tvm.IRModule:
    """x[4, n] @ x^T: two modules of different n compute different things on different
    inputs, one n is enough for a pair."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, n), F32))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(x, relax.op.permute_dims(x)))
        bb.emit_func_output(out)
    return bb.finalize()


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two executables of the same function (separate builds) and their shared libraries."""
    folder = tmp_path_factory.mktemp("libs")
    executables = [tvm.compile(matmul_module(16), target=resolve_target("llvm"))
                   for _ in range(2)]
    paths = []
    for i, ex in enumerate(executables):
        paths.append(str(folder / f"m{i}.so"))
        ex.export_library(paths[-1])
    return executables, paths


def test_rounds_are_spread_over_processes_and_each_process_median_is_kept(pair):
    _, paths = pair
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    timings = time_in_processes({"a": paths[0], "b": paths[1]}, [x], processes=2, rounds=3,
                                number=2, repeat=2)
    assert set(timings) == {"a", "b"}
    for timing in timings.values():
        # ceil(3 / 2) = 2 rounds in each of 2 processes, 2 samples a round
        assert len(timing.samples) == 8 and len(timing.layouts) == 2
        assert all(0 < s < 1 for s in timing.samples)
        assert timing.min <= min(timing.layouts) <= max(timing.layouts) <= timing.max
        assert timing.median == pytest.approx(float(np.median(timing.samples)))


def test_a_worker_that_fails_says_why(pair, tmp_path):
    _, paths = pair
    x = np.zeros((4, 16), np.float32)
    with pytest.raises(PetError, match="a timing process failed"):
        time_in_processes({"a": paths[0], "b": str(tmp_path / "missing.so")}, [x], processes=1,
                          rounds=1, number=1, repeat=1)


def test_a_worker_past_its_time_is_stopped_with_a_clear_error(pair):
    _, paths = pair
    with pytest.raises(PetError, match="ran past"):
        time_in_processes({"a": paths[0], "b": paths[1]}, [np.zeros((4, 16), np.float32)],
                          processes=1, rounds=1, number=1, repeat=1, timeout_s=0.01)


def test_the_toolchain_exports_each_executable_once_and_times_in_processes(pair, tmp_path):
    executables, _ = pair
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    spread = TVMToolchain("llvm", str(tmp_path / "records"), timing_processes=2)
    first = spread.time({"baseline": executables[0], "optimized": executables[1]}, [x],
                        rounds=2, number=1, repeat=2)
    assert [len(t.layouts) for t in first.values()] == [2, 2]
    libraries = list(spread._libraries)
    again = spread.time({"baseline": executables[0], "optimized": executables[1]}, [x],
                        rounds=2, number=1, repeat=2)
    assert list(spread._libraries) == libraries  # exported once, timed twice
    # writing the kept executable out copies its library rather than exporting it again
    spread.export(executables[0], str(tmp_path / "baseline.so"))
    kept = dict((id(ex), path) for ex, path in libraries)[id(executables[0])]
    assert filecmp.cmp(kept, tmp_path / "baseline.so", shallow=False)
    assert all(len(t.samples) == 4 for t in again.values())
    # one executable alone, or timing_processes=1, is timed in this process
    alone = spread.time({"baseline": executables[0]}, [x], rounds=1, number=1, repeat=2)
    here = TVMToolchain("llvm", str(tmp_path / "records")).time(
        {"baseline": executables[0], "optimized": executables[1]}, [x], rounds=1, number=1,
        repeat=2)
    assert alone["baseline"].layouts == () and here["optimized"].layouts == ()
    assert len(here["optimized"].samples) == 2


def test_the_cli_refuses_fewer_than_one_timing_process(tmp_path, capsys):
    from tvm_pet.cli import main
    assert main(["optimize", str(tmp_path / "m.onnx"), "--out", str(tmp_path / "out"),
                 "--timing-processes", "0"]) != 0
    assert "--timing-processes 0: at least 1" in capsys.readouterr().err


def test_a_look_spread_over_processes_plans_their_start_out_of_the_time_left():
    import time
    import types

    from tvm_pet.pipeline.confirm import PROCESS_START_S, _Bench, _cannot_pay
    from tvm_pet.pipeline.options import DriverOptions

    def bench(processes, left_s):
        toolchain = types.SimpleNamespace(timing_processes=processes)
        return _Bench(toolchain, DriverOptions(), (), 0.01, time.perf_counter() + left_s)
    assert bench(1, 1).start_s() == 0.0 and bench(3, 1).start_s() == 3 * PROCESS_START_S
    # 25 s left, 0.2 s calls: the asked 5 rounds of 3 x 3 calls (20.4 s) fit in this process;
    # less the start of two processes they do not, and the plan takes fewer calls per sample
    assert bench(1, 25).plan(0.2, 5, 1).number == 3 and bench(2, 25).plan(0.2, 5, 1).number < 3
    # the smallest useful look of 0.5 s calls (9.5 s) fits 12 s in this process, not in two
    assert not _cannot_pay(bench(1, 12), 0.5, 1) and _cannot_pay(bench(2, 12), 0.5, 1)


def _load_messages(path) -> str:
    """What loading the library at ``path`` prints, in a fresh process (TVM's native log)."""
    import subprocess
    import sys
    code = f"import tvm; tvm.runtime.load_module({str(path)!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stderr


def test_a_build_run_here_is_written_without_tvms_memory_scope_warnings(tmp_path):
    """A VM started on an executable adds an empty memory scope per constant, and a library
    exported from it afterwards prints "Scope Loaded" per constant on every load; the
    toolchain runs its builds from their exported libraries, so the written ones load
    quietly."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 16), F32))
    w = np.random.default_rng(2).standard_normal((16, 8)).astype(np.float32)
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(x, relax.const(w)))
        bb.emit_func_output(out)
    toolchain = TVMToolchain("llvm", str(tmp_path / "records"))
    executable = toolchain.build(bb.finalize())
    xs = np.ones((4, 16), np.float32)
    (got,) = toolchain.run(executable, [xs])
    np.testing.assert_allclose(got, xs @ w, rtol=1e-5, atol=1e-5)
    toolchain.export(executable, str(tmp_path / "written.so"))
    assert "Scope Loaded" not in _load_messages(tmp_path / "written.so")
    # the same executable exported after a VM ran on it: what the toolchain avoids
    relax.VirtualMachine(executable, tvm.cpu())
    executable.export_library(str(tmp_path / "after_a_vm.so"))
    assert "Scope Loaded" in _load_messages(tmp_path / "after_a_vm.so")


def test_a_toolchain_and_its_copies_never_write_two_builds_to_one_library(pair, tmp_path):
    """A copy made after the first export (``with_lowering``) exports into the same folder
    with the same count: each executable keeps its own library, and each runs as itself."""
    executables, _ = pair
    other = tvm.compile(matmul_module(8), target=resolve_target("llvm"))
    toolchain = TVMToolchain("llvm", str(tmp_path / "records"))
    toolchain.run(executables[0], [np.ones((4, 16), np.float32)])
    copy = toolchain.with_lowering(None)
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    (got,) = copy.run(other, [x])
    np.testing.assert_allclose(got, x @ x.T, rtol=1e-6)
    (first,) = toolchain.run(executables[1], [np.ones((4, 16), np.float32)])
    np.testing.assert_allclose(first, np.full((4, 4), 16.0), rtol=1e-6)
    paths = [path for _, path in toolchain._libraries]
    assert len(set(paths)) == len(paths) == 3
    assert [path for _, path in copy._libraries] == paths
