"""MetaSchedule's tensor intrinsics, loaded in seconds instead of most of a minute.

A ``TuneContext`` imports ``tvm.s_tir.tensor_intrin`` the first time one is made in a process.
That package defines about 250 TVMScript functions (CUDA, ROCm, Hexagon, ARM and x86
intrinsics), and TVM's ``T.prim_func`` calls ``inspect.stack()`` for each. For every frame of the
stack whose file does not exist (``<frozen importlib._bootstrap>`` frames of the import,
``<ast>``), ``inspect`` looks the module up by scanning all of ``sys.modules``: 47,000 scans in
one import, 43 s on a 2-core Intel Xeon (one tuning test took 161 s, 139 of them there), more
in a process that has imported torch.

:func:`load` imports the package once with ``inspect.stack`` replaced by :func:`_stack`, which
gives the same frames, line numbers and source lines (``code_context``) for frames of files that
exist and no source lines for the others, as ``inspect.stack`` does, without the module scan.
TVM uses the stack for two things only: whether a function is defined in a decorated class
(the source line of the caller's caller) and the enclosing frames' local variables.
"""
from __future__ import annotations

import contextlib
import inspect
import linecache
import os
import sys
from collections.abc import Iterator

MODULE = "tvm.s_tir.tensor_intrin"
#: ``inspect.FrameInfo`` has source positions from Python 3.11 on.
_POSITIONS = {"positions": None} if sys.version_info >= (3, 11) else {}


def _stack(context: int = 1) -> list[inspect.FrameInfo]:
    """``inspect.stack(context)`` from the caller's frame, with the source lines read through
    ``linecache`` for frames of existing files (None for the others)."""
    frame = sys._getframe(1)
    frames = []
    while frame is not None:
        filename, lineno = frame.f_code.co_filename, frame.f_lineno
        lines = index = None
        if context > 0 and os.path.exists(filename):
            start = max(0, lineno - 1 - context // 2)
            got = [linecache.getline(filename, n + 1) for n in range(start, start + context)]
            if any(got):
                lines, index = got, lineno - 1 - start
        frames.append(inspect.FrameInfo(frame, filename, lineno, frame.f_code.co_name, lines,
                                        index, **_POSITIONS))
        frame = frame.f_back
    return frames


@contextlib.contextmanager
def _cheap_stack() -> Iterator[None]:
    """``inspect.stack`` replaced by :func:`_stack` for the duration of the block."""
    real = inspect.stack
    inspect.stack = _stack
    try:
        yield
    finally:
        inspect.stack = real


def load() -> None:
    """Import MetaSchedule's tensor intrinsics (once a process; what ``TuneContext`` imports)."""
    if MODULE in sys.modules:
        return
    with _cheap_stack():
        __import__(MODULE)


def tune_context(**kwargs):
    """``ms.TuneContext(**kwargs)``, with MetaSchedule's tensor intrinsics loaded first
    (:func:`load`)."""
    from tvm.s_tir import meta_schedule as ms
    load()
    return ms.TuneContext(**kwargs)
