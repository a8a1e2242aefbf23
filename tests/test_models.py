"""The seeded model builders of :mod:`tvm_pet.models`: valid ONNX, importable, and evaluated by
tvm_pet's NumPy interpreter as onnxruntime runs them.

Every builder runs at a small size, through the evaluator's own rules (MaxPool and
LayerNormalization included).
``-m slow`` also checks every model at its paper size (about 30 s).
"""
from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from tvm_pet.ir import Op
from tvm_pet.models import MODELS, build_model, inception_v3
from tvm_pet.onnx import import_model
from tvm_pet.verify.interpreter import evaluate

RTOL, ATOL_SCALE = 1e-3, 1e-4
#: Paper-size runs are skipped unless selected with ``-m slow`` (pytest evaluates the string).
only_when_selected = pytest.mark.skipif("'slow' not in config.getoption('markexpr')",
                                        reason="paper-size model; select it with -m slow")

#: Every builder at a small size (name, keyword arguments).
SMALL = {
    "resnet18": dict(image=64),
    "resnet3d_18": dict(frames=8, image=32),
    "csrnet": dict(image=64),
    "csrnet_backend": dict(h=14, w=14),
    "inception_v3": dict(image=75),
    "bert_encoder": dict(seq=16, layers=1),
    "conv5x5": dict(),
    "dilated_conv": dict(),
    "two_1x1_convs": dict(),
    "three_matmuls": dict(),
}


@functools.lru_cache(maxsize=None)
def small_model(name: str) -> onnx.ModelProto:
    """The builder ``name`` at its small size with seed 0 (built once per session)."""
    return build_model(name, **SMALL[name])


# ------------------------------------------------------------------------------------- helpers
def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input}


def run_ort(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def assert_matches_onnxruntime(model: onnx.ModelProto) -> None:
    """Import ``model``, evaluate it in float32 and compare with onnxruntime on random inputs."""
    program = import_model(model)
    feeds = random_feeds(model)
    want = run_ort(model, feeds)
    got = evaluate(program, feeds, np.float32)
    assert set(got) == set(want)
    for name, expected in want.items():
        assert got[name].shape == expected.shape, name
        atol = ATOL_SCALE * float(np.abs(expected).max())
        np.testing.assert_allclose(got[name], expected, rtol=RTOL, atol=atol, err_msg=name)


# --------------------------------------------------------------------------------------- tests
def test_registry_names_every_builder():
    assert set(MODELS) == set(SMALL)


def test_unknown_name_is_a_value_error_listing_the_models():
    with pytest.raises(ValueError, match="unknown model 'resnet50'.*bert_encoder.*two_1x1_convs"):
        build_model("resnet50")


@pytest.mark.parametrize("name", sorted(SMALL))
def test_model_is_valid_onnx(name):
    model = small_model(name)
    onnx.checker.check_model(model, full_check=True)
    assert (model.opset_import[0].version, model.ir_version) == (17, 8)
    assert [i.name for i in model.graph.input] == ["hidden" if name == "bert_encoder" else "input"]
    outputs = [o.name for o in model.graph.output]
    assert outputs == ["output"] or outputs == [f"output{i}" for i in range(len(outputs))]
    for value in list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        assert value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
        assert dims and all(d.dim_value > 0 for d in dims), value.name
    assert all(n.name for n in model.graph.node)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_evaluation_matches_onnxruntime(name):
    assert_matches_onnxruntime(small_model(name))


@pytest.mark.parametrize("name", ["resnet18", "bert_encoder"])
def test_float_evaluator_runs_every_model_natively(name):
    assert_matches_onnxruntime(small_model(name))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_weights_follow_the_seed(name):
    first = small_model(name).graph.initializer
    again = build_model(name, **SMALL[name], seed=0).graph.initializer
    assert [t.SerializeToString() for t in first] == [t.SerializeToString() for t in again]
    same, other = initializers(small_model(name)), initializers(build_model(name, **SMALL[name], seed=1))
    assert set(same) == set(other)
    drawn = [k for k, v in same.items() if v.dtype == np.float32 and v.size > 1]
    assert drawn and all(not np.array_equal(same[k], other[k]) for k in drawn)


def conv_shapes(model: onnx.ModelProto) -> list[tuple[str, list[int], list[int]]]:
    """(name, input shape, weight shape) of every Conv, by ONNX shape inference."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(inferred.graph.value_info) + list(inferred.graph.input)}
    shapes.update({i.name: list(i.dims) for i in inferred.graph.initializer})
    return [(n.name, shapes[n.input[0]], shapes[n.input[1]])
            for n in inferred.graph.node if n.op_type == "Conv"]


def test_inception_at_330_has_the_table3_shapes():
    convs = conv_shapes(inception_v3(image=330))
    table3 = [c for c in convs if c[1] in ([1, 48, 38, 38], [1, 768, 18, 18])]
    for name, x, w in table3:
        print(f"{name}: input {x} weight {w}")
    found = {(tuple(x), tuple(w)) for _, x, w in table3}
    assert ((1, 48, 38, 38), (64, 48, 5, 5)) in found
    assert ((1, 768, 18, 18), (192, 768, 1, 1)) in found
    assert ((1, 768, 18, 18), (160, 768, 1, 1)) in found


def test_inception_branches_are_separate_convs_into_one_concat():
    graph = small_model("inception_v3").graph
    readers = [n.name for n in graph.node if "Mixed_5c.concat" in n.input and n.op_type == "Conv"]
    assert readers == ["Mixed_5d.branch1x1.conv", "Mixed_5d.branch5x5_1.conv",
                       "Mixed_5d.branch3x3dbl_1.conv"]
    concat = next(n for n in graph.node if n.name == "Mixed_5d.concat")
    assert len(concat.input) == 4


def test_bert_qkv_are_three_matmuls_on_one_input():
    program = import_model(small_model("bert_encoder"))
    matmuls = [n for n in program.nodes if n.op is Op.MATMUL and n.inputs[0] == "hidden"]
    assert len(matmuls) == 3
    assert {program.shapes[n.inputs[1]] for n in matmuls} == {(768, 768)}


def test_csrnet_backend_is_six_dilated_convs_and_a_1x1():
    convs = conv_shapes(small_model("csrnet_backend"))
    assert [w for _, _, w in convs] == [[512, 512, 3, 3], [512, 512, 3, 3], [512, 512, 3, 3],
                                        [256, 512, 3, 3], [128, 256, 3, 3], [64, 128, 3, 3],
                                        [1, 64, 1, 1]]
    dilated = [n for n in small_model("csrnet_backend").graph.node if n.op_type == "Conv"][:6]
    for node in dilated:
        attrs = {a.name: list(a.ints) for a in node.attribute}
        assert attrs["dilations"] == [2, 2] and attrs["pads"] == [2, 2, 2, 2], node.name


@pytest.mark.parametrize("name, kwargs", [("resnet18", dict(image=16)),
                                          ("resnet3d_18", dict(frames=4)),
                                          ("inception_v3", dict(image=74)),
                                          ("bert_encoder", dict(hidden=100, heads=12))])
def test_invalid_sizes_are_rejected_clearly(name, kwargs):
    with pytest.raises(ValueError, match=name):
        build_model(name, **kwargs)


@pytest.mark.slow
@only_when_selected
@pytest.mark.parametrize("name", sorted(MODELS))
def test_full_size_model_matches_onnxruntime(name):
    """Paper sizes (the builders' defaults); about 30 s in all, R3D-18 half of it."""
    model = build_model(name)
    onnx.checker.check_model(model, full_check=True)
    assert_matches_onnxruntime(model)
