"""ONNX models whose static shapes are written as arithmetic on ``Shape``.

``torch.onnx.export`` (the TorchScript exporter) writes the sizes a model reads in ``forward``
(``x.size()``, ``x.chunk(2, dim=1)``) as ``Shape``, ``Gather``, ``Add``, ``Div``, ... feeding a
``Slice`` or a ``Reshape``, even at a fixed input shape. TVM 0.27's ``from_onnx`` leaves some of
them as computations it cannot make static: torchvision's shufflenet_v2 splits its channels with
``chunk``, imported as a ``dynamic_strided_slice`` of unknown shape; TVM's graph rewrites then
fail in ``emit_te``, and ``tvm.compile`` at VM code generation (``R.concat``). tvm-pet folds that
arithmetic before the import (:func:`tvm_pet.relax.onnx_prepare.fold_shape_computations`): both
builds run, and give onnxruntime's outputs on the file as written.

Where no folding makes a shape static (a shape given as an input, read from a float tensor's
values, or sized by ``NonZero``), ``tvm-pet optimize`` stops with one line that names the
operator, why, and what to try.
"""
from __future__ import annotations

import contextlib
import io

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

tvm = pytest.importorskip("tvm")
onnx = pytest.importorskip("onnx")

from tvm_pet.pipeline import DriverOptions, optimize_model  # noqa: E402
from tvm_pet.relax.onnx_prepare import dynamic_shape_cause  # noqa: E402
from tvm_pet.search.config import SearchConfig  # noqa: E402
from tvm_pet.testing.real_models import library_outputs, max_relative_error  # noqa: E402

#: float32 against onnxruntime, relative to the output's scale.
TOLERANCE = 1e-4
#: A short search: these tests are about the import and both builds, not what PET finds.
FAST = SearchConfig(depth=2, rounds=1, max_subset=2, time_limit=20.0)


def optimize_file(path, out) -> dict:
    options = DriverOptions(cost="analytic", timing_rounds=2, confirm=1, time_limit=120.0)
    return optimize_model(str(path), out, FAST, options)


def constant(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def save(tmp_path, name: str, nodes, inputs, outputs, initializers) -> str:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return str(path)


def chunk_and_flatten(tmp_path) -> str:
    """A convolution, ``chunk(2, dim=1)`` as torch.onnx writes it (the ``Slice`` ends are
    ``(C + 1) // 2`` of ``Shape``), a convolution of the first half concatenated to it, and a
    flatten to the batch read with ``Shape`` (``Gather``, ``Unsqueeze``, ``Concat``,
    ``Reshape``) before a linear layer. TVM's own import of it has tensors of unknown shape,
    and its graph rewrites fail on them (``emit_te``)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Shape", ["r"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["channels"], axis=0),
        helper.make_node("Add", ["channels", "one"], ["plus1"]),
        helper.make_node("Div", ["plus1", "two"], ["half"]),
        helper.make_node("Mul", ["half", "one"], ["end"]),
        helper.make_node("Slice", ["r", "zero", "end", "one"], ["first"], name="chunk"),
        helper.make_node("Conv", ["first", "w2"], ["mixed"]),
        helper.make_node("Concat", ["first", "mixed"], ["joined"], axis=1),
        helper.make_node("Shape", ["r"], ["r_shape"]),
        helper.make_node("Gather", ["r_shape", "zero_scalar"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "zero"], ["batch_1d"]),
        helper.make_node("Concat", ["batch_1d", "features"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["joined", "flat_shape"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc", "bias"], ["y"], transB=1),
    ]
    initializers = [
        constant("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
        constant("w2", rng.standard_normal((4, 4, 1, 1)).astype(np.float32)),
        constant("fc", rng.standard_normal((10, 8 * 6 * 6)).astype(np.float32) / 8),
        constant("bias", rng.standard_normal(10).astype(np.float32)),
        constant("zero", np.array([0], np.int64)), constant("one", np.array([1], np.int64)),
        constant("two", np.array([2], np.int64)),
        constant("features", np.array([8 * 6 * 6], np.int64)),
        constant("zero_scalar", np.array(0, np.int64))]
    return save(tmp_path, "chunk_and_flatten", nodes,
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], initializers)


def unknown_shapes(path) -> list[str]:
    """The bindings of TVM's own import of ``path`` whose tensor shape is not static."""
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    with contextlib.redirect_stdout(io.StringIO()):
        main = from_onnx(onnx.load(path), keep_params_in_input=False)["main"]
    found = []
    for block in main.body.blocks:
        for binding in block.bindings:
            ty = binding.var.ty
            if not isinstance(ty, relax.TensorType):
                continue
            try:
                static = ty.shape is not None and all(int(d) > 0 for d in ty.shape)
            except TypeError:
                static = False
            if not static:
                found.append(binding.var.name)
    return found


def check_builds_against_onnxruntime(path, out) -> dict:
    """``optimize`` the file; baseline.so and optimized.so give onnxruntime's outputs on the file
    as written, for a random input."""
    report = optimize_file(path, out)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32)
             for i in session.get_inputs()}
    want = session.run(None, feeds)
    for library in ("baseline.so", "optimized.so"):
        got = library_outputs(out / library, list(feeds.values()))
        assert max_relative_error(got, want) < TOLERANCE, library
    assert report["max_abs_err_vs_onnxruntime"] < TOLERANCE
    return report


