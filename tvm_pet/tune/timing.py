"""Interleaved timing of compiled Relax modules: A B A B ..., so that slow drifts of the machine
spread evenly over the modules compared.

Typical use::

    timings = time_interleaved({"tuned": fast, "untuned": slow}, inputs)
    timings["tuned"].median, timings["tuned"].samples
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

from tvm_pet.errors import PetError


@dataclass(frozen=True, slots=True)
class Timing:
    """Times in seconds of one executable over all rounds (each sample a ``time_evaluator`` mean),
    and, when the rounds were spread over fresh processes (:mod:`tvm_pet.tune.process_timing`),
    each process's samples (``groups``; empty for a timing in this process); ``others_share``:
    the share of the CPU that other processes used while it was timed
    (:class:`tvm_pet.tune.contention.CpuWatch`; None where it was not watched)."""
    median: float
    min: float
    max: float
    samples: tuple[float, ...]
    groups: tuple[tuple[float, ...], ...] = ()
    others_share: float | None = None

    @property
    def layouts(self) -> tuple[float, ...]:
        """Each process's median (one draw of the address layout each); empty for a timing in
        one process."""
        return tuple(statistics.median(group) for group in self.groups)

    @property
    def spread(self) -> float:
        """(max - min) / median: the relative noise band of this measurement."""
        return (self.max - self.min) / self.median if self.median > 0 else float("inf")


def time_interleaved(executables: Mapping[str, object], inputs: Sequence[np.ndarray],
                     device=None, *, rounds: int = 5, number: int = 3, repeat: int = 3,
                     min_repeat_ms: int = 0) -> dict[str, Timing]:
    """Time executables interleaved, A B C A B C ..., with the Relax VM's ``time_evaluator``.

    Each executable runs once untimed first. Every round then times each executable in turn with
    ``repeat`` samples, each the mean of ``number`` calls; interleaving spreads slow drifts of the
    machine evenly over the executables. Compare medians, and read ``spread`` before believing a
    difference: on a small shared machine rounds can differ by 20-30 %.

    Args:
        executables: name -> ``relax.VMExecutable`` (all taking the same inputs).
        inputs: the arguments of ``main``, as NumPy arrays.
        device: the device to run on (``tvm.cpu()`` when omitted).
        rounds: interleaved rounds.
        number: calls averaged into one sample.
        repeat: samples per executable per round.
        min_repeat_ms: when above 0, ``number`` grows until one sample lasts this long (use it
            for microsecond kernels).

    Returns:
        name -> ``Timing`` with ``rounds * repeat`` samples, in seconds.
    """
    if rounds < 1 or number < 1 or repeat < 1:
        raise PetError(f"rounds={rounds}, number={number}, repeat={repeat}: each must be >= 1")
    device = tvm.cpu() if device is None else device
    args = [tvm.runtime.tensor(np.ascontiguousarray(a), device) for a in inputs]
    timers = {}
    for name, executable in executables.items():
        vm = relax.VirtualMachine(executable, device)
        vm["main"](*args)  # warm up: first-call allocation and page faults are not timed
        timers[name] = vm.time_evaluator("main", device, number=number, repeat=repeat,
                                         min_repeat_ms=min_repeat_ms)
    samples: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            samples[name].extend(float(s) for s in timer(*args).results)
    return {name: _timing(values) for name, values in samples.items()}


def _timing(values: list[float]) -> Timing:
    """Summarise samples in seconds."""
    return Timing(statistics.median(values), min(values), max(values), tuple(values))


def pooled(groups: Sequence[Sequence[float]]) -> Timing:
    """One timing of samples taken in several processes: all samples pooled, each process's
    kept apart in ``groups``.

    >>> t = pooled([[1.0, 1.0, 3.0], [2.0, 2.0, 2.0]])
    >>> t.median, t.layouts, len(t.samples)
    (2.0, (1.0, 2.0), 6)
    """
    return dataclasses.replace(_timing([v for group in groups for v in group]),
                               groups=tuple(tuple(group) for group in groups))
