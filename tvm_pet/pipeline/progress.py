"""Progress lines on stderr for the steps of ``optimize`` that can take more than a few seconds.

One line when a step starts (with what it counts and, where known, how long it should take) and
one when it ends, so that a run on untuned kernels never waits in silence. Off unless asked for
(the CLI turns it on; library callers pass ``progress=True`` in the options).

>>> import io
>>> out = io.StringIO(); p = Progress(True, out)
>>> with p.step("building candidate 1 of 2"):
...     pass
>>> out.getvalue().splitlines()[0]
'tvm-pet: building candidate 1 of 2 ...'
"""
from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import TextIO


class Progress:
    """Prints ``tvm-pet: <step> ...`` and ``tvm-pet: <step>: done in S s`` lines.

    Args:
        enabled: print anything at all.
        stream: where (default: ``sys.stderr`` at the time of printing).
    """

    def __init__(self, enabled: bool = False, stream: TextIO | None = None):
        self.enabled, self.stream = enabled, stream
        self.started = time.perf_counter()

    def note(self, line: str) -> None:
        """Print one line, with the seconds since the run started."""
        if self.enabled:
            stream = self.stream or sys.stderr
            print(f"tvm-pet: {line}", file=stream, flush=True)

    @contextlib.contextmanager
    def step(self, what: str, eta_s: float | None = None) -> Iterator[None]:
        """Announce a step (with its expected seconds), run it, and say how long it took."""
        eta = f" (about {_seconds(eta_s)})" if eta_s is not None else ""
        self.note(f"{what} ...{eta}")
        start = time.perf_counter()
        yield
        self.note(f"{what}: done in {_seconds(time.perf_counter() - start)} "
                  f"[{_seconds(time.perf_counter() - self.started)} so far]")


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"
