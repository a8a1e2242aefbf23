"""Compilation targets: what ``"llvm"`` and ``"cuda"`` mean on this host, and a stable key per target.

``resolve_target`` turns a short spec into a complete ``tvm.target.Target``. The CPU target names
the CPU (``mcpu``) because MetaSchedule only emits AVX-512 when the target says the CPU has it, and
it gives ``num-cores`` because MetaSchedule's parallel rules need it. ``mcpu="native"`` is not an
option: the LLVM in the apache-tvm wheel rejects it with its conda triple and falls back to
``generic``.

``target_dir`` gives the directory name under ``tuning_logs/`` that holds the target's MetaSchedule
database. One database per target is required, not a convenience: the database lookup ignores the
target, so records of one target would silently be applied to another.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tvm

from tvm_pet.errors import PetError

#: The mcpu chosen for each x86 feature level, best first: (a /proc/cpuinfo flag, the LLVM CPU;
#: the flag without ``_``, as ``_cpu_flags`` gives it).
#: ``skylake-avx512`` is the oldest LLVM CPU with AVX-512 F/BW/DQ/VL, the part fp32 schedules use;
#: it keeps the key (and the tuning records) the same across AVX-512 hosts whose exact model LLVM
#: names differently (this KVM guest reports ``rocketlake`` for an Emerald Rapids host).
X86_MCPU_BY_FLAG = (("avx512f", "skylake-avx512"), ("avx2", "haswell"))

#: The x86 vector levels of LLVM CPUs, widest first: the ``mcpu`` values ``detect_mcpu`` gives
#: and ``None`` (generic x86-64, SSE2 only). Records of any of these serve any other (below).
X86_LEVELS: tuple[str | None, ...] = (*(mcpu for _, mcpu in X86_MCPU_BY_FLAG), None)

#: Thread limits of a CUDA target; they are the same on every architecture from sm_75 on.
CUDA_LIMITS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
               "thread_warp_size": 32, "registers_per_block": 65536}

#: The CUDA architecture used when ``nvidia-smi`` is absent (nvcc 13 rejects anything below sm_75).
DEFAULT_CUDA_ARCH = "sm_80"

#: Attributes already in the key, or implied by it; any other attribute adds a hash to the key.
_KEYED_ATTRS = frozenset({"mcpu", "arch", "num-cores", "max_num_threads", *CUDA_LIMITS})


def resolve_target(spec: str | dict | tvm.target.Target | None = None) -> tvm.target.Target:
    """Return the complete target for a short spec.

    Args:
        spec: ``None`` or ``"llvm"`` (this CPU), ``"cuda"`` (the local GPU, or sm_80 without one),
            either with attributes as on TVM's command line (``"llvm -mcpu=haswell"``), a JSON
            object, a target dict (missing ``mcpu``/``arch``/``num-cores``/limits are filled in), or a
            ``tvm.target.Target`` (returned unchanged).

    Returns:
        A ``tvm.target.Target``.

    Raises:
        PetError: for a target kind other than llvm and cuda, or a dict TVM rejects.

    Example:
        >>> resolve_target("llvm").kind.name
        'llvm'
    """
    if isinstance(spec, tvm.target.Target):
        return spec
    if spec is None:
        spec = "llvm"
    if isinstance(spec, str):
        spec = _parse_spec(spec)
    if not isinstance(spec, dict) or "kind" not in spec:
        raise PetError(f"target spec {spec!r} is neither a kind name nor a dict with a 'kind'")
    kind = spec["kind"]
    if kind == "llvm":
        full = {"kind": "llvm", "mcpu": detect_mcpu(), "num-cores": available_cores()}
    elif kind == "cuda":
        full = {"kind": "cuda", "arch": detect_cuda_arch(), **CUDA_LIMITS}
    else:
        raise PetError(f"unsupported target kind {kind!r}: tvm_pet measures on 'llvm' and 'cuda'")
    if spec.get("mcpu") == "native":
        raise PetError("mcpu 'native' is not an option: the LLVM in the apache-tvm wheel falls back "
                       f"to generic x86-64 with it; name the CPU (e.g. {detect_mcpu()!r}, as "
                       "detected here) or leave mcpu out to have it detected")
    full.update(spec)  # an explicit None drops the attribute (``"mcpu": None`` is generic x86-64)
    full = {key: value for key, value in full.items() if value is not None}
    try:
        return tvm.target.Target(full)
    except (ValueError, TypeError, RuntimeError) as err:  # TVM raises these builtins
        raise PetError(f"TVM rejects the target {full}: {err}") from err


def _parse_spec(text: str) -> dict:
    """A target dict from ``"llvm"``, ``"llvm -mcpu=haswell -num-cores=4"`` or a JSON object."""
    if text.lstrip().startswith("{"):
        try:
            spec = json.loads(text)
        except ValueError as err:
            raise PetError(f"target {text!r} is not valid JSON: {err}") from err
        return spec
    kind, *attrs = text.split()
    if kind not in ("llvm", "cuda"):
        raise PetError(f"unknown target {text!r}: use 'llvm', 'cuda', 'llvm -mcpu=haswell' or a "
                       "JSON object such as '{\"kind\": \"llvm\", \"mcpu\": \"haswell\"}'")
    spec: dict = {"kind": kind}
    for attr in attrs:
        key, sep, value = attr.lstrip("-").partition("=")
        if not attr.startswith("-") or not sep or not key:
            raise PetError(f"target attribute {attr!r} in {text!r}: write it as -key=value")
        spec[key] = int(value) if value.isdigit() else value
    return spec


def detect_mcpu(cpuinfo: str | None = None) -> str | None:
    """Return the LLVM ``mcpu`` for this x86 CPU, from the flags in ``/proc/cpuinfo``.

    Args:
        cpuinfo: the text of ``/proc/cpuinfo`` (read from the file when omitted).

    Returns:
        ``"skylake-avx512"`` with AVX-512, ``"haswell"`` with AVX2, ``None`` (LLVM's generic
        x86-64) otherwise or when ``/proc/cpuinfo`` cannot be read.
    """
    flags = _cpu_flags(cpuinfo) or frozenset()
    for flag, mcpu in X86_MCPU_BY_FLAG:
        if flag in flags:
            return mcpu
    return None


#: LLVM's x86 vector-ISA features, the ones whose instructions stop a CPU without them with
#: "Illegal instruction" (checked against ``/proc/cpuinfo`` by ``missing_cpu_features``).
_X86_VECTOR_FEATURE = re.compile(r"(sse|ssse|avx|fma|f16c|amx)")
#: LLVM feature names that ``/proc/cpuinfo`` spells otherwise (after both drop ``.``, ``-``, ``_``).
_CPUINFO_NAME = {"sse3": "pni"}


def missing_cpu_features(target: tvm.target.Target, cpuinfo: str | None = None) -> list[str]:
    """Return the x86 vector features an llvm target's code may use that this CPU lacks.

    Code built for ``-mcpu=skylake-avx512`` stops an AVX2 CPU with "Illegal instruction", which
    kills the process (no Python error to catch), so whatever runs a target's code here asks
    this first. The target's features are LLVM's for its ``mcpu`` and ``mattr``; this CPU's are
    the ``flags`` of ``/proc/cpuinfo``.

    Args:
        target: a target; only llvm targets for x86 are checked.
        cpuinfo: the text of ``/proc/cpuinfo`` (read from the file when omitted).

    Returns:
        LLVM's names of the missing features, sorted; empty for another kind or architecture,
        or where ``/proc/cpuinfo`` has no ``flags`` line to tell (then nothing is known).

    Example:
        >>> avx512 = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})
        >>> avx2_cpu = "flags : fpu sse sse2 pni ssse3 fma sse4_1 sse4_2 avx f16c avx2"
        >>> missing_cpu_features(avx512, avx2_cpu)
        ['avx512bw', 'avx512cd', 'avx512dq', 'avx512f', 'avx512vl']
    """
    if target.kind.name != "llvm":
        return []
    triple = str(target.attrs.get("mtriple", "") or tvm.target.codegen.llvm_get_system_triple())
    if not re.match(r"(x86_64|i[3-6]86)", triple):
        return []
    have = _cpu_flags(cpuinfo)
    if have is None:
        return []
    wanted = {str(f) for f in tvm.target.codegen.llvm_get_cpu_features(target)}
    return sorted(f for f in wanted if _X86_VECTOR_FEATURE.match(f)
                  and _plain(_CPUINFO_NAME.get(f, f)) not in have)


def _plain(name: str) -> str:
    """A feature name without ``.``, ``-`` and ``_`` (LLVM's ``sse4.1`` is cpuinfo's ``sse4_1``)."""
    return re.sub(r"[._-]", "", name)


@functools.lru_cache(maxsize=8)
def _cpu_flags(cpuinfo: str | None) -> frozenset[str] | None:
    """The ``flags`` of ``/proc/cpuinfo`` (or of ``cpuinfo``), plain; None where there are none."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    line = next((line for line in cpuinfo.splitlines() if line.startswith("flags")), None)
    if line is None:
        return None
    return frozenset(_plain(flag) for flag in line.split(":", 1)[-1].split())


