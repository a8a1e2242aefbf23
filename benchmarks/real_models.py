"""Real models through torch.export -> Relax -> PETPass -> tvm.compile: coverage and error.

    python benchmarks/real_models.py [--models resnet18 bert ...] [--size N] [--full]
                                     [--out benchmarks/results/real_models.json]

For each model of :mod:`tvm_pet.testing.real_models` (torchvision CNNs and a 2-layer BERT with
token ids and an attention mask, random seeded weights, random batch-norm statistics): export
with ``torch.export``, import with ``from_exported_program``, run :class:`PETPass` (default search
budgets, analytic cost), compile for llvm, run, and compare with torch. Prints one line per
model and writes the coverage, the subprograms, the opaque operators by kind, whether PET changed
the module, the largest relative error against torch and the search time. Needs the ``torch``
extra. Nothing here fails on timing.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tvm_pet.testing.real_models import (FULL_SIZE, MODELS, build_torch_model,  # noqa: E402
                                         max_relative_error, to_relax_module, torch_outputs,
                                         tvm_outputs)


def run_model(name: str, size: int | None) -> dict:
    """One model end to end; the row of the results table."""
    import tvm
    from tvm_pet import PETPass
    model, inputs = build_torch_model(name, size=size)
    start = time.perf_counter()
    mod = to_relax_module(model, inputs)
    export_s = time.perf_counter() - start
    pet = PETPass()
    start = time.perf_counter()
    new = pet(mod)
    pass_s = time.perf_counter() - start
    entry = pet.report["main"]
    want = torch_outputs(model, inputs)
    before = max_relative_error(tvm_outputs(tvm.compile(mod, target="llvm"), inputs), want)
    after = max_relative_error(tvm_outputs(tvm.compile(new, target="llvm"), inputs), want)
    cov = pet.coverage["main"]
    return {"model": name, "input": [list(x.shape) for x in inputs],
            "coverage": cov.fraction, "linear_flops": cov.linear_flops,
            "searched_flops": cov.searched_flops, "subprograms": cov.subprograms,
            "searched_subprograms": cov.searched_subprograms, "opaque": dict(cov.opaque),
            "outside": dict(cov.outside), "changed": entry["changed"],
            "reason": entry.get("reason"), "speedup_estimate": entry.get("speedup"),
            "stop": entry.get("stop"), "max_rel_error_vs_torch": after,
            "tvm_max_rel_error_vs_torch": before, "search_s": entry.get("search_time_s"),
            "pass_s": pass_s, "export_s": export_s, "summary": cov.summary_line()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--size", type=int, default=None, help="CNN input side (default 64)")
    parser.add_argument("--full", action="store_true", help="the designed input sizes")
    parser.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"
                                             / "real_models.json"))
    args = parser.parse_args(argv)
    rows = []
    for name in args.models:
        size = FULL_SIZE.get(name, 224) if args.full and name != "bert" else args.size
        row = run_model(name, size)
        rows.append(row)
        print(f"{name:14s} coverage {100 * row['coverage']:5.1f}%  subprograms "
              f"{row['searched_subprograms']:3d}  changed {str(row['changed']):5s}  "
              f"err {row['max_rel_error_vs_torch']:.1e}  search {row['search_s'] or 0:6.1f}s",
              flush=True)
        print(f"{'':14s} {row['summary']}", flush=True)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": {"cpu_count": os.cpu_count(),
                                           "platform": platform.platform()},
                               "config": "PETPass defaults, analytic cost, target llvm",
                               "models": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
