"""Time PET's verifier (and corrector) on the paper's Figure 1 and Figure 3 mutants at real size.

    python benchmarks/verify_bench.py [--repeat 5] [--out benchmarks/results/verify_bench.json]

Figure 3: dilated conv [1,512,14,14] (*) [256,512,3,3], dilation 2, against the space-to-batch
mutant. Figure 1: conv [16,48,38,38] (*) [64,48,5,5], pad 2, against pairs of images placed side
by side. The target is under 2 s per verification on a 2-core machine. Timings are medians of
``--repeat`` runs with min and max; nothing here fails on timing.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tvm_pet import example_pairs  # noqa: E402
from tvm_pet.verify.corrector import correct  # noqa: E402
from tvm_pet.verify.verifier import verify  # noqa: E402

CASES = {
    "figure3_dilated_conv_512x14x14":
        lambda: example_pairs.figure3_pair(1, 512, 14, 14, 256, exact=True),
    "figure3_partial_512x14x14":
        lambda: example_pairs.figure3_pair(1, 512, 14, 14, 256, exact=False),
    "figure1_side_by_side_16x48x38x38": lambda: example_pairs.figure1_pair(16, 48, 38, 38, 64, 5),
}


def _timed(fn, repeat: int) -> tuple[list[float], object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/verify_bench.json")
    args = parser.parse_args()
    rows = []
    for name, make in CASES.items():
        original, candidate = make()
        times, result = _timed(lambda: verify(original, candidate), args.repeat)
        ctimes, corrected = _timed(lambda: correct(original, candidate, result), 1)
        check = verify(original, corrected)
        diff = result.outputs[0]
        rows.append({
            "case": name, "verify_median_s": statistics.median(times),
            "verify_min_s": min(times), "verify_max_s": max(times),
            "boxes_tested": diff.tested_boxes, "positions": result.positions,
            "differing_boxes": len(diff.boxes), "equivalent": result.equivalent,
            "correct_s": ctimes[0], "corrected_equivalent": check.equivalent,
            "error_bound": result.error_bound,
        })
        print(f"{name:38s} verify {rows[-1]['verify_median_s']:.3f} s "
              f"[{min(times):.3f}-{max(times):.3f}]  boxes {diff.tested_boxes:4d}  "
              f"differ {len(diff.boxes)}  corrected exact: {check.equivalent}")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                           "processor": platform.processor() or platform.machine()},
                               "repeat": args.repeat, "results": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
