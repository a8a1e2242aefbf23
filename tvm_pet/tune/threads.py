"""TVM's CPU thread pool, sized to the physical cores this process may use.

TVM sizes its pool as half the logical CPUs on x86-64: it assumes two hyper-threads per core. On
a machine with one thread per core (many cloud VMs) every kernel then runs on half the cores:
on a 2-core VM a ResNet-18 call took 65 ms on one thread and 36 ms on two.
:func:`size_thread_pool` sets ``TVM_NUM_THREADS`` to the physical cores, unless the user chose
(``TVM_NUM_THREADS`` or ``OMP_NUM_THREADS`` already set). TVM reads it when a thread first runs a
kernel, and the tuner's measuring processes inherit it, so it is set before either.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

#: The environment variables through which a user sizes TVM's pool.
USER_SETTINGS = ("TVM_NUM_THREADS", "OMP_NUM_THREADS")


def physical_cores(cpus: Iterable[int] | None = None,
                   sysfs: Path = Path("/sys/devices/system/cpu")) -> int | None:
    """The physical cores among ``cpus`` (default: the CPUs this process may run on), counted as
    distinct (package, core) pairs in ``sysfs``; None where the topology cannot be read.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> for cpu, core in [(0, 0), (1, 0), (2, 1), (3, 1)]:  # two cores, two threads each
    ...     (root / f"cpu{cpu}" / "topology").mkdir(parents=True)
    ...     _ = (root / f"cpu{cpu}" / "topology" / "core_id").write_text(f"{core}\\n")
    ...     _ = (root / f"cpu{cpu}" / "topology" / "physical_package_id").write_text("0\\n")
    >>> physical_cores([0, 1, 2, 3], root), physical_cores([0, 2], root), physical_cores([7], root)
    (2, 2, None)
    """
    if cpus is None:
        cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else \
            range(os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            cores.add(((topology / "physical_package_id").read_text().strip(),
                       (topology / "core_id").read_text().strip()))
        except OSError:
            return None
    return len(cores) or None


def pool_setting(environ: dict | None = None) -> str | None:
    """The size of TVM's CPU pool as the environment sets it, read as TVM reads it
    (``TVM_NUM_THREADS``, else ``OMP_NUM_THREADS``); None when neither is set (TVM's default).
    Read from the environment, not asked of TVM: starting a pool of one thread binds the thread
    that starts it to one core.

    >>> pool_setting({"OMP_NUM_THREADS": "4"}), pool_setting({}) is None
    ('4', True)
    """
    environ = os.environ if environ is None else environ
    return next((environ[name] for name in USER_SETTINGS if environ.get(name)), None)


def size_thread_pool(environ: dict | None = None, cores: int | None = None) -> int | None:
    """Set ``TVM_NUM_THREADS`` to the physical cores (``cores``, default :func:`physical_cores`)
    unless the user set it or ``OMP_NUM_THREADS``; return the threads set, or None where it was
    left alone.

    >>> env = {}
    >>> size_thread_pool(env, cores=2), env
    (2, {'TVM_NUM_THREADS': '2'})
    >>> size_thread_pool({"OMP_NUM_THREADS": "1"}, cores=2) is None  # the user's choice stays
    True
    """
    environ = os.environ if environ is None else environ
    if any(name in environ for name in USER_SETTINGS):
        return None
    cores = physical_cores() if cores is None else cores
    if not cores:
        return None
    environ["TVM_NUM_THREADS"] = str(cores)
    return cores
