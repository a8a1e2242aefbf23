"""Is BERT faster with its Q, K and V projections apart, as three products, end to end?

    python benchmarks/qkv_apart.py --records DIR          # DIR: a copy of tuning_logs/

TVM's ``CombineParallelMatmul`` merges BERT's three projections of the same hidden state into
one ``[768, 2304]`` product. Tuned at 32 trials per task, that product ran at about half the
rate per multiply-add of the layer's ``[768, 768]`` output projection
(``benchmarks/results/profile-bert_encoder.md``). This script measures whether the three
products apart would be faster: ``tvm`` is TVM's build with its rewrites, ``tvm_manual`` the
layer without them but Q, K and V merged by hand as that pass merges them, ``apart`` the layer
without them, its projections as the model has them. Each form's kernels are tuned at
``--trials`` per task into ``--records``, built, checked against TVM's outputs and timed
interleaved in ``--processes`` fresh processes. Results go to
``benchmarks/results/qkv_apart.{json,md}``; nothing here fails on timing, and tuning never runs
in CI.
"""
from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import ffn_pieces, side_by_side  # noqa: E402

#: The forms built: (TVM's rewrites on, Q, K and V merged by hand).
FORMS = {"tvm": (True, False), "tvm_manual": (False, True), "apart": (False, False)}


def build(args, work: pathlib.Path) -> tuple[dict, dict, list]:
    """Tune, build and export every form: the libraries, the new trials per form, the inputs."""
    from tvm_pet.models import build_model
    models = {}
    for name, (rewrites, merge) in FORMS.items():
        model = build_model("bert_encoder")
        models[name] = (ffn_pieces.merge_qkv(model) if merge else model, rewrites)
    return side_by_side.build_models(args, work, models)


def render(result: dict) -> str:
    return side_by_side.table(result) + (
        f"\n\nBERT encoder layer (batch 1, 128 tokens), target {result['target']}. `tvm`: TVM's "
        f"build with its rewrites; `tvm_manual`: without them, Q, K and V merged by hand as "
        f"`CombineParallelMatmul` merges them; `apart`: without them, the three projections "
        f"apart. {result['trials']} trials per task for every form's kernels (seed "
        f"{result['seed']}; the records of `--records`, nothing new where they had them). "
        f"{side_by_side.timing_words(result)} Written by `benchmarks/qkv_apart.py`.\n")


def main(argv=None) -> int:
    return side_by_side.main(argv, __doc__.split("\n\n")[0], build, render, name="qkv_apart",
                             processes=6)


if __name__ == "__main__":
    sys.exit(main())
