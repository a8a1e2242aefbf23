"""Time PET's whole-model search with the measured cost (issue: a measured search that scales).

    python benchmarks/measured_search.py [--models resnet18,inception_v3] [--whole]
        [--layout NHWC] [--out benchmarks/results/measured_search.json]

Each model is built from code, imported with TVM's ONNX frontend and TVM's rewrites, and lifted,
as ``tvm-pet optimize`` does; then the search of ``optimize`` (depth 3, one round, top 4, within
``--time-limit``, 300 s by default) runs with the measured cost on this target's records. The row
splits the search's time into generating and verifying mutants (the generator) and costing
candidates (everything else). Each rewrite is costed from its
fusion region (:mod:`tvm_pet.search.region`); ``--whole`` costs every candidate as a whole
program instead, as the search did before, for comparison. A rewrite to kernels without records
that replace tuned ones is set aside untimed (``set_aside_untuned``); other kernels without
records are timed untuned once and cached (``untuned_times.json``), so a second run can be faster
than a first: the row says how many kernels the run timed. Tuning is excluded. Nothing here fails
on timing. ``--layout NHWC`` lowers and costs everything channels-last, as ``optimize --layout
NHWC`` does.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ("resnet18", "csrnet", "bert_encoder", "resnet3d_18", "inception_v3")


class _Whole:
    """The measured cost without ``difference``: the search costs each candidate whole."""

    additive = False

    def __init__(self, cost):
        self.inner, self.name = cost, cost.name

    def cost(self, program):
        return self.inner.cost(program)


def run(name: str, whole: bool, time_limit: float | None, layout: str = "NCHW") -> dict:
    from tvm_pet.models import build_model
    from tvm_pet.pipeline.load import load
    from tvm_pet.pipeline.toolchain import tvm_toolchain
    from tvm_pet.search.config import SearchConfig
    from tvm_pet.search.optimizer import optimize
    from tvm_pet.tune import kernels

    timed = []
    measure = kernels.measure_primfunc
    loaded = load(build_model(name), layout=layout)
    toolchain = tvm_toolchain("llvm").with_lowering(loaded.lower)
    cost = toolchain.cost_model()
    cost.measure_untuned = lambda *a, **k: timed.append(1) or measure(*a, **k)
    start = time.perf_counter()
    result = optimize(loaded.program, SearchConfig(rounds=1, time_limit=time_limit),
                      _Whole(cost) if whole else cost)
    seconds = time.perf_counter() - start
    generating = sum(s.seconds for s in result.subsets if not s.cached)
    row = {"model": name, "costing": "whole program" if whole else "fusion region",
           "layout": layout,
           "time_limit_s": time_limit, "search_s": round(seconds, 1),
           "generating_s": round(generating, 1), "costing_s": round(seconds - generating, 1),
           "subsets": len(result.subsets),
           "subsets_generated": sum(not s.cached for s in result.subsets),
           "stop": result.stop.value, "kernels_timed_untuned": len(timed),
           "regions_refused": cost.regions_refused, "set_aside_untuned": cost.set_aside,
           "cost_before_ms": result.original_cost * 1e3,
           "cost_after_ms": result.cost * 1e3, "applied": [a.to_json() for a in result.applied]}
    print(f"{name} ({layout}): {row['costing']}: {seconds:.0f} s ({generating:.0f} s generating, "
          f"{seconds - generating:.0f} s costing, stop: {result.stop.value}), "
          f"{len(result.subsets)} subsets, "
          f"{len(timed)} kernels timed untuned, {cost.set_aside} rewrites set aside (kernels "
          f"without records), {result.original_cost * 1e3:.2f} -> "
          f"{result.cost * 1e3:.2f} ms (estimated)", flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--whole", action="store_true", help="cost candidates as whole programs")
    parser.add_argument("--time-limit", type=float, default=300.0,
                        help="seconds for each search (default 300)")
    parser.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW",
                        help="the convolutions' layout, as optimize --layout")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/measured_search.json"))
    args = parser.parse_args()
    from tvm_pet.tune import resolve_target, target_dir
    rows = [run(name, args.whole, args.time_limit, args.layout) for name in args.models.split(",")]
    out = pathlib.Path(args.out)
    previous = json.loads(out.read_text())["rows"] if out.exists() else []
    def key(r):
        return r["model"], r["costing"], r.get("layout", "NCHW")
    keep = [r for r in previous if key(r) not in {key(r2) for r2 in rows}]
    out.write_text(json.dumps({"target": target_dir(resolve_target("llvm")),
                               "machine": {"cpus": 2, "python": platform.python_version()},
                               "search": "depth 3, rounds 1, top 4",
                               "rows": keep + rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
