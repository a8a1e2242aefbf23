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

import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import layout_models  # noqa: E402
from benchmarks.layout_models import forms_main  # noqa: E402

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
    return layout_models.markdown(rows, processes, rounds, number, FORMS,
                                  "Relax's `FastMathTransform`")


def main(argv=None) -> int:
    return forms_main(argv, __doc__.splitlines()[0], "bert_encoder", "fast_math", markdown, {},
                      make_forms=model_forms, names=FORMS)


if __name__ == "__main__":
    sys.exit(main())
