"""A whole model lowered with TVM's ``FastMathTransform``: how much faster is TVM itself?

    python benchmarks/fast_math.py --records DIR                        # tunes into DIR first
    python benchmarks/fast_math.py --records DIR --models bert_encoder --seed 1
    python benchmarks/fast_math.py --records DIR --models torch:bert,torch:convnext_tiny

TVM 0.27 lowers ``erf`` on a CPU to one call of libm's scalar ``erff`` per element, which no
schedule vectorizes; BERT's GELU evaluates it 128 x 3072 times a layer. Relax's
``FastMathTransform`` (not in TVM's default pipeline) puts TVM's polynomial approximations in
its place (``fast_erf``, ``fast_exp``, ``fast_tanh``, ``fast_softmax``). That is TVM's own
change, not PET's, and it changes numbers: ``tvm-pet optimize --fast-math`` gives it to both
sides. Each model (built from code, seeded, after TVM's graph rewrites as the "TVM" column runs
them) is built in two forms:

- ``exact``: as the models are, the "TVM" column of ``benchmarks/run.py``;
- ``fast``: the same module after ``FastMathTransform``
  (:func:`tvm_pet.relax.rewrites.fast_math`).

A ``torch:`` name is a real model of :mod:`tvm_pet.testing.real_models` through ``torch.export``
(transformers' BERT at BERT-base's sizes, 128 tokens; a torchvision CNN at 224 x 224), where
GELU and the sigmoid come as operators of their own (:func:`tvm_pet.relax.rewrites.fast_math`
writes them out first). Both are tuned with MetaSchedule at the same trials per task and seed into one records folder,
their outputs checked against each other, then timed interleaved in fresh processes
(:func:`benchmarks.layout_models.measure`). Results go to
``benchmarks/results/fast_math.{json,md}``; tuning never runs in CI, and nothing here fails on
timing.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.layout_models import joined, measure  # noqa: E402

FORMS = ("exact", "fast")


def forms(onnx_model) -> tuple[dict, list[np.ndarray]]:
    """The two forms of a model after TVM's rewrites, and a seeded input for each parameter."""
    from tvm_pet.relax.frontends import import_model
    from tvm_pet.relax.rewrites import fast_math

    imported = import_model(onnx_model)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype(dtype) for _, shape, dtype in imported.inputs()]
    return {"exact": imported.module, "fast": fast_math(imported.module)}, inputs


#: transformers' BERT-base: 12 layers, hidden 768, 12 heads, 3072 wide, 128 tokens.
BERT_BASE = dict(layers=12, hidden=768, heads=12, intermediate=3072, vocab=30522, sequence=128)


def model_forms(name: str) -> tuple[dict, list[np.ndarray]]:
    """:func:`forms` of the zoo's model ``name``, or of the real model ``torch:<name>``."""
    if not name.startswith("torch:"):
        from tvm_pet.models import build_model
        return forms(build_model(name, batch=1))
    from tvm_pet.testing.real_models import BertSize, build_torch_model, to_relax_module

    real = name.split(":", 1)[1]
    model, inputs = build_torch_model(real, size=224, bert=BertSize(**BERT_BASE))
    modules, _ = forms(to_relax_module(model, inputs))
    return modules, [t.numpy() for t in inputs]


def markdown(rows: list[dict], processes: int, rounds: int, number: int) -> str:
    """The table: per model, both forms' times and the fast form's speed-up, by process too."""
    lines = ["| model | seed | trials per task | exact ms | fast ms | exact / fast (by process) |"
             " kernels with records (exact, fast) | max abs err (fast vs exact) |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        ms, k = row["median_ms"], row["kernels_with_records"]
        lines.append(
            f"| {row['model']} | {row['seed']} | {row['trials_per_task']} | {ms['exact']:.2f} | "
            f"{ms['fast']:.2f} | x{row['fast_speedup']:.3f} ("
            + ", ".join(f"{r:.2f}" for r in row["fast_speedup_by_process"])
            + f") | {k['exact'][1]}/{k['exact'][0]}, {k['fast'][1]}/{k['fast'][0]} | "
            f"{row['max_abs_err']:.1e} |")
    lines.append("")
    lines.append("Both forms after TVM's graph rewrites; `fast` after Relax's `FastMathTransform`."
                 " Both tuned by MetaSchedule at the row's trials per task and seed into one "
                 f"records folder; timed interleaved, {rounds} rounds of 3 samples of {number} "
                 f"calls, spread over {processes} fresh processes; times are medians of the pooled"
                 " samples, the ratio the geometric mean of the processes' ratios of medians. TVM"
                 " on 2 threads. Outputs checked against exact's.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", required=True, help="records folder for both forms")
    parser.add_argument("--models", default="bert_encoder", help="comma-separated model names")
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--number", type=int, default=5)
    args = parser.parse_args(argv)
    from tvm_pet.tune.threads import size_thread_pool
    size_thread_pool()  # TVM on the physical cores, as optimize runs it, before TVM starts
    rows = [measure(name, pathlib.Path(args.records), args.trials, args.seed, args.processes,
                    args.rounds, args.number, make_forms=model_forms, names=FORMS)
            for name in args.models.split(",")]
    out = ROOT / "benchmarks" / "results" / "fast_math"
    rows = joined(out.with_suffix(".json"), rows)
    out.with_suffix(".json").write_text(json.dumps(
        {"processes": args.processes, "rounds": args.rounds, "number": args.number,
         "rows": rows}, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(rows, args.processes, args.rounds, args.number))
    print(f"wrote {out}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