def require_runs_here(target: tvm.target.Target) -> None:
    """Raise a clear error before code of ``target`` that this CPU cannot run is run here.

    Raises:
        PetError: when :func:`missing_cpu_features` names any (the process would otherwise
            die of "Illegal instruction", with nothing to catch).
    """
    missing = missing_cpu_features(target)
    if missing:
        raise PetError(
            f"target {target_dir(target)} builds code with {', '.join(missing)} instructions, "
            "which this CPU does not have: running it here would stop the process with "
            f"'Illegal instruction'. Use --target llvm (this CPU: "
            f"{target_dir(resolve_target('llvm'))}), or tune over --rpc on a machine that has them")


def available_cores() -> int:
    """Return the number of CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def detect_cuda_arch() -> str:
    """Return ``sm_XY`` of GPU 0 as ``nvidia-smi`` reports it, or ``DEFAULT_CUDA_ARCH``."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return DEFAULT_CUDA_ARCH
    try:
        out = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return DEFAULT_CUDA_ARCH
    match = re.match(r"\s*(\d+)\.(\d+)", out)
    return f"sm_{match.group(1)}{match.group(2)}" if match else DEFAULT_CUDA_ARCH


def target_dir(target: tvm.target.Target) -> str:
    """Return a filesystem-safe, stable key of a target, e.g. ``llvm-skylake-avx512-c2``.

    The key is the kind, the ``mcpu`` (llvm) or ``arch`` (cuda), and the number of cores; any
    further attribute (``mattr``, say) adds an 8-digit hash of those attributes, so two targets that
    compile differently never share a directory.

    Args:
        target: a target, usually from ``resolve_target``.

    Returns:
        The key; it contains only letters, digits, ``.``, ``_`` and ``-``.

    Example:
        >>> target_dir(tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}))
        'llvm-skylake-avx512-c2'
    """
    attrs = _plain_attrs(target)
    parts = [target.kind.name]
    if target.kind.name == "cuda":
        parts.append(str(attrs.get("arch", "default")))
    else:
        parts.append(str(attrs.get("mcpu", "generic")))
    if "num-cores" in attrs:
        parts.append(f"c{attrs['num-cores']}")
    if attrs.get("mtriple") == tvm.target.codegen.llvm_get_system_triple():
        del attrs["mtriple"]  # TVM adds the host triple itself when mcpu is absent
    extra = {k: v for k, v in attrs.items() if k not in _KEYED_ATTRS}
    if extra:
        digest = hashlib.sha1(json.dumps(extra, sort_keys=True, default=str).encode()).hexdigest()
        parts.append(digest[:8])
    return re.sub(r"[^A-Za-z0-9._-]", "_", "-".join(parts))


