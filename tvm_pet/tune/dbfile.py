"""The two files of a MetaSchedule ``JSONDatabase``, line by line: check, repair, merge, recover.

The format (TVM 0.27, ``src/s_tir/meta_schedule/database/json_database.cc``), one JSON value a line:

* ``database_workload.json``: ``["<structural hash>", "<base64 of the task's JSON graph>"]``; a
  workload's index is its line number, counting from 0.
* ``database_tuning_record.json``: ``[<workload index>, [trace, run_secs, target, args_info]]``.

MetaSchedule appends one line per commit, without a lock or an fsync, and its loader trusts every
line: a truncated or garbage line, or an index past the workload file, raises, and a blank line
crashes the process (segfault, checked on TVM 0.27). So tvm_pet never lets MetaSchedule write the
shared database, and checks every line before the loader sees it:

* ``read_tables`` parses both files in Python and keeps the valid lines as text (``Tables``).
* ``repair`` (under the directory's exclusive lock) writes the original of a damaged file to a
  ``.corrupt`` backup and the valid lines back. A damaged workload line in the middle of the file
  becomes a placeholder workload that no task matches, so that no index moves; its records go.
* ``pending`` gives a tuning task a private database directory under ``pending/``, locked while
  its process lives; on exit ``merge`` adds its new records to the shared files under the
  exclusive lock (workloads deduplicated by structural hash, record indices remapped, records
  already present skipped) and the directory is removed.
* ``recover`` merges the pending directories whose process died (SIGKILL, power loss) into the
  shared database, so their measured candidates are kept.
* ``pack`` writes compressed copies of both files (``<file>.xz``, about 40 times smaller: the
  workload file is mostly base64 of TIR), and from then on every write here rewrites them (a
  ``merge``'s when its process exits: a tuning run merges once per task, and packing a 90 MB
  workload file takes seconds), so a repository ships only the packed copies. ``unpack`` makes
  the plain files from them on first use, and again when the copies changed under it (a
  ``git pull``).

Every write is ``tvm_pet.io.atomic_write`` (temporary file, fsync, rename), ordered so that a crash
between the two files never makes a record point at the wrong workload: a repair writes the
records first (they only point at unchanged lines), a merge the workloads first (it appends).
Readers take the directory's shared lock, so they never see one file old and the other new.
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import hashlib
import json
import lzma
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from tvm_pet.io import atomic_write, atomic_write_json, dir_lock

#: The file names MetaSchedule's JSONDatabase uses inside a work_dir.
WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
#: The directory of private per-task databases, inside a target's directory.
PENDING_DIR = "pending"
#: Suffix of the backup of a damaged file (``.corrupt``, then ``.corrupt.1``, ...).
BACKUP_SUFFIX = ".corrupt"
#: ``{workload hash: records dropped by prune}``, so that a pruned task still counts its trials.
PRUNED_FILE = "pruned_counts.json"
#: ``{workload hash: trials it had}`` for tasks whose search ran out of new candidates (a small
#: search space, such as a layout kernel's), so that a larger budget does not search them again
#: (deleting the file has them searched again).
EXHAUSTED_FILE = "exhausted.json"
#: Per set of mutant kernels tuned on the target, the mutant's kind of rewrite and how its tuned
#: kernels compared with those they replace: :data:`tvm_pet.pipeline.kinds.EVIDENCE_FILE`, the
#: same name (the pipeline imports without TVM, so it cannot import it from here).
EVIDENCE_FILE = "kinds.json"
#: Suffix of the compressed copy of a database file (``database_workload.json.xz``): what a
#: repository ships, 20 to 40 times smaller than the plain files, which are made from it on first
#: use (``unpack``) and kept beside it, out of version control.
PACKED_SUFFIX = ".xz"
#: ``{file name: SHA-1 of its packed copy}`` when the plain files were last made from, or written
#: into, the packed ones; a packed copy with another hash came from elsewhere (a ``git pull``).
PACKED_STAMP_FILE = "unpacked.json"
#: The xz preset of a packed copy: 0.6 s for 26 MB of workloads, within 20 % of the smallest.
PACK_PRESET = 3


class CorruptDatabaseWarning(UserWarning):
    """Lines of a tuning database could not be read and were skipped (a backup is kept)."""


@dataclass(slots=True)
class Tables:
    """The valid content of a database directory, as the text of its lines.

    ``workloads[i]`` is the line of workload ``i`` and ``shashes[i]`` its structural hash, ``None``
    for a placeholder; ``records`` holds (workload index, record JSON text) in file order;
    ``skipped`` says why each dropped line was dropped; ``dirty`` is true when the files on disk
    differ from these tables (a line was dropped, or the last line lacks its newline).
    """
    workloads: list[str] = field(default_factory=list)
    shashes: list[str | None] = field(default_factory=list)
    records: list[tuple[int, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    dirty: bool = False

    def record_keys(self) -> set[tuple[str | None, str]]:
        """Return (workload hash, record text) of every record: a record's identity."""
        return {(self.shashes[idx], text) for idx, text in self.records}

    def workload_text(self) -> str:
        """Return the content of the workload file."""
        return "".join(line + "\n" for line in self.workloads)

    def record_text(self) -> str:
        """Return the content of the record file."""
        return "".join(f"[{idx},{text}]\n" for idx, text in self.records)


