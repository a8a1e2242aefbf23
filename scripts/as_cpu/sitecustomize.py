"""Run tvm_pet as if this CPU were another x86 level, in every Python process, for checks only.

    FAKE_MCPU=haswell PYTHONPATH=scripts/as_cpu python -m pytest -q -n 2 \\
        -m "not slow and not tuning and not gpu" --doctest-modules tests tvm_pet

``tvm_pet.tune.targets.detect_mcpu`` then returns ``FAKE_MCPU`` (when asked about this machine,
not about a given ``/proc/cpuinfo`` text), so ``resolve_target("llvm")`` names that level and the
records are looked up for it: the CI of an AVX2 host, on an AVX-512 one (whose CPU runs the AVX2
code). Python imports this file at start-up from ``PYTHONPATH``, subprocesses included. It
imports tvm (and tvm_pet's own imports) first, so the two tests of what ``import tvm_pet`` loads
(``test_names_a_tvm_user_reaches_for``, ``test_a_pt2_file_without_torch_names_the_extra``) fail
under it and pass without it. Found with it (2026-12-02): two tests that failed on AVX2 hosts.
"""
import os

_FAKE = os.environ.get("FAKE_MCPU")
if _FAKE:
    try:
        import tvm_pet.tune.targets as _targets
    except ImportError:  # an interpreter without tvm_pet: nothing to fake
        _targets = None
    if _targets is not None:
        _real = _targets.detect_mcpu
        _targets.detect_mcpu = lambda cpuinfo=None: _real(cpuinfo) if cpuinfo is not None else _FAKE
