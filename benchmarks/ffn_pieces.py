"""Is BERT faster with its feed-forward network in column pieces, end to end?

    python benchmarks/ffn_pieces.py --records DIR          # DIR: a copy of tuning_logs/

BERT's feed-forward network ``GELU(a W1 + b1) W2`` is also ``sum_i GELU(a W1_i + b1_i) W2_i``
over column pieces ``W1_i`` of ``W1`` and the matching row pieces ``W2_i`` of ``W2`` (the
tensor-parallel split of Megatron-LM): GELU is element-wise, so each piece of the hidden layer
needs only its own columns. Its products are then ``[768, 3072 / P]`` and ``[3072 / P, 768]``,
shapes that tuned faster per multiply-add at 32 trials per task than BERT's own
(``benchmarks/results/profile-bert_encoder-split_k.md``). The rewrite spans the GELU, a
non-linear operator, so PET's search (which cuts programs at non-linear operators) cannot make
it; this script measures whether it would be worth making.

TVM's ``CombineParallelMatmul`` would merge the first products back (they share their left
operand), so every form here is built without TVM's rewrites, its Q, K and V products merged by
hand as that pass merges them (``tvm_manual``, checked against TVM's own build, ``tvm``). Each
form's kernels are tuned at ``--trials`` per task into ``--records``, built, checked against
TVM's outputs and timed interleaved in ``--processes`` fresh processes. Results go to
``benchmarks/results/ffn_pieces.{json,md}``; nothing here fails on timing, and tuning never
runs in CI.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import side_by_side  # noqa: E402

LAYER = "encoder.layer.0."
#: The forms built: (pieces, TVM's rewrites on); 1 piece is the layer as it is.
FORMS = {"tvm": (1, True), "tvm_manual": (1, False), "pieces2": (2, False),
         "pieces4": (4, False)}


def _model(graph_nodes, inits, like):
    import onnx
    from onnx import helper
    graph = helper.make_graph(graph_nodes, like.graph.name, list(like.graph.input),
                              list(like.graph.output), inits)
    model = helper.make_model(graph, opset_imports=list(like.opset_import))
    model.ir_version = like.ir_version
    onnx.checker.check_model(model)
    return model


def merge_qkv(model):
    """Q, K and V as one MatMul, Add and Split, as ``CombineParallelMatmul`` merges them."""
    from onnx import helper, numpy_helper
    pre = LAYER + "attention.self."
    arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    parts = ("query", "key", "value")
    weight = np.concatenate([arrays[f"{pre}{p}.weight"] for p in parts], axis=1)
    bias = np.concatenate([arrays[f"{pre}{p}.bias"] for p in parts])
    merged = {f"{pre}{p}{s}" for p in parts for s in (".matmul", "")}
    head = [helper.make_node("MatMul", ["hidden", "qkv.weight"], ["qkv.matmul"]),
            helper.make_node("Add", ["qkv.matmul", "qkv.bias"], ["qkv"]),
            helper.make_node("Split", ["qkv", "qkv.sizes"], [f"{pre}{p}" for p in parts],
                             axis=2)]
    nodes = [n for n in model.graph.node if n.output[0] not in merged]
    dropped = {f"{pre}{p}{s}" for p in parts for s in (".weight", ".bias")}
    inits = [t for t in model.graph.initializer if t.name not in dropped] + [
        numpy_helper.from_array(weight, "qkv.weight"), numpy_helper.from_array(bias, "qkv.bias"),
        numpy_helper.from_array(np.array([weight.shape[1] // 3] * 3, np.int64), "qkv.sizes")]
    return _model(head + nodes, inits, model)


def in_pieces(model, pieces: int):
    """The feed-forward network as ``pieces`` column pieces, their products summed in a chain."""
    from onnx import helper, numpy_helper
    arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    w1, b1 = arrays[LAYER + "intermediate.dense.weight"], arrays[LAYER + "intermediate.dense.bias"]
    w2 = arrays[LAYER + "output.dense.weight"]
    nodes = list(model.graph.node)
    first = next(k for k, n in enumerate(nodes)
                 if n.output[0] == LAYER + "intermediate.dense.matmul")
    last = next(k for k, n in enumerate(nodes) if n.output[0] == LAYER + "output.dense.matmul")
    a, width, gelu = nodes[first].input[0], w1.shape[1] // pieces, LAYER + "intermediate.gelu."
    body, inits, outs = [], [], []
    for i in range(pieces):
        cols, p = slice(i * width, (i + 1) * width), f"ffn{i}."
        inits += [numpy_helper.from_array(np.ascontiguousarray(v), p + k) for k, v in
                  (("w1", w1[:, cols]), ("b1", b1[cols]), ("w2", w2[cols, :]))]
        body += [helper.make_node("MatMul", [a, p + "w1"], [p + "mm"]),
                 helper.make_node("Add", [p + "mm", p + "b1"], [p + "h"]),
                 helper.make_node("Mul", [p + "h", gelu + "div.factor"], [p + "div"]),
                 helper.make_node("Erf", [p + "div"], [p + "erf"]),
                 helper.make_node("Add", [p + "erf", gelu + "one"], [p + "one"]),
                 helper.make_node("Mul", [p + "h", p + "one"], [p + "mul"]),
                 helper.make_node("Mul", [p + "mul", gelu + "half.factor"], [p + "gelu"]),
                 helper.make_node("MatMul", [p + "gelu", p + "w2"], [p + "out"])]
        outs.append(p + "out")
    total = outs[0]
    for i, out in enumerate(outs[1:], 1):
        name = LAYER + "output.dense.matmul" if i == pieces - 1 else f"ffn.sum{i}"
        body.append(helper.make_node("Add", [total, out], [name]))
        total = name
    replaced = {LAYER + "intermediate.dense.weight", LAYER + "intermediate.dense.bias",
                LAYER + "output.dense.weight"}
    return _model(nodes[:first] + body + nodes[last + 1:],
                  [t for t in model.graph.initializer if t.name not in replaced] + inits, model)


def build(args, work: pathlib.Path) -> tuple[dict, dict, list]:
    """Tune, build and export every form: the libraries, the new trials per form, the inputs."""
    from tvm_pet.models import build_model
    models = {}
    for name, (pieces, rewrites) in FORMS.items():
        model = build_model("bert_encoder")
        if not rewrites:
            model = merge_qkv(model)
        if pieces > 1:
            model = in_pieces(model, pieces)
        models[name] = (model, rewrites)
    return side_by_side.build_models(args, work, models)


def render(result: dict) -> str:
    return side_by_side.table(result) + (
        f"\n\nBERT encoder layer (batch 1, 128 tokens), target {result['target']}. `tvm`: TVM's "
        f"build with its rewrites; `tvm_manual`: without them, Q, K and V merged by hand as "
        f"`CombineParallelMatmul` merges them; `piecesP`: that, with the feed-forward network "
        f"as P column pieces, `sum_i GELU(a W1_i + b1_i) W2_i`. {result['trials']} trials per "
        f"task for every form's kernels (seed {result['seed']}; the records of `--records`, "
        f"nothing new where they had them). {side_by_side.timing_words(result)} Written by "
        f"`benchmarks/ffn_pieces.py`.\n")


def main(argv=None) -> int:
    return side_by_side.main(argv, __doc__.split("\n\n")[0], build, render, name="ffn_pieces",
                             processes=6)


if __name__ == "__main__":
    sys.exit(main())