def read_tables(directory: str | Path, deep: bool = False) -> Tables:
    """Read a database directory, keeping the valid lines and noting the others.

    Args:
        directory: a directory holding ``WORKLOAD_FILE`` and ``RECORD_FILE`` (missing files read
            as empty).
        deep: also load every line with TVM (``Workload.from_json``, ``TuningRecord.from_json``);
            slow (about 20 ms a record), for files that pass the JSON check but that the loader
            still rejects.

    Returns:
        The ``Tables``; nothing is written.
    """
    directory = Path(directory)
    tables = Tables()
    wl_lines, wl_dirty = _lines(directory / WORKLOAD_FILE)
    rec_lines, rec_dirty = _lines(directory / RECORD_FILE)
    tables.dirty = wl_dirty or rec_dirty
    checked = [_workload_hash(line, deep) for line in wl_lines]
    last_good = max((i for i, (shash, _) in enumerate(checked) if shash is not None), default=-1)
    for i, (shash, why) in enumerate(checked):
        if shash is not None:
            tables.workloads.append(wl_lines[i])
            tables.shashes.append(shash)
            continue
        tables.skipped.append(f"{WORKLOAD_FILE} line {i + 1}: {why}")
        if i < last_good:  # keep the indices of the lines after it
            tables.workloads.append(placeholder_workload())
            tables.shashes.append(None)
    tables.dirty |= len(tables.skipped) > 0
    objects: dict[int, object] = {}  # workload index -> tvm Workload, for the deep check
    for j, line in enumerate(rec_lines):
        parsed, why = _record(line, tables.shashes)
        if parsed is not None and deep:
            why = _deep_record_error(parsed, tables.workloads, objects)
            parsed = parsed if why is None else None
        if parsed is None:
            tables.skipped.append(f"{RECORD_FILE} line {j + 1}: {why}")
            tables.dirty = True
        else:
            tables.records.append(parsed)
    return tables


def _lines(path: Path) -> tuple[list[str], bool]:
    """Return a file's lines without newlines, and whether it is not cleanly newline-terminated.

    Blank lines are returned too (as ``""``), and a line that is not UTF-8 as ``"\\x00"`` (not
    JSON), so that they are reported and dropped.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], False
    if not data:
        return [], False
    lines = data.split(b"\n")
    unterminated = lines[-1] != b""
    if not unterminated:
        lines.pop()
    return [_decode(line) for line in lines], unterminated


def _decode(line: bytes) -> str:
    """Decode one line; an undecodable one becomes ``"\\x00"``, which no check accepts."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return "\x00"


def _json_line(line: str) -> tuple[object, str]:
    """Return (the parsed JSON of a line, ``""``), or (``None``, why it is not JSON)."""
    if not line.strip():
        return None, "blank line"
    try:
        return json.loads(line), ""
    except ValueError as err:
        return None, f"not JSON ({err}); truncated by a crash?"


def _workload_hash(line: str, deep: bool) -> tuple[str | None, str]:
    """Return (the structural hash of a valid workload line, ``""``) or (``None``, why not)."""
    value, why = _json_line(line)
    if why:
        return None, why
    if (not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, str) for v in value)
            or not value[0].isdigit() or not value[1]):
        return None, "not a [hash, module] pair"
    if deep:
        from tvm.s_tir import meta_schedule as ms
        try:
            ms.database.Workload.from_json(value)
        except (RuntimeError, ValueError, TypeError) as err:
            return None, f"TVM cannot load the module ({type(err).__name__}: {err})"
    return value[0], ""