def test_chunk_and_flatten_of_shape_arithmetic_build_and_give_onnxruntimes_outputs(tmp_path):
    path = chunk_and_flatten(tmp_path)
    # TVM's own import leaves the chunk's slice, and what follows it, without a static shape
    assert unknown_shapes(path)
    assert dynamic_shape_cause(onnx.load(path)) is None  # folding makes every shape static
    report = check_builds_against_onnxruntime(path, tmp_path / "out")
    assert report["coverage"]["subprograms"] > 0, report["coverage"]


def torchvision_shufflenet_blocks(tmp_path) -> str:
    """Two of torchvision's own shufflenet_v2 blocks (one that halves the image, one that splits
    its channels with ``chunk``), seeded, exported with ``torch.onnx.export(dynamo=False)`` at
    1 x 8 x 16 x 16."""
    torch = pytest.importorskip("torch")
    from tvm_pet.testing.real_models import randomise_batch_norm, stub_torchvision_meta
    stub_torchvision_meta()
    shufflenetv2 = pytest.importorskip("torchvision.models.shufflenetv2")
    torch.manual_seed(0)
    blocks = torch.nn.Sequential(shufflenetv2.InvertedResidual(8, 16, 2),
                                 shufflenetv2.InvertedResidual(16, 16, 1)).eval()
    randomise_batch_norm(blocks)
    path = tmp_path / "shufflenet_blocks.onnx"
    with torch.no_grad():
        torch.onnx.export(blocks, torch.randn(1, 8, 16, 16), str(path), dynamo=False)
    return str(path)


def test_torchvision_shufflenet_blocks_build_and_give_onnxruntimes_outputs(tmp_path):
    path = torchvision_shufflenet_blocks(tmp_path)
    assert unknown_shapes(path)
    check_builds_against_onnxruntime(path, tmp_path / "out")


@pytest.mark.slow
def test_torchvision_shufflenet_v2_builds_and_gives_onnxruntimes_outputs(tmp_path):
    torch = pytest.importorskip("torch")
    from tvm_pet.testing.real_models import build_torch_model, stub_torchvision_meta
    stub_torchvision_meta()
    pytest.importorskip("torchvision.models")
    model, (x,) = build_torch_model("shufflenet_v2_x1_0", size=64)
    path = str(tmp_path / "shufflenet_v2_x1_0.onnx")
    with torch.no_grad():
        torch.onnx.export(model, x, path, dynamo=False)
    assert unknown_shapes(path)
    check_builds_against_onnxruntime(path, tmp_path / "out")


# ------------------------------------------------------------- shapes no folding makes static

def reshape_to_input(tmp_path) -> str:
    """A reshape to a shape the caller gives as a second input."""
    rng = np.random.default_rng(0)
    return save(tmp_path, "reshape_to_input",
                [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Reshape", ["c", "s"], ["y"], name="to_input")],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
                 helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
                [constant("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32))])


def slice_by_value(tmp_path) -> str:
    """A slice whose end is read from a float tensor's values (its largest element)."""
    rng = np.random.default_rng(0)
    return save(tmp_path, "slice_by_value",
                [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("ReduceMax", ["x"], ["largest"], keepdims=0),
                 helper.make_node("Cast", ["largest"], ["end"], to=TensorProto.INT64),
                 helper.make_node("Unsqueeze", ["end", "zero"], ["ends"]),
                 helper.make_node("Slice", ["c", "zero", "ends", "one"], ["s"], name="by_value"),
                 helper.make_node("Relu", ["s"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "c", 8, 8])],
                [constant("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
                 constant("zero", np.array([0], np.int64)),
                 constant("one", np.array([1], np.int64))])


def sized_by_nonzero(tmp_path) -> str:
    """A flatten to ``(-1, count)``, where ``count`` is how many elements are positive."""
    rng = np.random.default_rng(0)
    return save(tmp_path, "sized_by_nonzero",
                [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Greater", ["c", "zero_f"], ["positive"]),
                 helper.make_node("NonZero", ["positive"], ["where"], name="positives"),
                 helper.make_node("Shape", ["where"], ["where_shape"]),
                 helper.make_node("Gather", ["where_shape", "one"], ["count"], axis=0),
                 helper.make_node("Concat", ["minus1", "count"], ["s"], axis=0),
                 helper.make_node("Reshape", ["c", "s"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
                [constant("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
                 constant("zero_f", np.array(0, np.float32)),
                 constant("one", np.array([1], np.int64)),
                 constant("minus1", np.array([-1], np.int64))])


@pytest.mark.parametrize("make, words", [
    (reshape_to_input, ("Reshape node 'to_input'", "graph input 's'", "initializer")),
    (slice_by_value, ("Slice node 'by_value'", "values of 'largest'", "cut the graph")),
    (sized_by_nonzero, ("NonZero node 'positives'", "depends on its input's values",
                        "cut the graph before 'positives'")),
], ids=["shape-input", "float-values", "nonzero"])
def test_shape_no_folding_makes_static_is_one_clear_line(make, words, tmp_path):
    from tvm_pet.cli import main
    path = make(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["optimize", path, "--out", str(tmp_path / "out"), "--trials", "0"])
    text = err.getvalue().strip()
    assert code == 2, text
    assert text.startswith("tvm-pet optimize: error: ") and "\n" not in text, text
    assert "static shapes only" in text, text
    for word in words:
        assert word in text, (word, text)
    assert "Traceback" not in out.getvalue() + text
    assert "Error converting operator" not in out.getvalue()
