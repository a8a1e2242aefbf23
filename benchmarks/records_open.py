"""How long opening the shipped tuning records takes: MetaSchedule's ``JSONDatabase`` (every
workload and record loaded) against tvm_pet's ``LazyDatabase`` (the lines read, each task loaded
when first asked for).

    python benchmarks/records_open.py [--rounds 3] [--out DIR]

For each shipped records folder, the two are opened alternately, ``--rounds`` times each, in this
process (the plain files unpacked first, untimed); the table gives the median seconds and the
ratio. Results go to ``benchmarks/results/records_open.{json,md}``. Nothing here fails on timing.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    from tvm_pet.tune import dbfile, records
    rows = []
    root = pathlib.Path(records.SHIPPED_RECORDS_DIR)
    for folder in sorted(p for p in root.iterdir() if dbfile.has_database(p)):
        records._unpacked(folder)
        seconds = {"JSONDatabase": [], "LazyDatabase": []}
        for _ in range(args.rounds):
            for name, open_ in (("JSONDatabase", lambda: records._open_dir(folder)),
                                ("LazyDatabase", lambda: records._open_dir(folder, lazy=True))):
                start = time.perf_counter()
                opened = open_()
                seconds[name].append(time.perf_counter() - start)
                del opened
        tables = dbfile.read_tables(folder)
        row = {"records": folder.name, "workloads": len(tables.workloads),
               "tuning_records": len(tables.records),
               **{f"{k}_s": statistics.median(v) for k, v in seconds.items()}}
        row["ratio"] = row["JSONDatabase_s"] / row["LazyDatabase_s"]
        print(row, flush=True)
        rows.append(row)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = {"processor": platform.processor() or platform.machine(), "rounds": args.rounds}
    (out / "records_open.json").write_text(json.dumps({"machine": machine, "rows": rows},
                                                      indent=2) + "\n")
    lines = ["| records | workloads | records | JSONDatabase s | LazyDatabase s | ratio |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['records']} | {r['workloads']} | {r['tuning_records']} | "
              f"{r['JSONDatabase_s']:.2f} | {r['LazyDatabase_s']:.2f} | ×{r['ratio']:.0f} |"
              for r in rows]
    lines.append(f"\nMedian of {args.rounds} opens each, alternated, in one process; the plain "
                 "files unpacked first. The lazy one loads a task's workload and records with TVM "
                 "when that task is first asked for (`records.LazyDatabase`).")
    (out / "records_open.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