def compatible_dirs(target: tvm.target.Target, keys: Iterable[str]) -> list[str]:
    """Return the record directories, among ``keys``, that may serve ``target``, best first.

    A MetaSchedule record is a schedule trace: loop splits, vectorization and parallel loops,
    which LLVM lowers to whatever vector instructions the target has. So the records of one x86
    CPU level apply to another: Skylake (AVX-512) records built for ``-mcpu=haswell`` give pure
    AVX2 code with the same outputs, and ran 10-25x faster than untuned kernels and within about
    10 % of records tuned on the Haswell target itself (benchmarks/results/compatible_records.md).
    Only llvm keys without extra attributes (no hash part) of a known x86 level qualify; the
    target's own key does not. Ranked: the same CPU level first (another core count), then wider
    vector levels before narrower ones, then the nearest core count.

    Args:
        target: the target that lacks records of its own.
        keys: directory names under a records root (``target_dir`` keys).

    Returns:
        The compatible keys, best first (empty for a CUDA target or a target with extra
        attributes).

    Example:
        >>> haswell = tvm.target.Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
        >>> compatible_dirs(haswell, ["cuda-sm_90", "llvm-haswell-c8", "llvm-skylake-avx512-c2"])
        ['llvm-haswell-c8', 'llvm-skylake-avx512-c2']
    """
    own = target_dir(target)
    parsed_own = _parse_x86_key(own)
    if parsed_own is None:
        return []
    level, cores = parsed_own
    ranked = []
    for key in set(keys):
        parsed = _parse_x86_key(key)
        if parsed is None or key == own:
            continue
        other_level, other_cores = parsed
        ranked.append(((other_level != level, other_level > level, abs(other_cores - cores), key),
                       key))
    return [key for _, key in sorted(ranked)]


def _parse_x86_key(key: str) -> tuple[int, int] | None:
    """Return (index in ``X86_LEVELS``, cores) of an ``llvm-<mcpu>-c<cores>`` key, else None."""
    match = re.fullmatch(r"llvm-(.+)-c(\d+)", key)
    if match is None:
        return None
    names = ["generic" if mcpu is None else mcpu for mcpu in X86_LEVELS]
    if match.group(1) not in names:
        return None
    return names.index(match.group(1)), int(match.group(2))


def _plain_attrs(target: tvm.target.Target) -> dict[str, Any]:
    """Return the target's attributes (not kind, keys, tag or host) as plain Python values."""
    exported = target.export()
    plain: dict[str, Any] = {}
    for key, value in exported.items():
        if key in ("kind", "keys", "tag", "host"):
            continue
        if isinstance(value, (str, int, float, bool)):
            plain[key] = value if not isinstance(value, str) else str(value)
        else:  # an ffi Array such as mattr, or another ffi object
            try:
                plain[key] = [str(item) for item in value]
            except TypeError:
                plain[key] = str(value)
    return plain
