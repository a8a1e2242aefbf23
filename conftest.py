"""pytest's settings for the whole repository: what ``--doctest-modules`` skips, and a count.

The README's test command runs the examples in the docstrings of ``tvm_pet`` and ``tests``
(``--doctest-modules tests tvm_pet``). Every module imports quickly and needs no GPU, so where
TVM is installed (it is a dependency) nothing is ignored. Without TVM only the engine's examples
can run: the modules of the TVM side import ``tvm`` at the top, so they are not collected.

After the run, one line says how many of the tests were doctests, so that the CI log shows it.
"""
import importlib.util
import os

import pytest

# the README's test command runs two pytest workers on this project's 2-core machines: one TVM
# thread each (tvm_pet would otherwise give each worker every core: tvm_pet.tune.threads)
os.environ.setdefault("TVM_NUM_THREADS", "1")
# and unpinned: TVM binds the thread that starts a one-thread pool to CPU 0, so both workers (and
# every LLVM compile, onnxruntime run and search in them) would share one core of the two
os.environ.setdefault("TVM_BIND_THREADS", "0")

collect_ignore_glob: list[str] = []
if importlib.util.find_spec("tvm") is None:  # the TVM side; the engine imports without TVM
    collect_ignore_glob += ["tvm_pet/relax/*", "tvm_pet/tune/*", "tvm_pet/pipeline/tvm_toolchain.py",
                            "tvm_pet/testing/real_models.py", "tests/fuzz_e2e.py",
                            "tests/onnx_suite.py", "tests/bad_inputs.py"]


@pytest.fixture(autouse=True, scope="session")
def _kernel_costing_unwatched():
    """Kernel costing blind to other processes' CPU use (``tvm_pet.tune.contention``) in tests.

    The test command runs two workers on two cores, so every kernel measured in a test shares
    the CPU with the other worker: costing would measure each kernel twice and cache none, and
    tests of caching would turn on what the other worker was doing. The watch itself is tested
    with its own readers (``tests/test_contention.py``).
    """
    if importlib.util.find_spec("tvm") is None:
        yield
        return
    from tvm_pet.tune import contention, kernels
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "CpuWatch", lambda: contention.CpuWatch(reader=lambda: None))
        yield


def pytest_terminal_summary(terminalreporter):
    """Print ``doctests: N passed, ...`` when the run had doctests (pytest counts them as tests)."""
    counts = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        ids = {r.nodeid for r in terminalreporter.stats.get(outcome, [])
               if str(getattr(r, "location", ("", 0, ""))[2]).startswith("[doctest]")}
        if ids:
            counts[outcome] = len(ids)
    if counts:
        terminalreporter.write_line("doctests: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
