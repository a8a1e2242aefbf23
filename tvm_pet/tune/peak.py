"""The machine's peak float32 FLOP/s, the limit a benchmark's share is measured against.

The peak is ``cores × clock × FLOP per cycle per core``, where a core's FLOP per cycle is
``2 (a fused multiply-add) × float32 lanes per FMA unit × FMA units``:

=====================================  ======  =========  ================
CPU                                    lanes   FMA units  FLOP/cycle/core
=====================================  ======  =========  ================
Intel with AVX-512 (Xeon Scalable)     16      2          64
AMD Zen 5 (family 26), AVX-512         16      2          64
AMD Zen 4 (family 25, AVX-512 flags)   8 *     2          32
AMD Zen 3 and other AVX2 + FMA CPUs    8       2          32
SSE only                               4       2          16
=====================================  ======  =========  ================

\\* Zen 4 runs AVX-512 on 256-bit units. ``cores`` are the physical cores the target uses
(``-num-cores``, at most the machine's cores; two hyperthreads of one core count once), and the
clock is the nominal one ``/proc/cpuinfo`` gives: a core may run above it (turbo) or below it
(Intel's AVX-512 frequency levels), so a share near or over 100 % says the clock, not the code.
The figures are architectural; a machine whose CPU is none of these gets the AVX2/SSE row its
flags give.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass(frozen=True, slots=True)
class Peak:
    """A machine's peak float32 FLOP/s and what it is computed from."""
    cores: int
    ghz: float
    flop_per_cycle: int
    cpu: str

    @property
    def gflops(self) -> float:
        """The peak in GFLOP/s."""
        return self.cores * self.ghz * self.flop_per_cycle

    def share(self, flops: float, seconds: float) -> float:
        """The share of the peak that ``flops`` in ``seconds`` reach (0.5: half of it)."""
        return flops / seconds / 1e9 / self.gflops

    def describe(self) -> str:
        """One line saying how the peak was computed.

        >>> Peak(2, 2.3, 64, "Intel, AVX-512").describe()
        '294 GFLOP/s = 2 cores x 2.30 GHz x 64 FLOP/cycle (Intel, AVX-512)'
        """
        return (f"{self.gflops:.0f} GFLOP/s = {self.cores} cores x {self.ghz:.2f} GHz x "
                f"{self.flop_per_cycle} FLOP/cycle ({self.cpu})")


def flop_per_cycle(vendor: str, family: int, flags: set[str]) -> tuple[int, str]:
    """A core's float32 FLOP per cycle by the table above, and the row's name.

    >>> flop_per_cycle("AuthenticAMD", 25, {"avx2", "fma", "avx512f"})
    (32, 'AMD Zen 4, AVX-512 on 256-bit units')
    >>> flop_per_cycle("AuthenticAMD", 26, {"avx2", "fma", "avx512f"})
    (64, 'AMD Zen 5, AVX-512')
    >>> flop_per_cycle("GenuineIntel", 6, {"avx2", "fma", "avx512f"})
    (64, 'Intel, AVX-512')
    >>> flop_per_cycle("AuthenticAMD", 25, {"avx2", "fma"})
    (32, 'AVX2 + FMA')
    """
    if "avx512f" in flags:
        if vendor == "AuthenticAMD" and family == 25:
            return 32, "AMD Zen 4, AVX-512 on 256-bit units"
        if vendor == "AuthenticAMD":
            return 64, "AMD Zen 5, AVX-512"
        return 64, "Intel, AVX-512"
    if {"avx2", "fma"} <= flags:
        return 32, "AVX2 + FMA"
    return 16, "SSE"


def machine_peak(cores: int | None = None, cpuinfo: str | None = None) -> Peak:
    """This machine's peak (or the one ``cpuinfo``, a ``/proc/cpuinfo`` text, describes).

    Args:
        cores: the cores used (a target's ``-num-cores``); at most the physical cores.
        cpuinfo: the text of ``/proc/cpuinfo`` (default: this machine's).

    Returns:
        The :class:`Peak`.

    >>> text = ("processor: 0\\nvendor_id: AuthenticAMD\\ncpu family: 25\\ncpu MHz: 2450.0\\n"
    ...         "physical id: 0\\ncore id: 0\\nflags: fma avx2\\n\\n"
    ...         "processor: 1\\nvendor_id: AuthenticAMD\\ncpu family: 25\\ncpu MHz: 2450.0\\n"
    ...         "physical id: 0\\ncore id: 1\\nflags: fma avx2\\n")
    >>> machine_peak(cpuinfo=text).describe()
    '157 GFLOP/s = 2 cores x 2.45 GHz x 32 FLOP/cycle (AVX2 + FMA)'
    """
    text = Path("/proc/cpuinfo").read_text() if cpuinfo is None else cpuinfo
    processors = [_fields(block) for block in text.split("\n\n") if block.strip()]
    first = processors[0]
    physical = len({(p.get("physical id", "0"), p.get("core id", p.get("processor")))
                    for p in processors})
    per_cycle, cpu = flop_per_cycle(first.get("vendor_id", ""), int(first.get("cpu family", 0)),
                                    set(first.get("flags", "").split()))
    used = physical if cores is None else min(cores, physical)
    return Peak(used, float(first.get("cpu MHz", 0.0)) / 1000, per_cycle, cpu)


def _fields(block: str) -> dict[str, str]:
    """The ``key: value`` lines of one processor's block."""
    fields = {}
    for line in block.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields
