"""Whether another process used the CPU while a kernel was measured here.

A kernel timed while something else holds a core runs slower by anything from a few per cent to
hundreds of times (TVM's threads wait for each other): in a benchmark run that overlapped a test
run, 12 of 315 cached kernel times were 2.9 to 530 times their records' own, and one
of them steered the search. :func:`tvm_pet.tune.kernels.suspect` catches such a time for a
kernel with a record of this CPU, beside the record's own time; an untuned or borrowed kernel
has nothing to compare with. This module looks at the CPU itself: over a measurement's window,
the CPU time of all processes (Linux's ``/proc/stat``) less this process's own
(``time.process_time``, all its threads, and its children's that ended meanwhile: a look's
timing processes) is the time others used. Over :data:`SHARE_LIMIT` of the window's capacity
(its length times the cores), the measurement was *shared*. Kernel costing measures a shared
kernel again (:mod:`tvm_pet.tune.kernels`); ``optimize`` says so of a look timed on a shared CPU.

Without ``/proc/stat`` (not Linux) nothing is known, and no measurement is called shared.

>>> watch = CpuWatch(reader=lambda: None)
>>> with watch:
...     pass
>>> watch.shared, watch.other_s
(False, None)
"""
from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable

try:
    import resource
except ImportError:  # not Unix
    resource = None

#: Others' CPU time over a window, as a share of the window's capacity (its length times the
#: cores), above which the window was shared. A background daemon uses well under 1 %; another
#: process running flat out on one of two cores, 50 %.
SHARE_LIMIT = 0.2
#: ... and at least this many clock ticks: ``/proc/stat`` counts in ticks (10 ms), and a short
#: window reads one or two ticks off on each core.
MIN_TICKS = 3

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01

#: Reads (the CPU time all processes have used, this process's own), in seconds; ``None`` when
#: the system does not say.
Reader = Callable[[], "tuple[float, float] | None"]


def read_cpu() -> tuple[float, float] | None:
    """The CPU time used since boot by all processes on the CPUs this process may run on
    (``/proc/stat``'s per-CPU lines: all but idle and iowait; guest time is already in user
    time), and by this process and its ended children, in seconds; ``None`` without
    ``/proc/stat``. In a container that shares a larger host, the host's other CPUs are not
    counted."""
    allowed = _allowed_cpus()
    try:
        with open("/proc/stat") as stat:
            lines = [ln.split() for ln in stat if ln.startswith("cpu") and ln[3:4].isdigit()]
    except OSError:
        return None
    if not lines:
        return None
    busy = 0
    for name, *values in lines:
        if allowed is not None and int(name[3:]) not in allowed:
            continue
        fields = [int(v) for v in values]
        if len(fields) < 5:
            return None
        busy += sum(fields) - fields[3] - fields[4] - sum(fields[8:10])
    return busy * _TICK_S, time.process_time() + _children_s()


#: Where a cgroup lists the CPUs its processes may use (v2, then v1).
CPUSET_FILES = ("/sys/fs/cgroup/cpuset.cpus.effective",
                "/sys/fs/cgroup/cpuset/cpuset.effective_cpus")


@functools.cache
def _allowed_cpus() -> frozenset[int] | None:
    """The CPUs this process's cgroup may use (a container's share of a larger host), read once
    a process; None where no cgroup says (then all). Not the thread's affinity: TVM pins its
    threads to cores.
    """
    for path in CPUSET_FILES:
        try:
            with open(path) as f:
                return frozenset(parse_cpu_list(f.read()))
        except (OSError, ValueError):
            continue
    return None


def parse_cpu_list(text: str) -> set[int]:
    """The CPUs of a kernel CPU list.

    >>> sorted(parse_cpu_list("0-2,5\\n"))
    [0, 1, 2, 5]
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    if not cpus:
        raise ValueError("an empty CPU list")
    return cpus


def _children_s() -> float:
    """The CPU time of this process's children that ended and were waited for."""
    if resource is None:
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class CpuWatch:
    """A context manager that tells, once its block has run, how much CPU time other processes
    used meanwhile (``other_s``, ``None`` when unknown) and whether that makes the block's
    window :attr:`shared`.

    Args:
        reader: what reads the CPU times (default: :func:`read_cpu`).
        cores: the CPUs the reader counts (default: those this process may run on).
    """

    def __init__(self, reader: Reader | None = None, cores: int | None = None) -> None:
        self._read = reader or read_cpu
        self.cores = cores or len(_allowed_cpus() or ()) or os.cpu_count() or 1
        self.other_s: float | None = None
        self.window_s = 0.0

    def __enter__(self) -> CpuWatch:
        self._start = self._read(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        end, end_wall = self._read(), time.perf_counter()
        start, start_wall = self._start
        self.window_s = end_wall - start_wall
        if start is None or end is None:
            self.other_s = None
            return
        self.other_s = max(0.0, (end[0] - start[0]) - (end[1] - start[1]))

    @property
    def share(self) -> float | None:
        """Others' CPU time as a share of the window's capacity (None: unknown).

        >>> w = CpuWatch(cores=2); w.window_s, w.other_s = 0.5, 0.25
        >>> w.share
        0.25
        """
        if self.other_s is None or self.window_s <= 0:
            return None
        return self.other_s / (self.window_s * self.cores)

    @property
    def shared(self) -> bool:
        """Whether others used over :data:`SHARE_LIMIT` of the window's capacity, and at least
        :data:`MIN_TICKS` ticks.

        >>> w = CpuWatch(cores=2); w.window_s, w.other_s = 0.5, 0.4
        >>> w.shared
        True
        >>> w.other_s = 0.02; w.shared
        False
        """
        if self.other_s is None:
            return False
        return self.other_s > max(SHARE_LIMIT * self.window_s * self.cores, MIN_TICKS * _TICK_S)
