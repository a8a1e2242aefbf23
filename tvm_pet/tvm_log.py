"""TVM's own log lines on stderr, each distinct warning shown once.

TVM writes its warnings to the process's stderr from C++, and so do the popen workers that
build and measure kernels (they inherit it); nothing turns them off. Some repeat for every
kernel lowered: on swin_t at 224, ``optimize`` printed ``Warning: Fast mode segfaults when
there are out-of-bounds indices`` (the frontends' ``take``) 458 times before tuning began, and
the progress lines were lost among them.

:func:`tvm_warnings_once` passes the process's stderr (file descriptor 2, so C++ and the
workers too) through a small filter process (this file run as a script, with the standard
library only): every line is passed on as it comes, except a TVM warning seen before, and at
the end one line counts what was left out. The filter sits in a session of its own, so a
Ctrl-C reaches the run and not it; it ends when the last writer of the pipe is gone.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from typing import BinaryIO, Iterator

# ``[15:16:49] /project/include/tvm/topi/transform.h:1261: Warning: Fast mode ...``
_TVM_WARNING = re.compile(rb"^\[\d\d:\d\d:\d\d\] (\S+:\d+: Warning: .*?)\r?\n?$")
#: TVM warnings that say nothing a user can act on, left out from the first: MetaSchedule looks
#: for a custom schedule rule of each pooling kernel, finds none on CPUs, and schedules the
#: kernel with its default rules.
_HARMLESS = re.compile(rb'Warning: Unknown schedule rule "meta_schedule\.pool_')


def filter_lines(lines: BinaryIO, out: BinaryIO) -> int:
    """Copy ``lines`` to ``out`` line by line, leaving out a TVM warning already passed on (the
    same source line and text; the time stamp may differ) with the indented lines that continue
    it, and the warnings of :data:`_HARMLESS` from the first; then, if any was left out, one
    line that says how many. Returns that count.

    >>> out = io.BytesIO()
    >>> warn = b"] /tvm/topi/transform.h:1261: Warning: Fast mode segfaults\\n"
    >>> filter_lines(io.BytesIO(b"[15:16:49" + warn + b"a\\n[15:16:50" + warn), out)
    1
    >>> print(out.getvalue().decode().rstrip())
    [15:16:49] /tvm/topi/transform.h:1261: Warning: Fast mode segfaults
    a
    tvm-pet: TVM repeated its warnings above 1 time more (each is shown once)
    """
    seen: set[bytes] = set()
    left_out, harmless, dropping = 0, 0, False
    for line in iter(lines.readline, b""):
        match = _TVM_WARNING.match(line)
        if match is not None and _HARMLESS.search(match.group(1)):
            harmless, dropping = harmless + 1, True
            continue
        if match is not None:
            dropping = match.group(1) in seen
            if dropping:
                left_out += 1
                continue
            seen.add(match.group(1))
        elif dropping and line[:1] in (b" ", b"\t"):  # the left-out warning's own next lines
            continue
        else:
            dropping = False
        out.write(line)
        out.flush()
    if left_out:
        times = "time" if left_out == 1 else "times"
        out.write(f"tvm-pet: TVM repeated its warnings above {left_out} {times} more "
                  "(each is shown once)\n".encode())
    if harmless:
        warnings = "warning" if harmless == 1 else "warnings"
        out.write(f"tvm-pet: left out {harmless} TVM {warnings} that a pooling kernel has no "
                  "custom schedule rule (its default rules schedule it)\n".encode())
    out.flush()
    return left_out + harmless


class _Stderr(io.TextIOWrapper):
    """``sys.stderr`` while the filter runs: the same file descriptor, but ``isatty`` answers
    for the terminal behind the filter (progress lines are on by default in a terminal)."""

    tty = False

    def isatty(self) -> bool:
        return self.tty


@contextlib.contextmanager
def tvm_warnings_once() -> Iterator[None]:
    """Run the body with the process's stderr passed through :func:`filter_lines`.

    Where the filter cannot start, the body runs with stderr as it is."""
    sys.stderr.flush()
    tty, saved = sys.stderr.isatty(), os.dup(2)
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-u", os.path.abspath(__file__)],
                                stdin=subprocess.PIPE, stdout=saved, stderr=saved,
                                start_new_session=True)
    except OSError:
        os.close(saved)
        yield
        return
    os.dup2(proc.stdin.fileno(), 2)
    proc.stdin.close()
    previous = sys.stderr
    sys.stderr = _Stderr(os.fdopen(2, "wb", closefd=False), line_buffering=True,
                         encoding=previous.encoding, errors="backslashreplace")
    sys.stderr.tty = tty
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stderr = previous
        os.dup2(saved, 2)  # the pipe's last writer here is gone: the filter ends once
        os.close(saved)    # the workers that inherited it are gone too
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)


if __name__ == "__main__":
    filter_lines(sys.stdin.buffer, sys.stdout.buffer)