def _record(line: str, shashes: list[str | None]) -> tuple[tuple[int, str] | None, str]:
    """Return ((workload index, record text), ``""``) for a valid record line, else (None, why)."""
    value, why = _json_line(line)
    if why:
        return None, why
    if not isinstance(value, list) or len(value) != 2 or type(value[0]) is not int:
        return None, "not a [workload index, record] pair"
    idx, record = value
    if not 0 <= idx < len(shashes):
        return None, f"workload index {idx} is not in {WORKLOAD_FILE} ({len(shashes)} lines)"
    if shashes[idx] is None:
        return None, f"its workload (line {idx + 1}) is damaged"
    if not _record_shape_ok(record):
        return None, "not a [trace, run_secs, target, args_info] record"
    text = line[line.index(",") + 1:line.rindex("]")].strip()
    return (idx, text), ""


def _record_shape_ok(record: object) -> bool:
    """Whether a parsed record has the shape TuningRecord.AsJSON writes."""
    if not isinstance(record, list) or len(record) != 4:
        return False
    trace, run_secs, target, args_info = record
    return (isinstance(trace, list) and len(trace) == 2 and all(isinstance(t, list) for t in trace)
            and (run_secs is None or (isinstance(run_secs, list) and all(
                isinstance(s, (int, float)) and not isinstance(s, bool) for s in run_secs)))
            and (target is None or isinstance(target, dict))
            and (args_info is None or isinstance(args_info, list)))


def _deep_record_error(parsed: tuple[int, str], workloads: list[str],
                       objects: dict[int, object]) -> str | None:
    """Load one record with TVM; return why it fails, or ``None``."""
    from tvm.s_tir import meta_schedule as ms
    idx, text = parsed
    try:
        if idx not in objects:
            objects[idx] = ms.database.Workload.from_json(json.loads(workloads[idx]))
        ms.database.TuningRecord.from_json(json.loads(text), objects[idx])
    except (RuntimeError, ValueError, TypeError) as err:
        return f"TVM cannot load the record ({type(err).__name__}: {err})"
    return None


@functools.cache
def placeholder_workload() -> str:
    """Return a valid workload line that no task matches: an empty PrimFunc ``tvm_pet_placeholder``.

    It stands in for a damaged workload line that has valid lines after it, so that their indices,
    which the records use, stay the same.
    """
    import tvm
    from tvm.s_tir import meta_schedule as ms
    func = tvm.tirx.PrimFunc([], tvm.tirx.Evaluate(0)).with_attr("global_symbol",
                                                                "tvm_pet_placeholder")
    shash, module = ms.database.Workload(tvm.IRModule({"main": func})).as_json()
    return json.dumps([str(shash), str(module)], separators=(",", ":"))


def repair(directory: str | Path, deep: bool = False) -> Tables:
    """Rewrite a damaged database with its valid lines; the caller holds the exclusive lock.

    A damaged file is first copied to ``<file>.corrupt`` (``.corrupt.1``, ... when taken), and a
    ``CorruptDatabaseWarning`` names the skipped lines. An undamaged database is not written.

    Args:
        directory: the database directory.
        deep: check every line with TVM too (see ``read_tables``).

    Returns:
        The tables as now on disk.
    """
    directory = Path(directory)
    tables = read_tables(directory, deep)
    if not tables.dirty:
        return tables
    backups = []
    # records first: each one points at a workload line that the repair leaves where it is
    contents = ((RECORD_FILE, tables.record_text()), (WORKLOAD_FILE, tables.workload_text()))
    for name, text in contents:
        path = directory / name
        old = path.read_bytes() if path.exists() else b""
        if old == text.encode():
            continue
        if tables.skipped:  # not when only the final newline was missing
            backup = _free_backup_path(path)
            atomic_write(backup, old)
            backups.append(backup.name)
        atomic_write(path, text)
    if tables.skipped:
        shown = "; ".join(tables.skipped[:5]) + (" ..." if len(tables.skipped) > 5 else "")
        warnings.warn(f"tuning database {directory}: skipped {len(tables.skipped)} damaged "
                      f"line(s) ({shown}); kept {len(tables.records)} record(s); the originals "
                      f"are in {', '.join(backups) or 'place'}", CorruptDatabaseWarning,
                      stacklevel=3)
    tables.dirty = False
    _repack(directory)
    return tables


