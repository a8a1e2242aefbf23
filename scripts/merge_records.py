"""Merge the records of other tunings into the shipped ones, keeping the fastest per workload.

    python scripts/merge_records.py /tmp/draws/resnet18-s1 /tmp/draws/resnet18-s2

At 32 trials per task one tuning is one draw of a kernel's schedule: another seed can find one
twice as fast (``benchmarks/results/draws.md``). Each source is a records folder as
``--records`` takes it (holding ``<target>/`` for the host target, or that folder itself). Its
workloads and records join the destination's (``tvm_pet.tune.dbfile.merge``: a record already
there is not added twice), then every workload keeps its ``--keep`` fastest records
(``dbfile.prune``), whose dropped records still count as trials, so a task tuned in three draws
counts three draws' trials and is not tuned again. The sources' exhausted-search markers
(``exhausted.json``: a task whose search ran out) and what their tuned mutants showed of each
kind of rewrite (``kinds.json``, :class:`tvm_pet.pipeline.kinds.Evidence`) join the
destination's. The destination's
record checks (``record_checks.json``) stay: a record is checked against its kernel when it is
first applied, or by ``scripts/check_records.py``, which a merge into the shipped records needs
(a test checks that every best record shipped has its verdict).
"""
from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", help="records folders of other tunings")
    parser.add_argument("--into", default=str(ROOT / "tvm_pet" / "tuning_logs"),
                        help="the records folder merged into (default: the shipped "
                             "tvm_pet/tuning_logs/)")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--keep", type=int, default=4, help="records kept per workload")
    args = parser.parse_args()

    from tvm_pet.pipeline.kinds import Evidence
    from tvm_pet.tune import dbfile, resolve_target
    from tvm_pet.tune.records import db_dir

    target = resolve_target(args.target)
    into = db_dir(args.into, target)
    for source in args.sources:
        folder = db_dir(source, target)
        if not dbfile.has_database(folder):
            print(f"{source}: no records for {into.name} (looked in {folder})", file=sys.stderr)
            return 2
        dbfile.unpack(folder)  # a copy of shipped records holds them packed
        print(f"{folder}: {dbfile.merge(folder, into)} records added", flush=True)
        # a task whose search ran out stays marked, or a rerun searches it again for nothing
        known = dbfile.exhausted(into)
        for shash, trials in dbfile.exhausted(folder).items():
            if trials > known.get(shash, -1):
                dbfile.mark_exhausted(into, shash, trials)
        Evidence.load(folder).save(into)  # the union, keyed by the kernels tuned
    print(f"{into}: pruned {dbfile.prune(into, keep=args.keep)} records, "
          f"{args.keep} kept per workload", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
