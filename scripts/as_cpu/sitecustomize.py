"""Run tvm_pet as if this CPU were another x86 level, in every Python process, for checks only.

    FAKE_MCPU=haswell PYTHONPATH=scripts/as_cpu python -m pytest -q -n 2 \\
        -m "not slow and not tuning and not gpu" --doctest-modules tests tvm_pet

``tvm_pet.tune.targets.detect_mcpu`` then returns ``FAKE_MCPU`` (when asked about this machine,
not about a given ``/proc/cpuinfo`` text), and the flags that level lacks are hidden from
``missing_cpu_features`` (code of a wider level stops with its clear error, as on a real CPU
of the level, where it would have run here), so ``resolve_target("llvm")`` names that level and the
records are looked up for it: the CI of an AVX2 host, on an AVX-512 one (whose CPU runs the AVX2
code). Python imports this file at start-up from ``PYTHONPATH``, subprocesses included. It imports
nothing of tvm_pet's: an import hook replaces ``detect_mcpu`` as soon as
``tvm_pet.tune.targets`` has run, before any other module can take it by name, so what
``import tvm_pet`` loads is what it loads without the patch, and the tests of what
``import tvm_pet`` loads pass under it.
"""
import importlib.abc
import importlib.machinery
import os
import sys

_FAKE = os.environ.get("FAKE_MCPU")
_MODULE = "tvm_pet.tune.targets"


#: The /proc/cpuinfo flags (as ``targets._cpu_flags`` spells them: no ``_``) a CPU of each fake
#: level lacks, by prefix: hidden from ``missing_cpu_features``, so that code this level cannot
#: run stops with its clear error here too, where this CPU would have run it.
_LACKS = {"haswell": ("avx512", "amx", "avxvnni"),
          "generic": ("avx", "fma", "f16c", "pni", "ssse3", "sse4", "amx")}


def _patch(targets) -> None:
    real = targets.detect_mcpu
    targets.detect_mcpu = lambda cpuinfo=None: real(cpuinfo) if cpuinfo is not None else _FAKE
    flags, lacks = targets._cpu_flags, _LACKS.get(_FAKE, ())

    def fake_flags(cpuinfo):
        have = flags(cpuinfo)
        if cpuinfo is not None or have is None:
            return have
        return frozenset(flag for flag in have if not flag.startswith(lacks))

    targets._cpu_flags = fake_flags


class _Loader(importlib.abc.Loader):
    """The module's own loader, with ``detect_mcpu`` replaced once the module has run."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``tvm_pet.tune.targets`` as Python would, and hands it out with ``_Loader``."""

    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


if _FAKE:
    sys.meta_path.insert(0, _Finder())
