"""Check every workload's records against its kernel, and optionally drop the wrong ones.

    python scripts/check_records.py                       # the shipped records of this CPU
    python scripts/check_records.py --drop                # and remove the wrong records

For each workload of the target's records directory, its records are checked fastest first
(:mod:`tvm_pet.tune.record_check`: the schedule and the kernel as it is run on the same random
arguments) until one agrees; every record found wrong is listed. The verdicts are cached in the
directory's ``record_checks.json`` (a later ``tvm-pet optimize`` does not check them again). With
``--drop`` the wrong records are removed from the database files (the rest are kept as they
are). A kernel that takes seconds untuned takes seconds to check.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def check(work_dir, target, drop: bool = False) -> list[tuple[str, list[float]]]:
    """Check each workload's records in ``work_dir`` fastest first until one agrees (verdicts
    cached in its ``record_checks.json``); with ``drop``, remove the wrong ones. Returns the wrong
    records as ``(workload hash, run seconds)``. Run it before pruning: a pruned workload keeps
    its fastest records, and those may all be wrong where a slower right one is dropped."""
    import tvm_ffi

    from tvm_pet.tune import dbfile, records
    from tvm_pet.tune.record_check import CHECKS_FILE, RecordChecks, record_key

    database = records.open_database(work_dir, target, create=False)
    checks = RecordChecks(pathlib.Path(work_dir) / CHECKS_FILE)
    workloads = {}  # structural hash -> workload
    for record in database.get_all_tuning_records():
        workloads.setdefault(int(tvm_ffi.structural_hash(record.workload.mod)), record.workload)
    wrong, start = [], time.perf_counter()
    for n, (shash, workload) in enumerate(workloads.items(), 1):
        for record in database.get_top_k(workload, records.RANKED_RECORDS):
            if checks.agrees(workload.mod, shash, record, target):
                break
            wrong.append((str(shash), [float(s) for s in record.run_secs]))
            print(f"  wrong: {record_key(shash, record)} "
                  f"({records.mean_run_secs(record) * 1e3:.3g} ms)", flush=True)
        print(f"[{n}/{len(workloads)}] {time.perf_counter() - start:.0f} s", flush=True)
    print(f"{len(workloads)} workloads checked, {len(wrong)} wrong records", flush=True)
    if drop and wrong:
        dropped = dbfile.drop_records(
            work_dir, lambda shash, text: (shash, json.loads(text)[1]) in wrong)
        print(f"dropped {dropped} records", flush=True)
    return wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--records", default=str(ROOT / "tvm_pet" / "tuning_logs"))
    parser.add_argument("--drop", action="store_true", help="remove the wrong records")
    args = parser.parse_args()

    from tvm_pet.tune import records, resolve_target

    target = resolve_target(args.target)
    wrong = check(records.db_dir(args.records, target), target, drop=args.drop)
    print(json.dumps({"wrong": wrong}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
