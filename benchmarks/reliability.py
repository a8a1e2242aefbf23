"""Reliability of record: fuzzing, external ONNX suites through PETPass, bad input, tuning faults.

    python benchmarks/reliability.py                 # everything (about an hour on 2 cores)
    python benchmarks/reliability.py --fuzz 100 --node-cases 60 --light none   # a quick look
    python benchmarks/reliability.py --stages opt_in --out OUT.json   # one part

It runs, outside pytest, the same code the tests run (``tests/fuzz_e2e.py``,
``tests/onnx_suite.py``, ``tests/bad_inputs.py``) and the fault tests of
``tests/test_tuning_faults.py`` (through pytest; ``--with-tuning`` adds the tuning-marked ones),
and writes the counts to ``benchmarks/results/reliability.json``:

- programs fuzzed (generator → verifier → corrector → Relax → compiled module), mutants checked,
  exact (Z_p) and float mismatches, crashes;
- the same for the rewrites offered only when asked (``opt_in``): Winograd's mutants of
  convolutions it can take (``tests.fuzz_e2e.winograd_fuzz``), and random programs with Winograd
  and the window product (``--im2col``) offered, their mutants on TVM first;
- injected non-equivalent mutants and how many the verifier caught;
- onnx backend node cases and light CNN models: compared after PETPass, TVM-frontend skips,
  mismatches, crashes;
- bad inputs tried, clear errors, passed through, crashes;
- tuning faults injected and survived;
- the stated chance of a missed difference, (d/p)^t.

It exits 1 when any mismatch or crash was seen.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tvm_pet.ir import im2col, winograd  # noqa: E402 (pure: no TVM)


def _short(result: dict, drop=("failures", "cases")) -> dict:
    return {k: v for k, v in result.items() if k not in drop}


def tuning_faults(with_tuning: bool) -> dict:
    """Run tests/test_tuning_faults.py under pytest and count its outcomes per test."""
    marker = "tuning or not tuning" if with_tuning else "not tuning"
    with tempfile.TemporaryDirectory() as tmp:
        report = pathlib.Path(tmp) / "junit.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/test_tuning_faults.py", "-m", marker, f"--junitxml={report}"],
                       cwd=ROOT, capture_output=True, text=True)
        cases = ET.parse(report).getroot().iter("testcase")
        rows = {}
        for case in cases:
            status = ("failed" if case.find("failure") is not None or case.find("error")
                      is not None else "skipped" if case.find("skipped") is not None else "passed")
            rows[case.get("name")] = status
    return {"tests": len(rows), "passed": sum(s == "passed" for s in rows.values()),
            "failed": sum(s == "failed" for s in rows.values()),
            "tuning_marked_included": with_tuning, "per_test": rows}


STAGES = ("fuzz", "opt_in", "injected_wrong_mutants", "onnx_node_cases", "onnx_light_models",
          "bad_inputs", "tuning_faults")
OPT_IN_LABELS = (*winograd.LABELS.values(), *(im2col.LABELS[o] for o in im2col.SEARCH_ORDERS))


def opt_in_fuzz(count: int, seed: int) -> dict:
    """Winograd's fuzz, and random programs with both opt-in rewrites offered (Winograd's and
    a convolution as one product over its windows)."""
    import dataclasses

    from tests.fuzz_e2e import FUZZ_CONFIG, run_fuzz, winograd_fuzz
    config = dataclasses.replace(FUZZ_CONFIG, winograd=True, im2col=True)
    both = run_fuzz(count, seed=seed, config=config, favour=OPT_IN_LABELS)
    wino = winograd_fuzz(count, seed=seed)
    counts = ("programs", "tvm_mutants", "compiled", "exact_mismatches", "float_mismatches",
              "crashes")
    out = {k: wino[k] + both[k] for k in counts}
    out["favoured"] = {k: wino["favoured"].get(k, 0) + both["favoured"].get(k, 0)
                       for k in OPT_IN_LABELS}
    out["failures"] = wino["failures"] + both["failures"]
    return {**out, "winograd_programs": _short(wino), "random_programs": _short(both)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fuzz", type=int, default=1000, help="programs to fuzz end to end")
    parser.add_argument("--wrong", type=int, default=40,
                        help="injected wrong mutants per kind (soundness controls)")
    parser.add_argument("--node-cases", default="all", help="'all' or how many to sample")
    parser.add_argument("--light", default="all", help="'all', 'none' or comma-separated names")
    parser.add_argument("--with-tuning", action="store_true",
                        help="also run the tuning-marked fault tests (about 4 minutes)")
    parser.add_argument("--opt-in", type=int, default=200,
                        help="programs for each opt-in fuzz (Winograd's; both opt-ins offered)")
    parser.add_argument("--stages", default="all",
                        help="'all' or comma-separated: " + ", ".join(STAGES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "reliability.json"))
    args = parser.parse_args()

    from tests.bad_inputs import run_bad_inputs
    from tests.fuzz_e2e import check_wrong_mutants, run_fuzz
    from tests.onnx_suite import run_light_models, run_node_cases
    from tvm_pet.verify.verifier import DEFAULT_TESTS, miss_probability

    parts, start = {}, time.perf_counter()

    def stage(name, fn):
        t = time.perf_counter()
        parts[name] = fn()
        parts[name]["wall_s"] = round(time.perf_counter() - t, 1)
        print(f"{name}: {json.dumps(_short(parts[name]))[:400]}", flush=True)

    limit = None if args.node_cases == "all" else int(args.node_cases)
    names = None if args.light in ("all", "none") else args.light.split(",")
    run = {
        "fuzz": lambda: run_fuzz(args.fuzz, seed=args.seed),
        "opt_in": lambda: opt_in_fuzz(args.opt_in, seed=args.seed),
        "injected_wrong_mutants": lambda: check_wrong_mutants(args.wrong, seed=args.seed),
        "onnx_node_cases": lambda: run_node_cases(limit=limit, seed=args.seed),
        "onnx_light_models": lambda: run_light_models(names),
        "bad_inputs": run_bad_inputs,
        "tuning_faults": lambda: tuning_faults(args.with_tuning),
    }
    chosen = STAGES if args.stages == "all" else tuple(args.stages.split(","))
    if unknown := set(chosen) - set(STAGES):
        parser.error(f"unknown stages {sorted(unknown)}: one of {', '.join(STAGES)}")
    for name in STAGES:
        if name in chosen and not (name == "onnx_light_models" and args.light == "none"):
            stage(name, run[name])

    fuzzes = [parts.get(k, {}) for k in ("fuzz", "opt_in")]
    external = [parts.get("onnx_node_cases", {}), parts.get("onnx_light_models", {})]
    bad, faults = parts.get("bad_inputs", {}), parts.get("tuning_faults", {})
    mismatches = (sum(f.get("exact_mismatches", 0) + f.get("float_mismatches", 0)
                      for f in fuzzes)
                  + sum(e.get(k, 0) for e in external
                        for k in ("mismatches", "round_trip_mismatches"))
                  + len(parts.get("injected_wrong_mutants", {}).get("missed_pairs", []))
                  + bad.get("wrong", 0))
    crashes = (sum(f.get("crashes", 0) for f in fuzzes) + bad.get("crashes", 0)
               + sum(e.get(k, 0) for e in external for k in ("crashes", "round_trip_crashes")))
    summary = {
        "stages": [name for name in STAGES if name in parts],
        "programs_fuzzed": sum(f.get("programs", 0) for f in fuzzes),
        "external_cases_run": sum(e.get("total", 0) for e in external),
        "external_cases_compared_after_petpass": sum(e.get("compared", 0) for e in external),
        "mismatches": mismatches,
        "bad_inputs_tried": bad.get("tried", 0),
        "crashes": crashes,
        "tuning_fault_tests_failed": faults.get("failed", 0),
        "miss_probability": {
            "tests_per_position": DEFAULT_TESTS,
            "bound": "(d/p)^t with p = 2^31-1",
            "degree_2": miss_probability(2), "degree_8": miss_probability(8)},
        "seconds": round(time.perf_counter() - start, 1),
    }
    result = {"summary": summary, **parts}
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(json.dumps(summary, indent=1))
    print(f"wrote {out}")
    ok = mismatches == 0 and crashes == 0 and faults.get("failed", 0) == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
