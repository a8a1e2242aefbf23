"""tvm_pet installed as a wheel would be: its shipped records are package data, found from any
directory, and a read-only install uses them from a copy in the user's cache.

The install test builds the checkout into a fresh virtualenv (``pip install``, not editable, with
no download: ``--no-deps --no-build-isolation --no-index``) and runs ``tvm-pet`` from a directory
outside the checkout; the other tests check the user's copy
(:func:`tvm_pet.tune.shipped.user_records_copy`) on small hand-written databases.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import site
import subprocess
import sys

import pytest

tvm = pytest.importorskip("tvm")

from tests.records import TARGET, task_mods, write_records  # noqa: E402
from tvm_pet.tune import dbfile  # noqa: E402
from tvm_pet.tune.records import count_records  # noqa: E402
from tvm_pet.tune.shipped import (COPY_STAMP_FILE, SHIPPED_FILES,  # noqa: E402
                                  package_records, shipped_records_dir, user_records_copy)
from tvm_pet.tune.targets import resolve_target, target_dir  # noqa: E402

CHECKOUT = pathlib.Path(__file__).resolve().parents[1]
KEY = target_dir(TARGET)


# ------------------------------------------------------------------------ the package's records

def test_a_checkout_uses_its_shipped_records_in_place():
    """In a checkout (or an editable install) the package folder is writable: the records are
    used where they ship, as before they were package data."""
    assert package_records() == CHECKOUT / "tvm_pet" / "tuning_logs"
    assert shipped_records_dir() == package_records()


def _package(root: pathlib.Path, mods, checks: dict, per_task: int = 2) -> pathlib.Path:
    """A shipped records root as a package holds it: the packed database and its tables only."""
    folder = root / "tuning_logs" / KEY
    write_records(folder, mods, per_task=per_task)
    dbfile.pack(folder)
    for path in folder.iterdir():
        if path.name not in SHIPPED_FILES:
            path.unlink()
    (folder / "record_checks.json").write_text(json.dumps(checks))
    return root / "tuning_logs"


def _files(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_a_read_only_package_is_used_from_a_copy_that_takes_the_caches(tmp_path):
    package = _package(tmp_path / "v1", task_mods(2), {"1:aa": True})
    shipped = _files(package)
    copy = user_records_copy(package, tmp_path / "cache" / "tuning_logs")
    copied = _files(copy)
    assert {name: copied.get(name) for name in shipped} == shipped  # every shipped file
    assert count_records(copy, TARGET) == 4  # unpacked in the copy, on first use
    assert dbfile.has_database(copy / KEY) and (copy / KEY / dbfile.WORKLOAD_FILE).exists()
    assert _files(package) == shipped  # nothing written beside the package's files
    stamp = (copy / KEY / COPY_STAMP_FILE).stat().st_mtime_ns
    user_records_copy(package, copy)  # up to date: nothing copied again
    assert (copy / KEY / COPY_STAMP_FILE).stat().st_mtime_ns == stamp


def test_the_records_are_used_in_place_where_writable_else_from_the_users_cache(
        tmp_path, monkeypatch):
    from tvm_pet.tune import shipped
    package = _package(tmp_path / "site-packages", task_mods(1), {})
    shipped_files = _files(package)
    monkeypatch.setattr(shipped, "package_records", lambda: package)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert shipped._shipped_records_dir.__wrapped__() == package
    real_access = os.access

    def read_only(path, mode, *args, **kwargs):  # as a user who may not write the package
        inside = pathlib.Path(path).resolve().is_relative_to(package.resolve())
        return not (inside and mode & os.W_OK) and real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", read_only)
    copy = shipped._shipped_records_dir.__wrapped__()
    assert copy == tmp_path / "cache" / "tvm_pet" / "tuning_logs"
    assert count_records(copy, TARGET) == 2 and _files(package) == shipped_files


def test_an_upgrade_replaces_an_unchanged_copy_and_merges_into_a_changed_one(tmp_path):
    a, b, c = task_mods(3)
    old = _package(tmp_path / "v1", [a, b], {"1:aa": True})
    new = _package(tmp_path / "v2", [a, b, c], {"1:aa": True, "3:cc": False})
    untouched = user_records_copy(old, tmp_path / "untouched")
    changed = user_records_copy(old, tmp_path / "changed")
    # records tuned into the copy (merged, then repacked as a process does when it exits), and
    # a verdict checked there
    write_records(tmp_path / "pending", [a], per_task=1, base=5e-4)
    assert dbfile.merge(tmp_path / "pending", changed / KEY) == 1
    dbfile.repack_deferred()
    (changed / KEY / "record_checks.json").write_text(json.dumps({"1:aa": True, "2:bb": True}))

    user_records_copy(new, untouched)
    user_records_copy(new, changed)
    for name in SHIPPED_FILES:  # the unchanged copy holds the new package's files
        if (new / KEY / name).exists():
            assert (untouched / KEY / name).read_bytes() == (new / KEY / name).read_bytes()
    assert count_records(untouched, TARGET) == 6
    # the changed copy keeps what was measured there, and has the new package's records too
    assert count_records(changed, TARGET) == 7
    tables = dbfile.read_tables(changed / KEY)
    assert len(set(tables.shashes)) == 3
    assert json.loads((changed / KEY / "record_checks.json").read_text()) == {
        "1:aa": True, "2:bb": True, "3:cc": False}


# ------------------------------------------------------------------------ installed from a wheel

def _host_key() -> str:
    """The records key of this CPU's own level at 2 cores, the level the shipped records are for:
    an AVX-512 level's code stops an AVX2 CPU with 'Illegal instruction'."""
    return target_dir(resolve_target("llvm -num-cores=2"))


