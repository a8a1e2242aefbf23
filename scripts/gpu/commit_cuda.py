"""Commit the candidates a GPU timed (``scripts/gpu/run_batch.py``) into the CUDA records.

    python scripts/gpu/commit_cuda.py build/gpu/batch_0=RESULTS/times_batch_0.json ... \\
        [--records tvm_pet/tuning_logs] [--arch sm_90] [--summary OUT.json]

Each BATCH=TIMES pair is committed with ``tvm_pet.contrib.cuda_offline.batch.commit_batch``
into ``<records>/cuda-<arch>/``, then each workload keeps its ``--keep`` fastest records
(``tvm_pet.tune.dbfile.prune``, as the CPU records: the dropped ones still count as trials),
and the packed copies a repository ships are written (``dbfile.pack``).
Prints, per task, the best candidate against TVM's default schedule, and the geo-mean of their
ratio.
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import warnings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pairs", nargs="+", help="BATCH_DIR=TIMES_JSON")
    parser.add_argument("--records", default="tvm_pet/tuning_logs")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--summary", type=pathlib.Path, default=None)
    parser.add_argument("--keep", type=int, default=4, help="records kept per workload")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    from tvm_pet.tune import dbfile
    from tvm_pet.tune.cuda import cuda_target
    from tvm_pet.contrib.cuda_offline.batch import commit_batch
    from tvm_pet.tune.records import db_dir
    target = cuda_target(args.arch)
    summary = {}
    for pair in args.pairs:
        batch, times = pair.split("=", 1)
        summary.update(commit_batch(batch, times, args.records, target))
    dropped = dbfile.prune(db_dir(args.records, target), args.keep)
    packed = dbfile.pack(db_dir(args.records, target))  # the copies a repository ships
    ratios = [t["dlight_s"] / t["best_s"] for t in summary.values()
              if t["best_s"] and t["dlight_s"]]
    for shash, t in sorted(summary.items(), key=lambda kv: kv[1]["name"]):
        best = f"{t['best_s'] * 1e6:.1f}" if t["best_s"] else "-"
        default = f"{t['dlight_s'] * 1e6:.1f}" if t["dlight_s"] else "-"
        print(f"{t['name']:<48} {t['records']:>3} records ({t['failed']} failed): best {best} us, "
              f"default schedule {default} us")
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
    print(f"{len(summary)} tasks committed to {args.records}/cuda-{args.arch}; best over the "
          f"default schedule: geo-mean x{geo:.2f} over {len(ratios)} tasks, "
          f"{sum(r > 1 for r in ratios)} faster; pruned to {args.keep} a workload "
          f"({dropped} dropped), packed {packed / 2**20:.1f} MiB")
    if args.summary:
        args.summary.write_text(json.dumps({"tasks": summary, "geo_mean_best_over_default": geo},
                                           indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
