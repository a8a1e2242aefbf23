"""The tuning records tvm_pet ships: package data, and the folder they are used from.

The records ship inside the package, in ``tvm_pet/tuning_logs/<target>/`` (found with
``importlib.resources``, so a checkout, an editable install and a wheel find them alike), as
the files of :data:`SHIPPED_FILES`: the database packed (``database_*.json.xz``), the verdicts
of its records (``record_checks.json``), its counts (``pruned_counts.json``,
``exhausted.json``) and what tuned mutants showed of each kind of rewrite (``kinds.json``).
Using them writes beside them: the plain database files are unpacked there on first use,
costing caches its kernel times and verdicts there, and tuning a kernel of a shipped target
adds its records there. So :func:`shipped_records_dir` returns the package's own
folder where it is writable (a checkout, an editable install, a virtualenv of the user's), and
otherwise (a system-wide or read-only install, a zipped package) a copy in the user's cache
(:func:`user_cache_dir`) that :func:`user_records_copy` keeps up to date with the package.

A ``tuning_logs/`` folder in the working directory still comes first
(``records.default_records_dir``).
"""
from __future__ import annotations

import functools
import hashlib
import json
import lzma
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from tvm_pet.errors import PetError
from tvm_pet.io import atomic_write, atomic_write_json, dir_lock
from tvm_pet.tune import dbfile
from tvm_pet.tune.record_check import CHECKS_FILE

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

#: The records folder, inside the package and inside the user's cache copy.
PACKAGE_FOLDER = "tuning_logs"
#: The packed database files of a target's folder.
PACKED_FILES = (dbfile.WORKLOAD_FILE + dbfile.PACKED_SUFFIX,
                dbfile.RECORD_FILE + dbfile.PACKED_SUFFIX)
#: The ``{key: value}`` tables that ship with a target's records.
TABLE_FILES = (CHECKS_FILE, dbfile.PRUNED_FILE, dbfile.EXHAUSTED_FILE, dbfile.EVIDENCE_FILE)
#: The files of a target's folder that ship (``pyproject.toml`` lists the same as package data).
SHIPPED_FILES = PACKED_FILES + TABLE_FILES
#: ``{file name: SHA-1}`` of the shipped files a user copy was last brought up to date with.
COPY_STAMP_FILE = "shipped.json"


def package_records() -> Traversable:
    """Return the shipped records root as the package holds it (``tvm_pet/tuning_logs``): a
    ``pathlib.Path`` for a package installed as files, another ``Traversable`` for a zipped
    one. Only read it: :func:`shipped_records_dir` is the folder to use."""
    return resources.files("tvm_pet").joinpath(PACKAGE_FOLDER)


