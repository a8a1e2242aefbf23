"""CUDA without a GPU: device code built to ``sm_XY`` binaries with nvcc, and untuned kernels
scheduled with TVM's GPU defaults (dlight).

Where it sits: beside ``compile.build_with_records``. ``build(mod, cuda_target)`` already compiles a Relax
module for CUDA: the target's default pipeline schedules every kernel without a tuning record
with ``tvm.s_tir.dlight`` (``gpu.Matmul``, ``GEMV``, ``Reduction``, ``GeneralReduction``,
``Fallback``), since a CUDA kernel with no schedule at all does not build. Without
``libcuda.so.1`` TVM's CUDA runtime does not load, so the device module it returns holds CUDA C
source only and neither nvcc nor NVRTC runs. This module closes
that gap:

- ``device_sources`` takes the CUDA source out of a built executable;
- ``compile_device_code`` compiles it with nvcc for the target's ``arch`` (TVM's own nvcc
  command line, ``tvm.support.nvcc``), so nvcc and ptxas errors surface here, and keeps each
  binary under the SHA-256 of its source. On the GPU machine, loading the exported library asks
  ``tvm_callback_cuda_compile`` for a binary of exactly that source; ``scripts/gpu/run_cuda.py``
  answers with these binaries instead of compiling again;
- ``default_schedule`` replaces the pipeline's ``ApplyDefaultSchedule`` with the same dlight
  rules, tried in the same order, except that a rule which *raises* on a kernel is passed over
  (with a ``DefaultScheduleFallback`` warning naming the kernel and the rule) instead of aborting
  the whole build. dlight's ``gpu.Matmul`` asserts on some fused PET mutants ("consumers of the
  cache-write stage that are not properly inlined"); its ``Fallback`` rule then schedules them;
- ``schedule_untuned`` and ``measure_primfunc_cuda`` give one task's PrimFunc the same dlight
  schedule the build gives it, so untuned CUDA kernels can be costed (the timing needs a GPU).
"""
from __future__ import annotations

import hashlib
import re
import shutil
import statistics
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import tvm

from tvm_pet.errors import PetError
from tvm_pet.tune.targets import resolve_target