def _free_backup_path(path: Path) -> Path:
    """Return ``<path>.corrupt``, or the first free ``<path>.corrupt.<n>``."""
    candidate = path.with_name(path.name + BACKUP_SUFFIX)
    n = 0
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}{BACKUP_SUFFIX}.{n}")
    return candidate


def has_database(directory: str | Path) -> bool:
    """Whether a directory holds a database: its workload file, plain or packed."""
    directory = Path(directory)
    return any((directory / name).exists()
               for name in (WORKLOAD_FILE, WORKLOAD_FILE + PACKED_SUFFIX))


def pack(directory: str | Path) -> int:
    """Write the packed copies (``<file>.xz``) of a directory's database files, as a repository
    ships them; from then on every write of the plain files rewrites them too (``repair``,
    ``prune``, ``drop_records``; ``merge`` when its process exits, :func:`repack_deferred`),
    so the packed copies stay the database of record.

    Returns:
        The size of the packed copies, in bytes.
    """
    directory = Path(directory)
    ensure_files(directory)
    with dir_lock(directory):
        return _repack(directory, force=True)


def unpack(directory: str | Path) -> bool:
    """Make the plain database files that MetaSchedule reads from their packed copies, when
    those are new here: on first use of a fresh checkout, or after a ``git pull`` brought other
    ones (their hashes differ from ``PACKED_STAMP_FILE``). Cheap otherwise (hashing under 1 MB).

    A directory without packed copies is left alone. The plain files are replaced, not merged:
    every write here also rewrote the packed copies, so these hold what the plain files held
    unless they came from elsewhere.

    Returns:
        Whether the plain files were made again.
    """
    directory = Path(directory)
    packed = [directory / (name + PACKED_SUFFIX) for name in (WORKLOAD_FILE, RECORD_FILE)]
    if not packed[0].exists() or _unpacked(directory, packed):
        return False
    with dir_lock(directory):
        if _unpacked(directory, packed):  # another process did it meanwhile
            return False
        try:
            plain = [lzma.decompress(path.read_bytes()) if path.exists() else b""
                     for path in packed]
        except lzma.LZMAError as err:
            warnings.warn(f"the packed tuning database in {directory} is damaged ({err}); the "
                          "plain files there are used as they are", CorruptDatabaseWarning,
                          stacklevel=2)
            return False
        for path, data in zip(packed, plain):  # workloads first
            atomic_write(path.with_name(path.name[:-len(PACKED_SUFFIX)]), data)
        _write_stamp(directory, packed)
    return True


