"""ONNX import and export, checked against onnxruntime.

Each import case builds a small ONNX model with ``onnx.helper``, imports it, and compares
``evaluate(program)`` with onnxruntime; it also exports the imported program again and runs that.
Round trips start from programs built with :class:`ProgramBuilder`.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tvm_pet.errors import ModelError, UnsupportedOperator
from tvm_pet.ir import Op, ProgramBuilder
from tvm_pet.onnx import export_model, import_model, save_model
from tvm_pet.onnx.exporter import EXPORT_RULES
from tvm_pet.verify.interpreter import evaluate

RTOL, ATOL = 1e-4, 1e-5


# ------------------------------------------------------------------------------------ helpers
def make_model(nodes, inputs: dict, outputs: list[str], inits: dict | None = None,
               opset: int = 17, input_type: int = TensorProto.FLOAT,
               domains: tuple = ()) -> onnx.ModelProto:
    """A model from nodes; ``inputs`` maps names to shapes, ``inits`` names to arrays."""
    graph = helper.make_graph(
        nodes, "case", [helper.make_tensor_value_info(k, input_type, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(o, input_type, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def run_ort(model: onnx.ModelProto, feeds: dict) -> dict:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def random_inputs(program, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in program.inputs}


def assert_close(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name in want:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=name)


def check_import(model: onnx.ModelProto, seed: int = 0):
    """Import, evaluate, compare with onnxruntime; export again and compare too."""
    program = import_model(model)
    feeds = random_inputs(program, seed)
    want = run_ort(model, feeds)
    assert list(program.outputs) == [o.name for o in model.graph.output]
    int_inits = {i.name for i in model.graph.initializer if i.data_type == TensorProto.INT64}
    assert not int_inits & set(program.weights)  # shape operands become attributes
    assert_close(evaluate(program, feeds, np.float32), want)
    exported = export_model(program)
    onnx.checker.check_model(exported, full_check=True)
    assert_close(run_ort(exported, feeds), want)
    return program


def ops_of(program) -> set:
    return {n.op for n in program.nodes}


def rand(seed: int, *shape) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------------- import, op by op
def _conv(x_shape, w_shape, seed=1, **attrs):
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["y"], **attrs)]
    inits = {"W": rand(seed, *w_shape), "B": rand(seed + 1, w_shape[0])}
    return make_model(nodes, {"x": x_shape}, ["y"], inits)


CONV_CASES = {
    "conv1d_bias_stride_asym_pads": _conv([2, 3, 10], [4, 3, 3], strides=[2], pads=[1, 2]),
    "conv2d_groups_dilation": _conv([1, 4, 9, 9], [6, 2, 3, 3], group=2, dilations=[2, 1],
                                    strides=[1, 2], pads=[1, 0, 2, 1]),
    "conv2d_depthwise": _conv([1, 3, 6, 6], [3, 1, 3, 3], group=3, pads=[1, 1, 1, 1]),
    "conv3d_bias": _conv([1, 2, 5, 6, 4], [3, 2, 2, 3, 2], strides=[1, 2, 1]),
    "conv_same_upper": _conv([1, 2, 7, 8], [3, 2, 3, 2], strides=[2, 2], auto_pad="SAME_UPPER"),
    "conv_same_lower": _conv([1, 2, 7, 8], [3, 2, 4, 3], strides=[2, 3], auto_pad="SAME_LOWER"),
    "conv_valid": _conv([1, 2, 7, 8], [3, 2, 3, 3], auto_pad="VALID"),
}


CONV_CASES["conv_runtime_weight_and_bias"] = make_model(
    [helper.make_node("Conv", ["x", "W", "B"], ["y"], pads=[0, 1, 0, 1])],
    {"x": [1, 2, 4, 4], "W": [3, 2, 1, 3], "B": [3]}, ["y"])


@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_import_conv(name):
    program = check_import(CONV_CASES[name])
    assert Op.CONV in ops_of(program) and Op.ADD in ops_of(program)
    assert program.is_multilinear()


def _mm(x, y, inits=None):
    inputs = {"a": x} if inits else {"a": x, "b": y}
    return make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], inputs, ["y"], inits)


def _gemm(a_shape, b_shape, c_shape, b_input: bool, **attrs):
    inits = {"C": rand(3, *c_shape)}
    inputs = {"A": a_shape}
    if b_input:
        inputs["B"] = b_shape
    else:
        inits["B"] = rand(2, *b_shape)
    node = helper.make_node("Gemm", ["A", "B", "C"], ["y"], **attrs)
    return make_model([node], inputs, ["y"], inits)


LINEAR_CASES = {
    "matmul_weight": _mm([3, 5], None, {"b": rand(1, 5, 4)}),
    "matmul_batched": _mm([2, 3, 4], [2, 4, 5]),
    "matmul_broadcast": _mm([2, 1, 3, 4], [3, 4, 5]),
    "matmul_vector": _mm([3, 4], None, {"b": rand(1, 4)}),
    "gemm_transB_alpha_beta": _gemm([3, 5], [4, 5], [4], False, transB=1, alpha=0.5, beta=2.0),
    "gemm_transA": _gemm([5, 3], [5, 4], [3, 4], True, transA=1),
    "sub_weight": make_model([helper.make_node("Sub", ["x", "w"], ["y"])], {"x": [2, 3]}, ["y"],
                             {"w": rand(1, 3)}),
    "add_mul": make_model([helper.make_node("Add", ["x", "z"], ["s"]),
                           helper.make_node("Mul", ["s", "w"], ["y"])],
                          {"x": [2, 3], "z": [1, 3]}, ["y"], {"w": rand(1, 2, 1)}),
    "batchnorm": make_model(
        [helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"], epsilon=1e-3)],
        {"x": [2, 3, 4, 4]}, ["y"], {"g": rand(1, 3), "b": rand(2, 3), "m": rand(3, 3),
                                    "v": np.abs(rand(4, 3)) + 0.5}),
    "global_avgpool": make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"])],
                                 {"x": [2, 3, 5, 4]}, ["y"]),
}


@pytest.mark.parametrize("cip", [0, 1])
def test_import_avgpool(cip):
    model = make_model([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2],
                                         strides=[2, 1], pads=[1, 0, 1, 1], count_include_pad=cip)],
                       {"x": [1, 2, 7, 7]}, ["y"])
    program = check_import(model)
    (node,) = program.nodes
    assert node.op is Op.AVGPOOL and node.attrs["count_include_pad"] == bool(cip)


@pytest.mark.parametrize("name", sorted(LINEAR_CASES))
def test_import_linear(name):
    program = check_import(LINEAR_CASES[name])
    assert program.is_multilinear()
    assert ops_of(program) & {Op.MATMUL, Op.ADD, Op.MUL, Op.BATCHNORM, Op.AVGPOOL}


def _one(op_type, x_shape, inputs=(), inits=None, n_out=1, opset=17, **attrs):
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op_type, ["x", *inputs], outs, **attrs)
    return make_model([node], {"x": x_shape}, outs, inits, opset)


def i64(*values) -> np.ndarray:
    return np.array(values, np.int64)


LAYOUT_CASES = {
    "concat_weight": make_model([helper.make_node("Concat", ["x", "w", "x"], ["y"], axis=-1)],
                                {"x": [2, 3]}, ["y"], {"w": rand(1, 2, 2)}),
    "split_sizes": _one("Split", [2, 7], ["s"], {"s": i64(2, 5)}, n_out=2, axis=1),
    "split_equal": _one("Split", [6, 2], n_out=3),
    "split_num_outputs": _one("Split", [2, 7], n_out=3, opset=18, axis=1, num_outputs=3),
    "slice_steps_negative": _one("Slice", [5, 8, 6], ["b", "e", "a", "s"],
                                 {"b": i64(-4, 1), "e": i64(100, -1), "a": i64(0, -1),
                                  "s": i64(2, 3)}),
    "slice_no_axes": _one("Slice", [5, 8], ["b", "e"], {"b": i64(1, -7), "e": i64(-1, 8)}),
    "pad_constant": _one("Pad", [2, 3, 4], ["p", "v"], {"p": i64(0, 1, 2, 1, 0, 1),
                                                        "v": np.float32(0.0)}),
    "pad_axes": _one("Pad", [2, 3, 4], ["p", "", "a"], {"p": i64(2, 1, 0, 3), "a": i64(-1, 1)},
                     opset=18),
    "transpose": _one("Transpose", [2, 3, 4], perm=[1, 2, 0]),
    "transpose_default": _one("Transpose", [2, 3, 4]),
    "reshape_0_-1": _one("Reshape", [2, 3, 4], ["s"], {"s": i64(0, -1)}),
    "flatten": _one("Flatten", [2, 3, 4, 5], axis=2),
    "flatten_negative": _one("Flatten", [2, 3, 4], axis=-1),
    "squeeze": _one("Squeeze", [2, 1, 3, 1], ["a"], {"a": i64(-1)}),
    "squeeze_all": _one("Squeeze", [1, 3, 1]),
    "unsqueeze": _one("Unsqueeze", [2, 3], ["a"], {"a": i64(0, -1)}),
    "identity": _one("Identity", [2, 3]),
    "dropout": _one("Dropout", [2, 3], ["r"], {"r": np.float32(0.3)}),
}


@pytest.mark.parametrize("name", sorted(LAYOUT_CASES))
def test_import_layout(name):
    program = check_import(LAYOUT_CASES[name])
    assert program.is_multilinear()


SHAPE_SUBGRAPHS = {
    "shape_gather_concat": [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "zero_axes"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus_one"], ["target"], axis=0)],
    "shape_slice_mul_constant": [
        helper.make_node("Shape", ["x"], ["shape"], start=1),
        helper.make_node("Slice", ["shape", "minus_one", "big"], ["last"]),
        helper.make_node("Constant", [], ["three"], value_ints=[3]),
        helper.make_node("Mul", ["last", "three"], ["twelve"]),
        helper.make_node("Div", ["twelve", "one"], ["same"]),
        helper.make_node("Cast", ["same"], ["same64"], to=TensorProto.INT64),
        helper.make_node("Concat", ["minus_one", "same64"], ["target"], axis=0)],
}


@pytest.mark.parametrize("name", sorted(SHAPE_SUBGRAPHS))
def test_import_folds_shape_subgraph(name):
    nodes = SHAPE_SUBGRAPHS[name] + [helper.make_node("Reshape", ["x", "target"], ["y"])]
    consts = {"zero": np.array(0, np.int64), "minus_one": i64(-1), "one": i64(1),
              "zero_axes": i64(0), "big": i64(2**62)}
    model = make_model(nodes, {"x": [2, 3, 4]}, ["y"], consts)
    program = check_import(model)
    assert [n.op for n in program.nodes] == [Op.RESHAPE] and program.shapes["y"] == (2, 12)


def test_import_keeps_nonlinear_ops_opaque_and_names():
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "G"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["y"], axis=1)]
    model = make_model(nodes, {"x": [2, 3, 6, 6]}, ["y"], {"W": rand(1, 4, 3, 3, 3),
                                                           "G": rand(2, 5, 36)})
    program = check_import(model)
    opaque = {n.attrs["kind"]: n for n in program.nodes if n.op is Op.OPAQUE}
    assert set(opaque) == {"Relu", "Softmax"} and opaque["Softmax"].attrs["params"]["axis"] == 1
    assert {"c", "r", "p", "f", "g", "y"} <= set(program.shapes) and "W" in program.weights


def test_import_reversed_slice_stays_opaque():
    model = _one("Slice", [4, 6], ["b", "e", "a", "s"],
                 {"b": i64(-1), "e": i64(-100), "a": i64(1), "s": i64(-2)})
    program = import_model(model)
    (node,) = program.nodes
    assert node.op is Op.OPAQUE and node.attrs["kind"] == "Slice"
    feeds = random_inputs(program)
    exported = export_model(program)
    onnx.checker.check_model(exported, full_check=True)
    assert_close(run_ort(exported, feeds), run_ort(model, feeds))


FALLBACK_CASES = {
    "avgpool_ceil_mode": _one("AveragePool", [1, 2, 7, 7], kernel_shape=[2, 2], strides=[2, 2],
                              ceil_mode=1),
    "pad_reflect": _one("Pad", [2, 5], ["p"], {"p": i64(0, 2, 0, 1)}, mode="reflect"),
    "pad_negative": _one("Pad", [3, 5], ["p"], {"p": i64(1, -1, 0, 2)}),
    "pad_nonzero_value": _one("Pad", [2, 3], ["p", "v"], {"p": i64(1, 1, 1, 1),
                                                          "v": np.float32(2.5)}),
    "batchnorm_runtime_stats": make_model(
        [helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"])],
        {"x": [2, 3, 4], "g": [3], "b": [3], "m": [3]}, ["y"], {"v": np.ones(3, np.float32)}),
    "layernorm": _one("LayerNormalization", [2, 3, 4], ["s", "b"],
                      {"s": rand(1, 4), "b": rand(2, 4)}, axis=-1, epsilon=1e-3),
    "maxpool": _one("MaxPool", [1, 2, 6, 6], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                    strides=[2, 2]),
}


@pytest.mark.parametrize("name", sorted(FALLBACK_CASES))
def test_import_fallbacks_stay_opaque_and_export(name):
    """Attributes the linear ops cannot express keep the node opaque, with its parameters."""
    model = FALLBACK_CASES[name]
    program = import_model(model)
    assert not program.is_multilinear()
    kind = model.graph.node[0].op_type
    assert {n.attrs["kind"] for n in program.nodes if n.op is Op.OPAQUE} == {kind}
    with pytest.raises(UnsupportedOperator, match=kind):
        import_model(model, require_multilinear=True)
    feeds = random_inputs(program)
    exported = export_model(program)
    onnx.checker.check_model(exported, full_check=True)
    assert_close(run_ort(exported, feeds), run_ort(model, feeds))


def test_import_non_box_scatternd_stays_opaque():
    model = _one("ScatterND", [4, 3], ["i", "u"], {"i": i64(3, 0).reshape(2, 1),
                                                   "u": rand(1, 2, 3)})
    (node,) = import_model(model).nodes
    assert node.op is Op.OPAQUE and node.attrs["kind"] == "ScatterND"


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.lists(st.tuples(st.integers(-9, 9), st.integers(-9, 9), st.integers(1, 3)),
                min_size=2, max_size=2))
def test_import_slice_matches_onnxruntime(params):
    shape = (6, 7)
    sizes = [len(range(*slice(b, e, s).indices(n))) for (b, e, s), n in zip(params, shape)]
    assume(all(sizes))
    starts, ends, steps = (i64(*v) for v in zip(*params))
    program = check_import(_one("Slice", list(shape), ["b", "e", "a", "s"],
                                {"b": starts, "e": ends, "a": i64(0, 1), "s": steps}))
    assert program.shapes["y0"] == tuple(sizes)


# ----------------------------------------------------------------------------- round trips
def roundtrip_program():
    b = ProgramBuilder("roundtrip")
    rng = np.random.default_rng(7)
    w = lambda name, *shape: b.weight(name, rng.standard_normal(shape))  # noqa: E731
    x = b.input("x", (1, 4, 6, 6))
    c = b.conv(x, w("w", 6, 4, 3, 3), pads=1, strides=1)
    bn = b.batchnorm(c, w("scale", 6), w("shift", 6))
    (r,) = b.opaque("Relu", [bn])
    p = b.avgpool(r, 2, count_include_pad=False)                       # (1, 6, 3, 3)
    s1, s2 = b.split(p, axis=1, sizes=(2, 4))
    sl = b.slice(s2, (0, 1, 0, 0), (1, 4, 3, 3), (1, 2, 2, 1))          # (1, 2, 2, 3)
    u = b.update(s1, sl, starts=(0, 0, 0, 0), steps=(1, 1, 2, 1))       # (1, 2, 3, 3)
    rt = b.reshape_transpose(u, (1, 2, 9), (0, 2, 1), (1, 9, 2))
    pd = b.pad(rt, (0, 1, 0, 0, 0, 1))                                   # (1, 10, 3)
    mm = b.matmul(pd, w("m", 3, 5))
    z = b.add(mm, w("bias", 5))
    cc = b.concat([z, b.mul(z, z)], axis=1)
    y = b.transpose(cc, (0, 2, 1), out="y")
    return b.build([y, s2])


@pytest.mark.parametrize("opset", [13, 17, 21])
def test_roundtrip_export_runs_in_onnxruntime(opset):
    program = roundtrip_program()
    model = export_model(program, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    feeds = random_inputs(program, seed=3)
    want = evaluate(program, feeds, np.float32)
    assert_close(run_ort(model, feeds), want)
    back = import_model(model)
    assert back.outputs == program.outputs and Op.UPDATE in ops_of(back)
    assert_close(evaluate(back, feeds, np.float32), want)


def test_save_and_import_from_path(tmp_path):
    program = roundtrip_program()
    path = tmp_path / "model.onnx"
    save_model(program, path)
    feeds = random_inputs(program, seed=4)
    assert_close(evaluate(import_model(path), feeds), evaluate(program, feeds))
    assert import_model(str(path), name="renamed").name == "renamed"


def test_export_rules_cover_every_op():
    assert set(EXPORT_RULES) == set(Op)


def test_export_opaque_kind_missing_from_opset():
    b = ProgramBuilder()
    x = b.input("x", (2, 3))
    (g,) = b.opaque("Gelu", [x])
    program = b.build([g])
    with pytest.raises(UnsupportedOperator, match="Gelu"):
        export_model(program, opset=17)
    feeds = random_inputs(program)
    assert_close(run_ort(export_model(program, opset=20), feeds), evaluate(program, feeds))


def test_export_names_a_relax_operator_without_an_onnx_form_as_such():
    # a max pool whose ceil_mode makes a window of padding only stays under its Relax name
    b = ProgramBuilder()
    x = b.input("x", (1, 2, 5, 5))
    (y,) = b.opaque("relax.nn.max_pool2d", [x], [(1, 2, 3, 3)])
    with pytest.raises(UnsupportedOperator,
                       match="no ONNX operator for the Relax operator 'relax.nn.max_pool2d'") as e:
        export_model(b.build([y]), opset=17)
    assert "higher opset" not in str(e.value)


# ---------------------------------------------------------------------------------- errors
def test_corrupt_file_is_model_error(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 64, dtype=np.uint8).tobytes())
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        import_model(path)
    (tmp_path / "text.onnx").write_text("hello, not a model")
    with pytest.raises(ModelError):
        import_model(tmp_path / "text.onnx")
    with pytest.raises(ModelError, match="does not exist"):
        import_model(tmp_path / "missing.onnx")


def test_invalid_model_proto_is_model_error():
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        import_model(onnx.ModelProto())


def test_input_without_shape_is_clear_error():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": None}, ["y"])
    with pytest.raises(ModelError, match=r"'x' has no shape.*static"):
        import_model(model)


def test_custom_domain_opaque_keeps_domain():
    nodes = [helper.make_node("Mystery", ["x"], ["m"], domain="custom.ops", alpha=0.5)]
    model = make_model(nodes, {"x": [2, 3]}, ["m"], domains=("custom.ops",))
    model.graph.value_info.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 3]))
    model.graph.output[0].CopyFrom(model.graph.value_info[0])
    (node,) = import_model(model).nodes
    assert node.attrs["kind"] == "Mystery" and node.attrs["params"]["alpha"] == 0.5
    exported = export_model(import_model(model))
    onnx.checker.check_model(exported)
    assert exported.graph.node[0].domain == "custom.ops"
    assert {(o.domain, o.version) for o in exported.opset_import} >= {("custom.ops", 1)}
    assert [a.name for a in exported.graph.node[0].attribute] == ["alpha"]


def test_dynamic_dim_is_clear_error():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": ["batch", 3]}, ["y"])
    with pytest.raises(ModelError, match=r"'x'.*dynamic.*'batch'.*static"):
        import_model(model)


def test_non_float_input_is_clear_error():
    model = make_model([helper.make_node("Neg", ["x"], ["y"])], {"x": [2]}, ["y"],
                       input_type=TensorProto.INT64)
    with pytest.raises(ModelError, match=r"'x'.*float32"):
        import_model(model)


def test_unsupported_opset_is_clear_error():
    with pytest.raises(ModelError, match="opset 11"):
        import_model(_one("Relu", [2, 3], opset=11))


def test_unknown_op_without_shape_names_node():
    nodes = [helper.make_node("Mystery", ["x"], ["m"], name="m1", domain="custom.ops"),
             helper.make_node("Relu", ["m"], ["y"])]
    model = make_model(nodes, {"x": [2, 3]}, ["y"], domains=("custom.ops",))
    for size in (2, 3):
        model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = size
    with pytest.raises(ModelError, match="Mystery node 'm1'"):
        import_model(model)


def test_require_multilinear_names_relu():
    model = make_model([helper.make_node("Add", ["x", "x"], ["a"]),
                        helper.make_node("Relu", ["a"], ["y"], name="act")], {"x": [2, 3]}, ["y"])
    with pytest.raises(UnsupportedOperator, match=r"Relu node 'act'"):
        import_model(model, require_multilinear=True)
    linear = import_model(LINEAR_CASES["gemm_transA"], require_multilinear=True)
    assert linear.is_multilinear()