#: The architecture the offline CUDA tools build for by default (H100 and H200: ``sm_90``).
DEFAULT_GPU_ARCH = "sm_90"
#: A kernel definition: ``__global__ void [__launch_bounds__(N)] name(``.
_KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(")
#: Suffix of the binaries ``compile_device_code`` writes.
BINARY_SUFFIX = ".fatbin"


@dataclass(frozen=True, slots=True)
class DeviceBinary:
    """One CUDA module compiled by nvcc: its source's SHA-256, sizes, kernels and nvcc time."""
    sha256: str
    kernels: tuple[str, ...]
    source_bytes: int
    binary_bytes: int
    nvcc_s: float
    cached: bool


def cuda_target(arch: str = DEFAULT_GPU_ARCH) -> tvm.target.Target:
    """Return the complete CUDA target for ``arch`` (thread limits filled in by
    ``resolve_target``).

    Example:
        >>> str(cuda_target("sm_90").attrs["arch"])
        'sm_90'
    """
    return resolve_target({"kind": "cuda", "arch": arch})


def nvcc_path() -> str | None:
    """Return the path of ``nvcc`` on ``PATH``, or ``None``."""
    return shutil.which("nvcc")


def device_sources(executable) -> list[str]:
    """Return the CUDA C source of every CUDA module inside a built executable.

    Args:
        executable: a ``relax.VMExecutable`` (or a runtime module) built for a CUDA target.

    Returns:
        One source per CUDA module (TVM emits one per build), in import order.
    """
    root = executable.mod if hasattr(executable, "mod") else executable
    sources, stack, seen = [], [root], set()
    while stack:
        module = stack.pop(0)
        if id(module) in seen:
            continue
        seen.add(id(module))
        if module.kind == "cuda":
            sources.append(str(module.inspect_source("cuda")))
        stack.extend(module.imports)
    return sources


def kernel_names(source: str) -> tuple[str, ...]:
    """Return the ``__global__`` kernel names defined in a CUDA source."""
    return tuple(_KERNEL.findall(source))


def source_key(source: str) -> str:
    """Return the key of a CUDA source: the hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(source.encode()).hexdigest()


def nvcc_arch_flags(arch: str, ptx: bool = True) -> list[str]:
    """nvcc flags that embed SASS for ``arch`` and, when ``ptx``, its PTX (which newer GPUs can
    JIT).

    Raises:
        PetError: when ``arch`` is not of the form ``sm_XY``.
    """
    if not arch.startswith("sm_") or not arch[3:].rstrip("af").isdigit():
        raise PetError(f"CUDA arch {arch!r} is not of the form sm_XY (e.g. sm_90)")
    number = arch[3:]
    flags = ["-gencode", f"arch=compute_{number},code=sm_{number}"]
    return flags + (["-gencode", f"arch=compute_{number},code=compute_{number}"] if ptx else [])


def compile_device_code(executable, target, out_dir: str | Path,
                        ptx: bool = True) -> list[DeviceBinary]:
    """Compile the CUDA source of a built executable with nvcc and keep the binaries.

    Each binary is written to ``<out_dir>/<sha256 of the source>.fatbin``; a source compiled
    before (the same file exists) is not compiled again.

    Args:
        executable: a ``relax.VMExecutable`` built for ``target``.
        target: a CUDA target (spec or ``tvm.target.Target``) with an explicit ``arch``.
        out_dir: the folder of the binaries.
        ptx: also embed the PTX (default); ``False`` keeps only the SASS for ``arch``, about
            half the size, for binaries that run on that arch alone.

    Returns:
        One ``DeviceBinary`` per CUDA module.

    Raises:
        PetError: when nvcc is missing, the target is not CUDA, or nvcc rejects the source.
    """
    from tvm.support import nvcc

    target = resolve_target(target)
    if target.kind.name != "cuda":
        raise PetError(f"compile_device_code needs a CUDA target, not {target.kind.name!r}")
    if nvcc_path() is None:
        raise PetError("nvcc is not on PATH: install the CUDA toolkit (nvcc 12 or 13) to build "
                       "CUDA binaries without a GPU")
    arch = str(target.attrs["arch"])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    binaries = []
    for source in device_sources(executable):
        key = source_key(source)
        path = out / f"{key}{BINARY_SUFFIX}"
        cached = path.exists()
        start = time.perf_counter()
        if not cached:
            try:
                with target:  # TVM's nvcc command reads the compute version of the current target
                    blob = nvcc.compile_cuda(source, target_format="fatbin",
                                             arch=nvcc_arch_flags(arch, ptx), compiler="nvcc")
            except RuntimeError as err:  # TVM raises RuntimeError with nvcc's output
                errors = [line.strip() for line in str(err).splitlines()
                          if "error" in line and "warning" not in line]
                raise PetError(f"nvcc failed on a CUDA module for {arch}: "
                               + ("; ".join(errors) or str(err))) from err
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(bytes(blob))
            tmp.replace(path)
        binaries.append(DeviceBinary(key, kernel_names(source), len(source.encode()),
                                     path.stat().st_size, time.perf_counter() - start, cached))
    return binaries


class DefaultScheduleFallback(UserWarning):
    """A dlight rule raised on a kernel; the next rule was tried (see ``default_schedule``)."""


def _pipeline_rules(target: tvm.target.Target) -> list:
    """The dlight rules of the ``ApplyDefaultSchedule`` pass of TVM's own CUDA pipeline."""
    from tvm.relax.backend.cuda import pipeline

    passes = [p for p in pipeline.legalize_passes(target) if p.info.name == "ApplyDefaultSchedule"]
    if len(passes) != 1:
        raise PetError("TVM's CUDA pipeline has no ApplyDefaultSchedule (dlight) pass; this "
                       "tvm_pet expects apache-tvm 0.27")
    return list(passes[0].rules)


def default_schedule(target, rules: list | None = None) -> tvm.transform.Pass:
    """Return the pipeline's dlight default schedule as a pass that survives a failing rule.

    For every PrimFunc not yet scheduled (tuned kernels are), the rules are tried in the
    pipeline's order and the first that returns a schedule wins, as in dlight's
    ``ApplyDefaultSchedule``. A rule that raises (dlight signals unsupported patterns with
    ``AssertionError`` as well as ``None``) is reported as a ``DefaultScheduleFallback`` warning
    and the next rule is tried. The pass keeps the name ``ApplyDefaultSchedule``.

    Args:
        target: a CUDA target or spec.
        rules: the dlight rules, in order (default: those of TVM's CUDA pipeline).
    """
    from tvm import tirx

    target = resolve_target(target)
    rules = _pipeline_rules(target) if rules is None else list(rules)

    @tvm.transform.module_pass(opt_level=0, name="ApplyDefaultSchedule")
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        updated = {}
        for gvar, func in mod.functions_items():
            if not isinstance(func, tirx.PrimFunc) or _is_scheduled(func):
                continue
            func_target = func.attrs.get("target") if func.attrs is not None else None
            sch = schedule_by_rules(func, func_target or target, rules, gvar.name_hint)
            if sch is not None:
                updated[gvar] = sch.mod["main"].with_attr("tirx.is_scheduled", True)
        for gvar, func in updated.items():
            mod[gvar] = func
        return mod

    return apply


def schedule_by_rules(func, target, rules: list | None = None, name: str = "main"):
    """Schedule one PrimFunc by the first dlight rule that returns a schedule, as
    ``default_schedule`` does for each kernel of a module.

    A rule that raises is reported as a ``DefaultScheduleFallback`` warning naming ``name``, and
    the next rule is tried.

    Args:
        func: the PrimFunc.
        target: a CUDA target (``Target``).
        rules: the dlight rules, in order (default: those of TVM's CUDA pipeline).
        name: the kernel's name, for the warnings.

    Returns:
        The traced ``s_tir.Schedule``, or ``None`` when no rule schedules the function.
    """
    from tvm import s_tir

    raised = []
    for rule in _pipeline_rules(target) if rules is None else rules:
        try:
            space = rule.apply(func, target, False)
        except (AssertionError, ValueError, RuntimeError) as err:  # TVM's builtin errors
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            warnings.warn(DefaultScheduleFallback(
                f"dlight {type(rule).__name__} failed on {name} "
                f"({type(err).__name__}: {first}); trying the next rule"), stacklevel=3)
            raised.append(type(rule).__name__)
            continue
        if space is None:
            continue
        if raised:
            warnings.warn(DefaultScheduleFallback(
                f"{name} scheduled by dlight {type(rule).__name__} after "
                f"{', '.join(raised)} raised"), stacklevel=3)
        return space if isinstance(space, s_tir.Schedule) else space[0]
    return None


def with_default_schedule(passes: list, target) -> list:
    """``passes`` with TVM's ``ApplyDefaultSchedule`` replaced by ``default_schedule(target)``
    (unchanged for a target other than CUDA)."""
    target = resolve_target(target)
    if target.kind.name != "cuda":
        return passes
    return [default_schedule(target) if p.info.name == "ApplyDefaultSchedule" else p
            for p in passes]


def _is_scheduled(func) -> bool:
    return func.attrs is not None and bool(func.attrs.get("tirx.is_scheduled", False))


def schedule_untuned(task_mod: tvm.IRModule, target) -> tvm.IRModule:
    """Return a task's module with TVM's default GPU schedule, as ``compile.build_with_records`` gives it
    (``default_schedule``: the rules of the target's own Relax pipeline, so that a task is costed
    with the schedule the final build uses)."""
    target = resolve_target(target)
    with target, tvm.transform.PassContext(opt_level=3):
        return default_schedule(target)(task_mod)


def build_untuned(task_mod: tvm.IRModule, target) -> tvm.runtime.Module:
    """Build one task's PrimFunc for CUDA with the default GPU schedule (codegen; no GPU)."""
    target = resolve_target(target)
    return tvm.tirx.build(schedule_untuned(task_mod, target), target=target)


def gpu_present() -> bool:
    """Whether TVM's CUDA runtime is loaded and sees GPU 0."""
    return bool(tvm.runtime.enabled("cuda")) and bool(tvm.cuda(0).exist)


def measure_primfunc_cuda(task_mod: tvm.IRModule, target=None, *, repeat: int = 3,
                          seed: int = 0) -> float:
    """Time one task's PrimFunc on GPU 0 with the default GPU schedule; median seconds.

    Raises:
        PetError: when this machine has no CUDA GPU (or TVM's CUDA runtime is not loaded).
    """

    target = resolve_target(target if target is not None else "cuda")
    if not gpu_present():
        raise PetError("timing an untuned CUDA kernel needs a CUDA GPU; this machine has none "
                       "(tvm-pet optimize --dry-run builds without one)")
    from tvm_pet.tune.record_check import random_args
    rt_mod = build_untuned(task_mod, target)
    device = tvm.cuda(0)
    args = random_args(task_mod, device, seed)
    timer = rt_mod.time_evaluator("main", device, number=10, repeat=repeat, min_repeat_ms=20)
    return float(statistics.median(timer(*args).results))
