"""Interleaved timing spread over fresh processes, each one draw of the memory layout.

On a CPU one compiled module can run at two speeds that are drawn once per process and
kept through it: the CSRNet back end's TVM binary (32-trial records) ran at 25 ms in some
processes and 31-37 ms in others, for seconds or minutes, while PET's binary of the same graph
ran at 25-27 ms in all. The draw is the address layout: with address-space randomization off
(``setarch -R``) the same binary ran at 25 ms in 13 processes of 13, and with it on at 31-37 ms
in 3 of 7. Loading the library again, or allocating new inputs, in the same process does not
draw again. A look taken in one process, however long, sees one layout, and so a rank test on
its samples can keep a candidate that is only faster than one draw of the original.

:func:`time_in_processes` splits a look's rounds over ``processes`` fresh Python processes
(each loads both shared libraries and times them interleaved with
:func:`~tvm_pet.tune.timing.time_interleaved`, alternating which goes first) and pools their
samples, so that a decision on them stands for more than one layout; each process's samples are
kept apart (``Timing.groups``) for the decision and the report.
``python -m tvm_pet.tune.process_timing SPEC`` is the worker.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence

import numpy as np

from tvm_pet.errors import PetError


def time_in_processes(libraries: Mapping[str, str], inputs: Sequence[np.ndarray], *,
                      processes: int, rounds: int, number: int, repeat: int,
                      timeout_s: float | None = None) -> dict:
    """Time shared libraries interleaved, the rounds spread over fresh processes.

    Args:
        libraries: name -> path of a Relax VM shared library (``export_library``), all taking
            the same inputs.
        inputs: the arguments of ``main``.
        processes: fresh processes, run one after the other (each at least one round).
        rounds: interleaved rounds in all (each process gets ``ceil(rounds / processes)``).
        number: calls averaged into one sample.
        repeat: samples per library per round.
        timeout_s: seconds each worker may run (None: as long as it takes, as a timing in
            this process would; one call of an untuned model can take seconds).

    Returns:
        name -> :class:`~tvm_pet.tune.timing.Timing`: every process's samples pooled, and kept
        apart in ``groups``.

    Raises:
        PetError: when a worker fails or runs out of time (its last lines say why).
    """
    from tvm_pet.tune.timing import pooled

    per_process = max(1, math.ceil(rounds / max(1, processes)))
    names = list(libraries)
    samples: dict[str, list[list[float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="tvm-pet-timing-") as tmp:
        np.savez(os.path.join(tmp, "inputs.npz"), *[np.ascontiguousarray(a) for a in inputs])
        for k in range(max(1, processes)):
            order = names if k % 2 == 0 else names[::-1]
            spec = {"libraries": {n: str(libraries[n]) for n in order},
                    "inputs": os.path.join(tmp, "inputs.npz"), "rounds": per_process,
                    "number": number, "repeat": repeat}
            got = _worker(spec, os.path.join(tmp, f"spec{k}.json"), timeout_s)
            for name in names:
                samples[name].append(got[name])
    return {name: pooled(groups) for name, groups in samples.items()}


def _worker(spec: dict, path: str, timeout_s: float | None) -> dict[str, list[float]]:
    """Run one worker on ``spec`` (written to ``path``) and read its samples."""
    with open(path, "w") as f:
        json.dump(spec, f)
    try:
        done = subprocess.run([sys.executable, "-m", "tvm_pet.tune.process_timing", path],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise PetError(f"a timing process ran past {timeout_s:.0f} s") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise PetError(f"a timing process failed (exit {done.returncode}):\n{tail}")
    return json.loads(lines[-1])


def main(argv: Sequence[str] | None = None) -> int:
    """The worker: time the spec's libraries and print ``{name: [seconds, ...]}`` as JSON.
    TVM's pool is sized as the parent's (its environment, else every physical core)."""
    from tvm_pet.tune.threads import size_thread_pool

    size_thread_pool()  # before TVM starts its pool
    import tvm

    from tvm_pet.io import quiet_native_stderr
    from tvm_pet.tune.timing import time_interleaved

    with open((sys.argv[1:] if argv is None else argv)[0]) as f:
        spec = json.load(f)
    with np.load(spec["inputs"]) as npz:
        inputs = [npz[f"arr_{i}"] for i in range(len(npz.files))]
    with quiet_native_stderr():
        libraries = {name: tvm.runtime.load_module(path)
                     for name, path in spec["libraries"].items()}
    timings = time_interleaved(libraries, inputs, rounds=spec["rounds"], number=spec["number"],
                               repeat=spec["repeat"])
    print(json.dumps({name: list(t.samples) for name, t in timings.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
