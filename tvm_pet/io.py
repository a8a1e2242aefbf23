"""Crash-safe file writes and inter-process locks: no file tvm_pet writes is ever half-written.

``atomic_write`` writes a temporary file in the destination's directory, flushes it to disk and
renames it over the destination (``os.replace``, atomic on POSIX file systems): a reader, or the
process that comes after a crash, sees the old content or the new, never a mixture, and a failed
write leaves the old file as it was and no temporary file behind.

``dir_lock`` takes an advisory ``flock`` on a directory itself, so that locking creates no file
(the shipped ``tuning_logs/`` stay untouched when they are only read). The kernel drops the lock
when its holder exits, even on SIGKILL, so a dead process never leaves a stale lock. The lock is
not re-entrant: a process must not ask for a directory it already holds.

TVM-free; used by ``tvm_pet.tune`` (records, untuned times) and the application
(:mod:`tvm_pet.pipeline`: ``report.json``, the artifacts).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

#: Mode of a new file (an existing file keeps its own).
NEW_FILE_MODE = 0o644


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` in one step: temporary file, fsync, ``os.replace``.

    Args:
        path: the destination; its directory must exist.
        data: the complete new content (``str`` is encoded as UTF-8).

    Raises:
        OSError: when the write fails; ``path`` is then unchanged and no temporary file is left.

    Example:
        >>> import tempfile, pathlib
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "a.json"
        >>> atomic_write(target, '{"x": 1}')
        >>> target.read_text()
        '{"x": 1}'
    """
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    mode = path.stat().st_mode & 0o777 if path.exists() else NEW_FILE_MODE
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_json(path: str | Path, value: Any, **dump_kwargs: Any) -> None:
    """``atomic_write`` of ``json.dumps(value, **dump_kwargs)`` plus a final newline."""
    atomic_write(path, json.dumps(value, **dump_kwargs) + "\n")


def _fsync_dir(directory: Path) -> None:
    """Flush a directory entry (the rename) to disk; a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on directories; the rename itself is still atomic
    finally:
        os.close(fd)


@contextlib.contextmanager
def dir_lock(directory: str | Path, shared: bool = False, blocking: bool = True) -> Iterator[bool]:
    """Hold an advisory lock on a directory for the duration of the ``with`` block.

    Args:
        directory: an existing directory.
        shared: a shared (reader) lock instead of an exclusive (writer) one.
        blocking: wait for the lock; when ``False`` and another process holds it, the block runs
            at once without the lock.

    Yields:
        Whether the lock is held (always ``True`` when ``blocking``).
    """
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
        try:
            fcntl.flock(fd, flags)
            held = True
        except BlockingIOError:
            held = False
        yield held
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence C-level stderr while the block runs (TVM logs one "Scope Saving" warning per
    function when it exports a library)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