def _source_copy(dest: pathlib.Path) -> pathlib.Path:
    """The files a build reads, copied, so that no build folder is left in the checkout and no
    earlier build's leftovers reach the wheel. The records' plain files and caches are copied
    too: the package data must leave them out."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(CHECKOUT / name, dest / name)
    shutil.copytree(CHECKOUT / "tvm_pet", dest / "tvm_pet",
                    ignore=shutil.ignore_patterns("__pycache__", "logs", "pending"))
    return dest


def _venv(path: pathlib.Path) -> pathlib.Path:
    """A fresh virtualenv that sees this environment's packages (TVM, pip, setuptools) but not
    its tvm_pet: where this interpreter is itself a virtualenv, ``--system-site-packages`` gives
    the base interpreter's, so this environment's site-packages are appended by a ``.pth`` line;
    that adds them to ``sys.path`` without reading their own ``.pth`` files (an editable install
    of tvm_pet is one)."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    outer = [p for p in site.getsitepackages() if os.path.isdir(p)]
    (pathlib.Path(purelib) / "_outer_environment.pth").write_text("\n".join(outer) + "\n")
    return python


def test_an_installed_package_runs_from_anywhere_with_its_shipped_records(tmp_path):
    """``pip install`` of the checkout, then ``tvm-pet model`` and ``tvm-pet optimize`` from a
    directory outside it: every kernel is built from the records that ship in the installed
    package, and nothing is tuned."""
    key = _host_key()
    if not dbfile.has_database(package_records() / key):
        pytest.skip(f"no shipped {key} records for this CPU's level")
    if not all(importlib.util.find_spec(name) for name in ("pip", "setuptools")):
        pytest.skip("the install needs pip and setuptools here (it downloads nothing)")
    python = _venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", str(_source_copy(tmp_path / "src"))],
                   check=True, env=env, cwd=tmp_path, timeout=300)

    work = tmp_path / "work"
    work.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import sysconfig, tvm_pet\n"
         "from tvm_pet.tune.shipped import package_records, shipped_records_dir\n"
         "print(sysconfig.get_paths()['purelib'], tvm_pet.__file__, package_records(), "
         "shipped_records_dir(), sep='\\n')"],
        check=True, capture_output=True, text=True, env=env, cwd=work).stdout.splitlines()
    site_packages, module, shipped, used = (pathlib.Path(p) for p in where)
    assert module == site_packages / "tvm_pet" / "__init__.py"  # not the checkout's
    assert shipped == used == site_packages / "tvm_pet" / "tuning_logs"
    for folder in package_records().iterdir():  # exactly the shipped files
        if dbfile.has_database(folder):
            assert sorted(p.name for p in (shipped / folder.name).iterdir()) == sorted(
                name for name in SHIPPED_FILES if (folder / name).exists())

    tvm_pet = str(python.parent / "tvm-pet")
    subprocess.run([tvm_pet, "model", "conv5x5", "m.onnx"], check=True, env=env, cwd=work,
                   timeout=300)
    # one timing process, one candidate, no second look (it would tune a close call again
    # with another seed) and no replication: the test is about the records, not the decision
    subprocess.run([tvm_pet, "optimize", "m.onnx", "--out", "o", "--target",
                    "llvm -num-cores=2", "--quiet", "--timing-processes", "1", "--confirm", "1",
                    "--no-second-look", "--no-replication"],
                   check=True, env=env, cwd=work, timeout=600)
    report = json.loads((work / "o" / "report.json").read_text())
    assert report["new_trials"] == 0
    assert pathlib.Path(report["tuning"]["records"]) == shipped / key
    kernels = report["kernels"]
    assert kernels["total"] >= 1 and kernels["tuned"] == kernels["total"]
    assert not kernels["untuned_decision"]
    if kernels["kept_total"] is not None:  # PET's program kept: its kernels too
        assert kernels["kept_tuned"] == kernels["kept_total"]
    assert not (work / "tuning_logs").exists()  # nothing tuned into the working directory
