"""Real models through torch.export -> Relax -> PETPass -> tvm.compile, and through ONNX ->
``tvm-pet optimize --trials 0``: coverage and error against torch.

    python benchmarks/real_models.py [--models resnet18 bert ...] [--size N] [--full]
                                     [--path export|onnx] [--out FILE]

For each model of :mod:`tvm_pet.testing.real_models` (torchvision CNNs and a 2-layer BERT with
token ids and an attention mask, random seeded weights, random batch-norm statistics): export
with ``torch.export``, import with ``from_exported_program``, run :class:`PETPass` (default search
budgets, analytic cost), compile for llvm, run, and compare with torch. Prints one line per
model and writes the coverage, the subprograms, the opaque operators by kind, whether PET changed
the module, the largest relative error against torch and the search time. With ``--path onnx``,
the model is exported with ``torch.onnx.export`` (TorchScript exporter, opset 17) and goes
through ``tvm_pet.pipeline.optimize`` (TVM's ``from_onnx``, TVM's rewrites, the analytic cost,
60 s search, ``--trials 0``), and ``optimized.so`` is compared with torch. Needs the ``torch``
extra. Nothing here fails on timing.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tvm_pet.testing.real_models import (FULL_SIZE, MODELS, build_torch_model,  # noqa: E402
                                         library_outputs, positional_bert,
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


def run_model_onnx(name: str, size: int | None, work: pathlib.Path) -> dict:
    """One model through ONNX and ``optimize``; the row of the results table."""
    import torch
    from tvm_pet.pipeline import DriverOptions, optimize
    from tvm_pet.search.config import SearchConfig
    model, inputs = build_torch_model(name, size=size)
    path = work / f"{name}.onnx"
    names = [f"in{i}" for i in range(len(inputs))]
    with torch.no_grad():
        torch.onnx.export(positional_bert(model) if name == "bert" else model, tuple(inputs),
                          str(path), dynamo=False, opset_version=17, input_names=names)
    start = time.perf_counter()
    report = optimize(str(path), work / name, SearchConfig(time_limit=60.0),
                      DriverOptions(cost="analytic", trials=0, time_limit=240.0))
    run_s = time.perf_counter() - start
    got = library_outputs(work / name / "optimized.so", [x.numpy() for x in inputs])
    facts = report.to_json()
    cov = facts["coverage"]
    return {"model": name, "path": "onnx", "input": [list(x.shape) for x in inputs],
            "coverage": cov.get("coverage"), "subprograms": cov["subprograms"],
            "opaque": cov["opaque"], "changed": report.kept == "optimized",
            "max_rel_error_vs_torch": max_relative_error(got, torch_outputs(model, inputs)),
            "search_s": report.found.seconds, "optimize_s": run_s,
            "records_plan": facts.get("records_plan"), "kernels": facts["kernels"]["summary"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS),
                        help=f"of {', '.join(MODELS)}, or any other torchvision model")
    parser.add_argument("--size", type=int, default=None, help="CNN input side (default 64)")
    parser.add_argument("--full", action="store_true", help="the designed input sizes")
    parser.add_argument("--path", choices=("export", "onnx"), default="export")
    parser.add_argument("--out", default=None, help="default benchmarks/results/"
                                                    "real_models[_onnx].json")
    args = parser.parse_args(argv)
    results = pathlib.Path(__file__).parent / "results"
    args.out = args.out or str(results / ("real_models.json" if args.path == "export"
                                          else "real_models_onnx.json"))
    rows = []
    work = pathlib.Path(tempfile.mkdtemp(prefix="pet_real_models_"))
    for name in args.models:
        size = FULL_SIZE.get(name, 224) if args.full and name != "bert" else args.size
        if args.path == "onnx":
            try:
                row = run_model_onnx(name, size, work)
            except Exception as err:  # noqa: BLE001  (a row that says why, not a dead run)
                rows.append({"model": name, "path": "onnx", "error": f"{type(err).__name__}: "
                                                                     f"{str(err)[:300]}"})
                print(f"{name:14s} onnx: {rows[-1]['error']}", flush=True)
                continue
            rows.append(row)
            print(f"{name:14s} onnx: coverage {100 * (row['coverage'] or 0):5.1f}%  subprograms "
                  f"{row['subprograms']:3d}  changed {str(row['changed']):5s}  err "
                  f"{row['max_rel_error_vs_torch']:.1e}  search {row['search_s']:6.1f}s", flush=True)
            continue
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
                               "config": ("PETPass defaults, analytic cost, target llvm"
                                          if args.path == "export" else
                                          "optimize: from_onnx, TVM rewrites, analytic cost, "
                                          "60 s search, trials 0, target llvm"),
                               "models": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
