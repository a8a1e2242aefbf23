"""A whole model in NHWC, by TVM's own ``ConvertLayout``: how much faster at an equal budget?

    python benchmarks/layout_models.py --records DIR                  # tunes into DIR first
    python benchmarks/layout_models.py --records DIR --models resnet18,csrnet --seed 1

``benchmarks/layout_forms.py`` found single convs tuning faster in NHWC than in NCHW in most
draws. Relax's ``ConvertLayout`` makes that change for a whole model: every conv2d in NHWC with
an HWIO kernel (folded at build time), the layout carried through the element-wise ops and
pools between them, so that only the model's input and output are transposed. If the whole
model gains, that is TVM's own rewrite, not PET's: a fair comparison would then give it to
both sides, and PET would have to win on top of it. Each model (built from code, seeded, after
TVM's graph rewrites as the "TVM" column runs them) is built in two forms:

- ``nchw``: as the models are, the "TVM" column of ``benchmarks/run.py``;
- ``nhwc``: the same module after ``ConvertLayout({"relax.nn.conv2d": ["NHWC", "HWIO"]})``.

Both are tuned with MetaSchedule at the same trials per task and seed into one records folder
(give an empty one for an equal start: shipped records hold several draws for the NCHW
kernels and none for the NHWC ones), their outputs checked against each other, then timed
interleaved in fresh processes. Results go to ``benchmarks/results/layout_models.{json,md}``;
tuning never runs in CI, and nothing here fails on timing.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.run import geomean, replace_rows  # noqa: E402

FORMS = ("nchw", "nhwc")


def to_nhwc(module):
    """``module`` with every conv2d in NHWC, as ``tvm-pet optimize --layout NHWC`` lowers it
    (:func:`tvm_pet.relax.rewrites.convert_layout`)."""
    from tvm_pet.relax.rewrites import convert_layout

    return convert_layout(module, "NHWC")


def forms(onnx_model) -> tuple[dict, list[np.ndarray]]:
    """The two forms of a model after TVM's rewrites, and a seeded input for each parameter."""
    from tvm_pet.relax.frontends import import_model

    imported = import_model(onnx_model)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype(dtype) for _, shape, dtype in imported.inputs()]
    return {"nchw": imported.module, "nhwc": to_nhwc(imported.module)}, inputs


def measure(name: str, records: pathlib.Path, trials: int, seed: int, processes: int,
            rounds: int, number: int, make_forms=None, names: tuple[str, str] = FORMS) -> dict:
    """Tune both forms of one model, check their outputs, and time them interleaved.

    ``make_forms(name)`` gives the forms by name and the inputs (by default :func:`forms` of
    the zoo's model); ``names`` are the baseline's and the other's, the row's
    ``<other>_speedup``."""
    from tvm_pet.models import build_model
    from tvm_pet.pipeline.confirm import process_ratios
    from tvm_pet.pipeline.toolchain import tvm_toolchain

    base, other = names
    modules, inputs = (make_forms(name) if make_forms else forms(build_model(name, batch=1)))
    toolchain = tvm_toolchain("llvm", str(records), timing_processes=processes)
    new_trials, tuning_s = {}, {}
    for form, mod in modules.items():
        start = time.perf_counter()
        new_trials[form] = toolchain.tune(mod, trials, seed=seed,
                                          progress=lambda line: print(line, flush=True)).new_trials
        tuning_s[form] = time.perf_counter() - start
    executables = {form: toolchain.build(mod) for form, mod in modules.items()}
    kernels = {form: toolchain.kernel_records(mod) for form, mod in modules.items()}
    reference = toolchain.run(executables[base], inputs)[0]
    got = toolchain.run(executables[other], inputs)[0]
    err = float(np.max(np.abs(got - reference)))
    if not np.allclose(got, reference, rtol=1e-4, atol=1e-4):
        raise SystemExit(f"{name}: the {other} form's outputs differ from {base}'s "
                         f"(max {err:.2e})")
    timing = toolchain.time(executables, inputs, rounds=rounds, number=number, repeat=3)
    ratios = (list(process_ratios(timing[base], timing[other]))  # one process: its ratio
              or [timing[base].median / timing[other].median])
    row = {"model": name, "trials_per_task": trials, "seed": seed, "new_trials": new_trials,
           "tuning_s": tuning_s, "kernels_with_records": kernels, "max_abs_err": err,
           "median_ms": {f: 1e3 * t.median for f, t in timing.items()},
           "by_process_ms": {f: [1e3 * v for v in t.layouts] for f, t in timing.items()},
           f"{other}_speedup_by_process": ratios, f"{other}_speedup": geomean(ratios)}
    print(f"{name}: {base} {row['median_ms'][base]:.2f} ms, {other} "
          f"{row['median_ms'][other]:.2f} ms, x{row[f'{other}_speedup']:.3f} ("
          + ", ".join(f"x{r:.2f}" for r in ratios) + ")", flush=True)
    return row


