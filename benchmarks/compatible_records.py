"""Do one CPU's tuning records serve another? Untuned vs borrowed vs own records, side by side.

    python benchmarks/compatible_records.py --target "llvm -mcpu=haswell" [--own DIR] [--name NAME]

For each graph (built from code, seeded), these builds for ``--target`` are timed interleaved:

- ``untuned``: no records, TVM's naive loop nests (what a CPU without records got before);
- ``borrowed``: the shipped records of compatible targets (``tvm_pet.tune.records.record_sources``,
  e.g. Skylake-AVX512 records on an AVX2 target; a kernel two of them hold takes the one that
  runs faster here), compiled for ``--target``;
- ``first lender`` (where there are two or more): the first compatible folder's records alone
  (the one with the most records), what a target without records of its own borrowed until
  2026-12-02;
- ``own`` (with ``--own DIR``, a records root; the shipped one is ``tvm_pet/tuning_logs``):
  the records tuned for ``--target`` itself alone, for comparison;
- ``chosen`` (with ``--own``): both, as tvm_pet builds with them: a kernel with records of
  both takes whichever runs faster here (``tvm_pet.tune.kernels.chosen_record``).

The outputs are checked against ``untuned`` first. Results go to
``benchmarks/results/<NAME>.json`` and ``.md`` (``compatible_records`` by default); nothing here
fails on timing.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import statistics
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GRAPHS = ("conv5x5", "dilated_conv", "two_1x1_convs", "three_matmuls", "csrnet_backend")


def measure(name: str, target, own: str | None, rounds: int) -> dict:
    """Build the three variants of one graph, check their outputs, time them interleaved."""
    import tvm
    from tvm import relax

    from tvm_pet.models import build_model
    from tvm_pet.onnx import import_model
    from tvm_pet.relax.adapter import program_to_module
    from tvm_pet.tune import apply_records, time_interleaved
    from tvm_pet.tune.compile import build_applied
    from tvm_pet.tune.records import costing_sources
    from tvm_pet.tune.shipped import shipped_records_dir

    program = import_model(build_model(name))
    mod = program_to_module(program)
    empty = ROOT / "build" / "no_records"  # a records root with nothing in it
    sources = {"untuned": None, "borrowed": costing_sources(empty, target)}
    lent, lent_cache = sources["borrowed"]
    if lent is not None and len(lent.lent) > 1:  # the first lender alone, as before 2026-12-02
        sources["first lender"] = (dataclasses.replace(lent, lent=lent.lent[:1]), lent_cache)
    if own:
        opened, cache = costing_sources(own, target)
        sources["own"] = (opened.without_lenders(), cache)
        sources["chosen"] = (opened, cache)
    builds, applied = {}, {}
    for label, opened in sources.items():  # None: no records (the module untuned)
        scheduled, applied[label] = apply_records(mod, target, sources=opened)
        builds[label] = build_applied(scheduled, target)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(t.shape).astype("float32") for t in program.inputs]
    outs = {}
    for label, ex in builds.items():
        res = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(x) for x in inputs])
        outs[label] = res.numpy() if hasattr(res, "numpy") else res[0].numpy()
    err = {label: float(np.abs(out - outs["untuned"]).max()) for label, out in outs.items()}
    timings = time_interleaved(builds, inputs, rounds=rounds, number=1, repeat=3)
    return {"graph": name, "borrowed_from": " and ".join(lent.lender_keys if lent else ()) or None,
            "shipped": str(shipped_records_dir()), "kernels_scheduled": applied,
            "max_abs_err_vs_untuned": err,
            "median_ms": {k: t.median * 1e3 for k, t in timings.items()},
            "spread_ms": {k: [min(t.samples) * 1e3, max(t.samples) * 1e3]
                          for k, t in timings.items()}}


def markdown(rows: list[dict], target: str) -> str:
    labels = [k for k in ("untuned", "first lender", "borrowed", "own", "chosen")
              if k in rows[0]["median_ms"]]
    has_own, has_first = "own" in labels, "first lender" in labels
    lines = [f"Target `{target}`; medians in ms (min-max), timed interleaved on one machine.", "",
             "| graph | " + " | ".join(labels) + " | untuned / borrowed |" +
             (" first lender / borrowed |" if has_first else "") +
             (" borrowed / own | own / chosen | borrowed / chosen |" if has_own else ""),
             "|---" * (len(labels) + 2 + has_first + 3 * has_own) + "|"]
    for r in rows:
        med, spread = r["median_ms"], r["spread_ms"]
        cells = [f"{med[k]:.2f} ({spread[k][0]:.1f}-{spread[k][1]:.1f})" for k in labels]
        ratio = f"x{med['untuned'] / med['borrowed']:.1f}"
        if has_first:
            ratio += f" | x{med['first lender'] / med['borrowed']:.3f}"
        own = (f" x{med['borrowed'] / med['own']:.2f} | x{med['own'] / med['chosen']:.2f} |"
               f" x{med['borrowed'] / med['chosen']:.2f} |" if has_own else "")
        lines.append(f"| {r['graph']} | " + " | ".join(cells) + f" | {ratio} |" + own)
    geo = statistics.geometric_mean([r["median_ms"]["untuned"] / r["median_ms"]["borrowed"]
                                     for r in rows])
    lines += ["", f"Borrowed records against untuned kernels: geo-mean x{geo:.1f}."]
    if has_first:
        first = statistics.geometric_mean([r["median_ms"]["first lender"]
                                           / r["median_ms"]["borrowed"] for r in rows])
        lines.append(f"Every compatible folder borrowed from ({rows[0]['borrowed_from']}), each "
                     "kernel built with the record that runs fastest here, against the first "
                     f"folder's records alone: geo-mean x{first:.3f}.")
    if "chosen" in rows[0]["median_ms"]:
        ratios = {pair: statistics.geometric_mean([r["median_ms"][pair[0]] / r["median_ms"][pair[1]]
                                                   for r in rows])
                  for pair in (("own", "chosen"), ("borrowed", "chosen"))}
        lines.append("Each kernel with both records built with the faster here (chosen) against "
                     f"the own records alone: geo-mean x{ratios['own', 'chosen']:.3f}; against "
                     f"the borrowed alone: x{ratios['borrowed', 'chosen']:.3f}.")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="llvm -mcpu=haswell")
    parser.add_argument("--own", help="a records root tuned for --target, to compare with")
    parser.add_argument("--graphs", default=",".join(GRAPHS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--name", default="compatible_records", help="the results' file name")
    args = parser.parse_args()
    from tvm_pet.tune import resolve_target
    target = resolve_target(args.target)
    rows = []
    for name in args.graphs.split(","):
        rows.append(measure(name, target, args.own, args.rounds))
        print(json.dumps(rows[-1]), flush=True)
    out = pathlib.Path(args.out)
    (out / f"{args.name}.json").write_text(json.dumps(
        {"target": str(target), "rows": rows}, indent=1) + "\n")
    (out / f"{args.name}.md").write_text(markdown(rows, args.target))
    print(markdown(rows, args.target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