def _unpacked(directory: Path, packed: list[Path]) -> bool:
    """Whether the plain files were made from (or written into) these packed copies."""
    if not (directory / WORKLOAD_FILE).exists():
        return False
    try:
        stamp = json.loads((directory / PACKED_STAMP_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return False
    return stamp == _hashes(packed)


def _hashes(packed: list[Path]) -> dict[str, str]:
    """``{file name: SHA-1 of its bytes}`` of the packed copies that exist."""
    return {path.name: hashlib.sha1(path.read_bytes()).hexdigest()
            for path in packed if path.exists()}


def _write_stamp(directory: Path, packed: list[Path]) -> None:
    atomic_write_json(directory / PACKED_STAMP_FILE, _hashes(packed), indent=0, sort_keys=True)


#: Directories whose packed copies a ``merge`` left behind its plain files, repacked when the
#: process exits (:func:`repack_deferred`).
_DEFERRED: set[Path] = set()


def _repack_at_exit(directory: Path) -> None:
    """Have :func:`repack_deferred` rewrite the packed copies of ``directory`` (when it has
    them) when the process exits. Until then they lag behind the plain files, which are the
    database in use: the stamp still matches them, so :func:`unpack` leaves the plain files
    alone, and a process killed before its exit leaves them for the next write to repack."""
    if (directory / (WORKLOAD_FILE + PACKED_SUFFIX)).exists():
        _DEFERRED.add(directory)


def repack_deferred() -> int:
    """Rewrite the packed copies that merges left behind (:func:`_repack_at_exit`), each
    under its directory's exclusive lock; return how many directories were repacked."""
    done = 0
    for directory in sorted(_DEFERRED):
        if (directory / WORKLOAD_FILE).exists():
            with dir_lock(directory):
                _repack(directory)
            done += 1
    _DEFERRED.clear()
    return done


atexit.register(repack_deferred)


def _repack(directory: Path, force: bool = False) -> int:
    """After a write of the plain files (the caller holds the exclusive lock), rewrite their
    packed copies when the directory has them (or when ``force``); return their size."""
    packed = [directory / (name + PACKED_SUFFIX) for name in (WORKLOAD_FILE, RECORD_FILE)]
    if not force and not packed[0].exists():
        return 0
    for path in packed:
        plain = path.with_name(path.name[:-len(PACKED_SUFFIX)])
        data = plain.read_bytes() if plain.exists() else b""
        atomic_write(path, lzma.compress(data, preset=PACK_PRESET))
    _write_stamp(directory, packed)
    return sum(path.stat().st_size for path in packed)


def ensure_files(directory: str | Path) -> None:
    """Create the directory and empty database files where missing (under the exclusive lock).

    Packed copies with no plain files yet (a fresh checkout's shipped records) are unpacked
    first: a write that started from empty plain files would repack them empty.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    unpack(directory)
    if all((directory / name).exists() for name in (WORKLOAD_FILE, RECORD_FILE)):
        return
    with dir_lock(directory):
        for name in (WORKLOAD_FILE, RECORD_FILE):
            if not (directory / name).exists():
                atomic_write(directory / name, b"")


def merge(source: str | Path, destination: str | Path) -> int:
    """Add the records of the database in ``source`` to the one in ``destination``.

    Takes the exclusive lock of ``destination``, repairs it if damaged, then appends the source's
    workloads that it lacks and the records that it does not hold yet (same workload hash, same
    text), with their indices remapped. Damaged lines of the source (a process killed in the middle
    of a write) are skipped with a warning. Merging the same source twice adds nothing.

    Args:
        source: a database directory (e.g. a ``pending`` one); it is only read.
        destination: the shared database directory; created when missing.

    Returns:
        The number of records added.
    """
    destination = Path(destination)
    ensure_files(destination)
    incoming = read_tables(source)
    if incoming.skipped:
        warnings.warn(f"pending tuning database {source}: skipped {len(incoming.skipped)} damaged "
                      f"line(s) ({'; '.join(incoming.skipped[:3])})", CorruptDatabaseWarning,
                      stacklevel=2)
    if not incoming.records:
        return 0
    with dir_lock(destination):
        tables = repair(destination)
        index = {}
        for i, shash in enumerate(tables.shashes):
            if shash is not None:
                index.setdefault(shash, i)
        known = tables.record_keys()
        new_workloads: list[str] = []
        new_records: list[tuple[int, str]] = []
        for idx, text in incoming.records:
            shash = incoming.shashes[idx]
            if (shash, text) in known:
                continue
            known.add((shash, text))
            if shash not in index:
                index[shash] = len(tables.workloads) + len(new_workloads)
                new_workloads.append(incoming.workloads[idx])
            new_records.append((index[shash], text))
        if new_workloads:  # workloads first: a record never points past the workload file
            tables.workloads += new_workloads
            atomic_write(destination / WORKLOAD_FILE, tables.workload_text())
        if new_records:
            tables.records += new_records
            atomic_write(destination / RECORD_FILE, tables.record_text())
        if new_workloads or new_records:
            _repack_at_exit(destination)
    return len(new_records)


def seed(source: Tables, shashes: str | Iterable[str], destination: str | Path) -> int:
    """Start a database in ``destination`` with the lines of some workloads from ``source``.

    Args:
        source: the tables to copy from.
        shashes: the structural hash of one workload, or several.
        destination: the directory to write.

    Returns:
        The number of records copied (0 when ``source`` has none of the workloads).
    """
    destination = Path(destination)
    wanted = {shashes} if isinstance(shashes, str) else set(shashes)
    index: dict[int, int] = {}  # source workload index -> destination index (first of a hash)
    seeded = Tables()
    for i, shash in enumerate(source.shashes):
        if shash in wanted:
            if shash not in seeded.shashes:
                seeded.workloads.append(source.workloads[i])
                seeded.shashes.append(shash)
            index[i] = seeded.shashes.index(shash)
    seeded.records = [(index[idx], text) for idx, text in source.records if idx in index]
    atomic_write(destination / WORKLOAD_FILE, seeded.workload_text())
    atomic_write(destination / RECORD_FILE, seeded.record_text())
    return len(seeded.records)


def prune(directory: str | Path, keep: int) -> int:
    """Keep each workload's ``keep`` fastest valid records and drop the others.

    A task's trial count is what tuning compares with its budget, so the number of records
    dropped per workload is added to ``PRUNED_FILE`` (written first: a crash between the two
    writes over-counts, never re-tunes). Failed candidates go first. Applying and costing need
    only the best record, and loading a record takes about 20 ms, so pruning is what keeps the
    shipped records small and quick to open.

    Args:
        directory: a database directory.
        keep: records kept per workload (at least 1).

    Returns:
        The number of records dropped.
    """
    if keep < 1:
        raise ValueError(f"keep={keep}: a pruned workload keeps at least its best record")

    def fastest(tables: Tables) -> list[tuple[int, str]]:
        by_workload: dict[int, list[str]] = {}
        for idx, text in tables.records:
            by_workload.setdefault(idx, []).append(text)
        kept = {idx: set(sorted(texts, key=_mean_secs)[:keep])
                for idx, texts in by_workload.items()}
        return [(idx, text) for idx, text in tables.records if text in kept[idx]]

    return _keep_records(Path(directory), fastest)


def drop_records(directory: str | Path, wrong: Callable[[str | None, str], bool]) -> int:
    """Drop the records for which ``wrong(workload hash, record JSON text)`` holds (e.g. those
    whose schedule computes something else: ``scripts/check_records.py``). They count as pruned
    (``PRUNED_FILE``): their trials were spent, and tuning does not redo them.

    Returns:
        The number of records dropped.
    """
    return _keep_records(Path(directory), lambda tables: [
        (idx, text) for idx, text in tables.records if not wrong(tables.shashes[idx], text)])


def _keep_records(directory: Path, keep: Callable[[Tables], list[tuple[int, str]]]) -> int:
    """Under the directory's exclusive lock, keep the records ``keep(tables)`` returns (in file
    order) and drop the others, adding the dropped ones per workload to ``PRUNED_FILE`` (written
    first: a crash between the two writes over-counts, never re-tunes); returns how many."""
    unpack(directory)  # packed copies only: keep from what they hold, not from nothing
    with dir_lock(directory):
        tables = repair(directory)
        records = keep(tables)
        dropped = len(tables.records) - len(records)
        if not dropped:
            return 0
        counts = pruned_counts(directory)
        left = collections.Counter(records)
        for idx, text in tables.records:
            if left[(idx, text)]:
                left[(idx, text)] -= 1
            else:
                shash = tables.shashes[idx]
                counts[shash] = counts.get(shash, 0) + 1
        atomic_write_json(directory / PRUNED_FILE, counts, indent=0, sort_keys=True)
        tables.records = records
        atomic_write(directory / RECORD_FILE, tables.record_text())
        _repack(directory)
    return dropped


def pruned_counts(directory: str | Path) -> dict[str, int]:
    """Return ``{workload hash: records dropped by prune}`` (empty when nothing was pruned)."""
    return _counts(Path(directory) / PRUNED_FILE, "pruned tasks count only their kept records")


def mark_exhausted(directory: str | Path, shash: str, trials: int) -> None:
    """Record that the search of workload ``shash`` ran out of new candidates at ``trials``."""
    directory = Path(directory)
    with dir_lock(directory):
        marked = exhausted(directory)
        marked[str(shash)] = max(trials, marked.get(str(shash), 0))
        atomic_write_json(directory / EXHAUSTED_FILE, marked, indent=0, sort_keys=True)


def exhausted(directory: str | Path) -> dict[str, int]:
    """Return ``{workload hash: trials}`` of the tasks whose search ran out (``mark_exhausted``)."""
    return _counts(Path(directory) / EXHAUSTED_FILE, "their search runs again at a larger budget")


def _counts(path: Path, otherwise: str) -> dict[str, int]:
    """A ``{workload hash: count}`` JSON sidecar; empty when it is missing, and when it is damaged
    (with a warning that says what follows: ``otherwise``)."""
    try:
        return {str(k): int(v) for k, v in json.loads(path.read_text()).items()}
    except FileNotFoundError:
        return {}
    except (ValueError, TypeError, AttributeError) as err:
        warnings.warn(f"{path} is damaged ({err}); {otherwise}", CorruptDatabaseWarning,
                      stacklevel=3)
        return {}


def _mean_secs(record_text: str) -> float:
    """The mean measured seconds of a record's JSON text; infinity for a failed candidate."""
    run_secs = json.loads(record_text)[1]
    if not run_secs:
        return float("inf")
    mean = sum(run_secs) / len(run_secs)
    return float("inf") if mean >= 1e9 else mean


@contextlib.contextmanager
def pending(directory: str | Path) -> Iterator[Path]:
    """Yield a new private database directory under ``<directory>/pending/``; merge it on exit.

    The directory stays locked while the ``with`` block runs, which tells ``recover`` that its
    process is alive. On exit, normal or not (an exception, ``KeyboardInterrupt``), its records are
    merged into ``directory`` and it is removed; if the merge itself fails, it is left for
    ``recover``.
    """
    root = Path(directory) / PENDING_DIR
    root.mkdir(parents=True, exist_ok=True)
    # created under a dot-name that ``recover`` skips, renamed once locked: never seen unlocked
    staging = Path(tempfile.mkdtemp(prefix=".", dir=root))
    with dir_lock(staging):
        path = root / f"{os.getpid()}-{staging.name[1:]}"
        os.rename(staging, path)
        try:
            yield path
        finally:
            merge(path, directory)
            shutil.rmtree(path)


def recover(directory: str | Path) -> int:
    """Merge the pending databases left by dead processes into ``directory``, and remove them.

    A pending directory whose lock is free belongs to a process that has exited without merging
    (killed); one that is locked belongs to a live tuning run and is left alone.

    Returns:
        The number of records recovered.
    """
    root = Path(directory) / PENDING_DIR
    if not root.is_dir():
        return 0
    added = 0
    for path in sorted(root.iterdir()):
        if path.name.startswith(".") or not path.is_dir():
            continue
        try:
            with dir_lock(path, blocking=False) as held:
                if not held or not path.is_dir():  # alive, or another process recovered it
                    continue
                added += merge(path, directory)
                shutil.rmtree(path)
        except FileNotFoundError:  # removed by another process recovering at the same time
            continue
    return added


class SidecarCache:
    """A ``{key: value}`` JSON file beside the records that concurrent processes share, or a
    dict in memory without a ``path`` (``UntunedTimes``, ``RecordChecks``).

    Each :meth:`_store` re-reads the file under its directory's exclusive lock, adds the entry
    and replaces the file atomically, so concurrent processes lose no entry. A damaged file is
    set aside as ``<file>.corrupt`` with a ``CorruptDatabaseWarning`` naming it (``WHAT``) and
    saying what follows (``AFTER``); its entries are then made again.
    """

    WHAT = "cache"
    AFTER = "its entries will be made again"

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._entries: dict = self._read() if self.path is not None else {}

    @staticmethod
    def _value(raw):
        """One stored value as the cache holds it (a subclass converts: ``float``, ``bool``)."""
        return raw

    def _read(self) -> dict:
        """The entries in the file, ``{}`` when it is missing or damaged (then backed up)."""
        assert self.path is not None
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            return {str(k): self._value(v) for k, v in json.loads(text).items()}
        except (ValueError, TypeError, AttributeError) as err:
            backup = self.path.with_name(self.path.name + BACKUP_SUFFIX)
            atomic_write(backup, text)
            self.path.unlink(missing_ok=True)
            warnings.warn(f"{self.WHAT} {self.path} is damaged ({err}); moved to {backup}, "
                          f"{self.AFTER}", CorruptDatabaseWarning, stacklevel=4)
            return {}

    def _store(self, key: str, value) -> None:
        """Cache an entry, and merge it into the file when the cache has one."""
        self._entries[key] = value
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with dir_lock(self.path.parent):
            self._entries = {**self._read(), **self._entries}
            atomic_write_json(self.path, self._entries, indent=0, sort_keys=True)