def user_cache_dir() -> Path:
    """Return tvm_pet's folder in the user's cache: ``$XDG_CACHE_HOME/tvm_pet``, else
    ``~/.cache/tvm_pet`` (the XDG base directory rule)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tvm_pet"


def shipped_records_dir() -> Path:
    """Return the root of the shipped records, as a folder that tvm_pet may write into.

    That is the package's own folder (:func:`package_records`) when it and its target folders
    are writable, else the user's copy, ``<user_cache_dir()>/tuning_logs``
    (:func:`user_records_copy`, brought up to date now). Decided once per process.

    Returns:
        The records root: ``records.db_dir`` and ``records.record_sources`` read its target
        folders.
    """
    return _shipped_records_dir()


@functools.cache
def _shipped_records_dir() -> Path:
    package = package_records()
    if isinstance(package, Path) and (not package.is_dir() or _writable(package)):
        return package  # writable, or nothing ships: nothing to copy
    copy = user_cache_dir() / PACKAGE_FOLDER
    try:
        return user_records_copy(package, copy)
    except OSError as err:
        raise PetError(f"the shipped tuning records in {package} are read-only, and their copy "
                       f"in {copy} cannot be written ({err}): set XDG_CACHE_HOME to a writable "
                       "folder") from err


def _writable(root: Path) -> bool:
    """Whether tvm_pet can write into ``root`` and each target folder in it."""
    folders = [root, *(p for p in root.iterdir() if p.is_dir())]
    return all(os.access(p, os.W_OK | os.X_OK) for p in folders)


def user_records_copy(package: Traversable, copy: Path) -> Path:
    """Bring a writable copy of the shipped records up to date and return its root.

    Each target folder of ``package`` is copied into ``copy/<target>/`` the first time, and
    again when the package holds other files than the ones copied last (an upgrade: their
    hashes differ from the copy's ``shipped.json``). A file that the copy has changed since it
    was made (records tuned here, verdicts added) is merged with the package's instead of
    replaced, so nothing measured here is lost: the databases with ``dbfile.merge``, the
    ``{key: value}`` tables key by key, the copy's entries kept. Concurrent processes wait for
    the first (an exclusive lock on ``copy``).

    Args:
        package: the shipped records root (:func:`package_records`).
        copy: the root of the copy; created when missing.

    Returns:
        ``copy``.
    """
    copy.mkdir(parents=True, exist_ok=True)
    if not package.is_dir():
        return copy
    with dir_lock(copy):
        for folder in sorted(package.iterdir(), key=lambda p: p.name):
            if folder.is_dir() and folder.joinpath(PACKED_FILES[0]).is_file():
                _update_target(folder, copy / folder.name)
    return copy


def _update_target(source: Traversable, dest: Path) -> None:
    """Bring ``dest``, the copy of one target's shipped folder, up to date with ``source``."""
    shipped = {name: source.joinpath(name).read_bytes() for name in SHIPPED_FILES
               if source.joinpath(name).is_file()}
    hashes = {name: _sha1(data) for name, data in shipped.items()}
    stamp = _read_stamp(dest / COPY_STAMP_FILE)
    if stamp == hashes:
        return
    dest.mkdir(exist_ok=True)
    packed = {name: shipped[name] for name in PACKED_FILES if name in shipped}
    if {name: hashes[name] for name in packed} != {n: stamp.get(n) for n in packed}:
        if _database_as_copied(dest, stamp):
            for name, data in packed.items():  # workloads first
                atomic_write(dest / name, data)
        else:
            _merge_database(packed, dest)
    for name in TABLE_FILES:
        if name in shipped and hashes[name] != stamp.get(name):
            _update_table(dest / name, shipped[name], stamp.get(name))
    atomic_write_json(dest / COPY_STAMP_FILE, hashes, indent=0, sort_keys=True)


def _database_as_copied(dest: Path, stamp: dict[str, str]) -> bool:
    """Whether the copy's database is the one last copied from the package (so an upgrade may
    replace it): no database yet, or packed copies with the stamp's hashes and no plain file
    written after them (a merge whose process was killed before it repacked them)."""
    if not dbfile.has_database(dest):
        return True
    for name in PACKED_FILES:
        path = dest / name
        if path.exists() and _sha1(path.read_bytes()) != stamp.get(name):
            return False
    unpacked = dest / dbfile.PACKED_STAMP_FILE
    plain = [dest / dbfile.WORKLOAD_FILE, dest / dbfile.RECORD_FILE]
    if not unpacked.exists():
        return not any(p.exists() for p in plain)
    return all(not p.exists() or p.stat().st_mtime_ns <= unpacked.stat().st_mtime_ns
               for p in plain)


def _merge_database(packed: dict[str, bytes], dest: Path) -> None:
    """Merge the shipped database (its packed files' content) into the copy's."""
    with tempfile.TemporaryDirectory(prefix=".shipped-", dir=dest.parent) as tmp:
        for name, data in packed.items():
            atomic_write(Path(tmp) / name[:-len(dbfile.PACKED_SUFFIX)], lzma.decompress(data))
        dbfile.merge(tmp, dest)


def _update_table(path: Path, shipped: bytes, copied_hash: str | None) -> None:
    """Replace a ``{key: value}`` table of the copy with the shipped one, or merge the two
    (the copy's entries kept) when the copy has changed it since it was copied."""
    if not path.exists() or _sha1(path.read_bytes()) == copied_hash:
        atomic_write(path, shipped)
        return
    with dir_lock(path.parent):
        try:
            here = json.loads(path.read_text())
        except ValueError:
            here = {}  # damaged: the shipped entries replace it
        merged = {**json.loads(shipped), **(here if isinstance(here, dict) else {})}
        atomic_write_json(path, merged, indent=0, sort_keys=True)


def _read_stamp(path: Path) -> dict[str, str]:
    try:
        stamp = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return stamp if isinstance(stamp, dict) else {}


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()