def markdown(rows: list[dict], processes: int, rounds: int, number: int,
             names: tuple[str, str] = FORMS,
             change: str = "Relax's `ConvertLayout` (conv2d NHWC, kernel HWIO)") -> str:
    """The table: per model, both forms' times and the other form's speed-up, by process too
    (``names``: the baseline's and the other's; ``change``: what made the other, in words)."""
    base, other = names
    lines = [f"| model | seed | trials per task | {base} ms | {other} ms | {base} / {other} (by "
             f"process) | kernels with records ({base}, {other}) | max abs err ({other} vs "
             f"{base}) |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        ms, k = row["median_ms"], row["kernels_with_records"]
        lines.append(
            f"| {row['model']} | {row['seed']} | {row['trials_per_task']} | {ms[base]:.2f} | "
            f"{ms[other]:.2f} | x{row[f'{other}_speedup']:.3f} ("
            + ", ".join(f"{r:.2f}" for r in row[f"{other}_speedup_by_process"])
            + f") | {k[base][1]}/{k[base][0]}, {k[other][1]}/{k[other][0]} | "
            f"{row['max_abs_err']:.1e} |")
    lines.append("")
    lines.append(f"Both forms after TVM's graph rewrites; `{other}` after {change}. Both tuned by "
                 "MetaSchedule at the row's trials per task and seed into one records folder; "
                 f"timed interleaved, {rounds} rounds of 3 samples of {number} calls, spread over "
                 f"{processes} fresh processes; times are medians of the pooled samples, the "
                 "ratio the geometric mean of the processes' ratios of medians. TVM on 2 threads."
                 f" Outputs checked against {base}'s.")
    return "\n".join(lines) + "\n"


def joined(path: pathlib.Path, rows: list[dict]) -> list[dict]:
    """The rows written before at ``path`` (if any), those of the same model and seed replaced
    by ``rows``, new ones at the end: a run of another model or seed adds to the table."""
    earlier = json.loads(path.read_text())["rows"] if path.exists() else []
    return replace_rows(earlier, rows, ("model", "seed"))


def forms_main(argv, description: str, default_models: str, out_name: str, render,
               header: dict, make_forms=None, names: tuple[str, str] = FORMS) -> int:
    """Parse the command line, :func:`measure` each model's two forms, and add the rows to
    ``benchmarks/results/<out_name>.{json,md}`` (``render(rows, processes, rounds, number)``
    writes the table; ``header`` goes into the JSON beside the settings)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--records", required=True, help="records folder for both forms")
    parser.add_argument("--models", default=default_models, help="comma-separated model names")
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--number", type=int, default=5)
    args = parser.parse_args(argv)
    from tvm_pet.tune.threads import size_thread_pool
    size_thread_pool()  # TVM on the physical cores, as optimize runs it, before TVM starts
    rows = [measure(name, pathlib.Path(args.records), args.trials, args.seed, args.processes,
                    args.rounds, args.number, make_forms, names)
            for name in args.models.split(",")]
    out = ROOT / "benchmarks" / "results" / out_name
    rows = joined(out.with_suffix(".json"), rows)
    out.with_suffix(".json").write_text(json.dumps(
        header | {"processes": args.processes, "rounds": args.rounds, "number": args.number,
                  "rows": rows}, indent=1) + "\n")
    out.with_suffix(".md").write_text(render(rows, args.processes, args.rounds, args.number))
    print(f"wrote {out}.json and .md")
    return 0


def main(argv=None) -> int:
    from tvm_pet.relax.rewrites import LAYOUTS
    return forms_main(argv, __doc__.splitlines()[0], "resnet18", "layout_models", markdown,
                      {"layouts": LAYOUTS["NHWC"]})


if __name__ == "__main__":
    sys.exit(main())
