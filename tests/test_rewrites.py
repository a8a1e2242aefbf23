"""TVM's own graph rewrites (tvm_pet.relax.rewrites): what they change, and that outputs stay equal."""
from __future__ import annotations

import collections

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402
from tvm.relax.frontend.onnx import from_onnx  # noqa: E402

from tvm_pet.models import build_model  # noqa: E402
from tvm_pet.relax.rewrites import tvm_rewrites  # noqa: E402


def _ops(mod: tvm.IRModule) -> collections.Counter:
    counts = collections.Counter()
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                counts[value.op.name] += 1
    return counts


def _rewritten(model):
    mod = from_onnx(model, keep_params_in_input=False)
    with tvm.transform.PassContext(opt_level=3):
        return mod, tvm_rewrites(mod)


def _outputs(mod: tvm.IRModule, inputs: list[np.ndarray]) -> list[np.ndarray]:
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    result = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return [result.numpy()] if hasattr(result, "numpy") else [r.numpy() for r in result]


def _inputs(mod: tvm.IRModule) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32")
            for p in mod["main"].params]


def test_parallel_matmuls_on_constant_weights_are_combined_and_outputs_are_equal():
    before, after = _rewritten(build_model("three_matmuls"))
    assert _ops(before)["relax.matmul"] == 3
    assert _ops(after)["relax.matmul"] == 1 and _ops(after)["relax.split"] == 1
    assert len(after["main"].params) == len(before["main"].params)  # the weights are bound back
    x = _inputs(before)
    for want, got in zip(_outputs(before, x), _outputs(after, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_batch_norm_is_folded_into_the_convolutions():
    before, after = _rewritten(build_model("resnet18", image=32))
    assert _ops(before)["relax.nn.batch_norm"] == 20
    assert _ops(after)["relax.nn.batch_norm"] == 0
    assert _ops(after)["relax.nn.conv2d"] == _ops(before)["relax.nn.conv2d"]
    x = _inputs(before)
    np.testing.assert_allclose(_outputs(after, x)[0], _outputs(before, x)[0], rtol=1e-4, atol=1e-4)


def test_bert_query_key_value_projections_are_combined():
    before, after = _rewritten(build_model("bert_encoder", seq=16, hidden=64, heads=4, ffn=128))
    assert _ops(after)["relax.matmul"] < _ops(before)["relax.matmul"]
    x = _inputs(before)
    np.testing.assert_allclose(_outputs(after, x)[0], _outputs(before, x)[0], rtol=1e-4, atol=1e-4)


def _conv_layouts(mod: tvm.IRModule) -> set[str]:
    """The data layouts of the convolutions in ``mod``'s ``main``."""
    return {str(b.value.attrs.data_layout) for block in mod["main"].body.blocks
            for b in block.bindings if isinstance(b.value, relax.Call)
            and isinstance(b.value.op, tvm.ir.Op) and b.value.op.name.startswith("relax.nn.conv")}


@pytest.mark.parametrize("name", ["dilated_conv", "resnet3d_18"])
def test_nhwc_lowering_converts_the_original_candidates_and_regions_alike(name):
    import dataclasses

    from tvm_pet.pipeline.load import load

    model = (build_model(name) if name == "dilated_conv"
             else build_model(name, batch=1, frames=8, image=16))
    nchw, nhwc = load(model), load(model, layout="NHWC")
    assert any("ConvertLayout(NHWC" in r for r in nhwc.rewrites)
    assert not any("ConvertLayout" in r for r in nchw.rewrites)
    program = nhwc.program
    rebuilt = dataclasses.replace(program)  # not the original: lowered as a candidate is
    modules = {"original": nhwc.lower(program), "candidate": nhwc.lower(rebuilt),
               "region": nhwc.lower.region(program)}
    want = nchw.lower(nchw.program)
    assert _conv_layouts(want) == {"NCHW" if name == "dilated_conv" else "NCDHW"}
    x = _inputs(want)
    for what, mod in modules.items():
        assert _conv_layouts(mod) == {"NHWC" if name == "dilated_conv" else "NDHWC"}, what
        np.testing.assert_allclose(_outputs(mod, x)[0], _outputs(want, x)[0], rtol=1e-4,
                                   atol=1e-4, err_msg=what)


def test_an_unknown_layout_is_a_clear_error():
    from tvm_pet.errors import PetError
    from tvm_pet.pipeline.load import load

    with pytest.raises(PetError, match="layout 'NCWH': choose one of NCHW, NHWC"):
        load(build_model("conv5x5"), layout="NCWH")


def test_a_failure_of_convert_layout_is_a_model_error_at_load(monkeypatch):
    """TVM's pass failing on some model is said at load, before any tuning, as a ModelError
    that names the step, not a traceback from inside TVM."""
    from tvm_pet.errors import ModelError
    from tvm_pet.pipeline.load import load
    from tvm_pet.relax import frontends

    def broken(mod, layout):
        if layout == "NCHW":
            return mod
        raise tvm.error.InternalError("Check failed: layout of op not inferred")

    monkeypatch.setattr(frontends, "convert_layout", broken)
    with pytest.raises(ModelError, match="TVM's ConvertLayout to NHWC failed: InternalError"):
        load(build_model("conv5x5"), layout="NHWC")
    assert load(build_model("conv5x5")).rewrites  # NCHW: nothing to convert, loads


def _pad_between_convs(rank: int, pad: bool) -> tvm.IRModule:
    """conv, ReLU, then a dilated conv: padded by its own padding, or (``pad``) behind an
    explicit pad, as a ``Pad -> Conv`` mutant has it."""
    conv = relax.op.nn.conv2d if rank == 4 else relax.op.nn.conv3d
    spatial = [9, 8] if rank == 4 else [5, 6, 4]
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 8] + spatial, "float32"))
    w = relax.Var("w", relax.TensorType([8, 8] + [3] * (rank - 2), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.relu(conv(x, w, padding=[1] * (2 * rank - 4))))
            if pad:
                a = bb.emit(relax.op.nn.pad(a, [0, 0, 0, 0] + [2, 2] * (rank - 2)))
            own = [0 if pad else 2] * (2 * rank - 4)
            out = bb.emit_output(relax.op.nn.relu(conv(a, w, padding=own,
                                                       dilation=[2] * (rank - 2))))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("rank", [4, 5])
def test_a_mutants_pad_stays_its_own_kernel_in_nhwc_and_the_conv_before_keeps_its_task(rank):
    """ConvertLayout has no layout for nn.pad and leaves it between two transposes, which fuse
    into a copy kernel of their own; the conv before it stays the task the model without the
    pad has (so the original's records serve it), and the outputs are equal."""
    from tvm_pet.relax.rewrites import convert_layout
    from tvm_pet.tune.compile import extract_tasks

    mutant, original = _pad_between_convs(rank, True), _pad_between_convs(rank, False)
    converted = convert_layout(mutant, "NHWC")
    assert _ops(converted)["relax.nn.pad"] == 1
    plain = convert_layout(original, "NHWC")
    assert _ops(converted)["relax.permute_dims"] == _ops(plain)["relax.permute_dims"] + 2
    tasks = {t.name: t.shash for t in extract_tasks(converted, "llvm")}
    pads = [name for name in tasks if "pad" in name]
    assert pads and all("conv" not in name for name in pads), tasks
    before = {t.shash for t in extract_tasks(plain, "llvm")}
    producer = [h for name, h in tasks.items() if "conv" in name and h in before]
    assert producer, (tasks, before)  # the first conv + ReLU: the original's task
    x = _inputs(mutant)
    want = _outputs(original, x)[0]
    np.testing.assert_allclose(_outputs(converted, x)[0], want, rtol=1e-5,
                               atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("name", ["csrnet_backend", "resnet18", "resnet3d_18"])
def test_the_weights_transposes_folded_with_numpy_are_what_fold_constant_gives(name):
    """convert_layout folds ConvertLayout's weight transposes with numpy (FoldConstant compiles
    a kernel for each) and runs no FoldConstant after; the module is the one FoldConstant gives.
    After TVM's rewrites some weights are variables bound to constants (ResNet-18's folded batch
    norms)."""
    from tvm_pet.relax import rewrites

    small = {"resnet3d_18": {"batch": 1, "frames": 8, "image": 16}}.get(name, {})
    mod = _rewritten(build_model(name, **small))[1]
    by_tvm = tvm.transform.Sequential([relax.transform.ConvertLayout(rewrites.LAYOUTS["NHWC"]),
                                       rewrites._sequence(rewrites.CLEAN_UP)])(mod)
    converted = rewrites.convert_layout(mod, "NHWC")
    assert _ops(converted)["relax.permute_dims"] == 2  # the input and the output
    tvm.ir.assert_structural_equal(converted, by_tvm)


def _tir_functions(mod: tvm.IRModule) -> set[str]:
    return {gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}


def test_fast_math_lowers_every_program_with_tvms_approximations_close_to_onnxruntime():
    """``fast_math``: the original, a candidate and a region are lowered through TVM's
    FastMathTransform alike (BERT's erf and softmax by fast_erf and fast_softmax, no relax.erf
    left), and the outputs stay within float error of the exact lowering and of onnxruntime."""
    import dataclasses

    import onnxruntime as ort

    from tvm_pet.pipeline.load import load

    model = build_model("bert_encoder", seq=16, hidden=64, heads=4, ffn=128)
    plain, fast = load(model), load(model, fast_math=True)
    assert "FastMathTransform (when lowered)" in fast.rewrites
    assert not any("FastMath" in r for r in plain.rewrites)
    want = plain.lower(plain.program)
    assert _ops(want)["relax.erf"] == 1 and _ops(want)["relax.nn.softmax"] == 1
    modules = {"original": fast.lower(fast.program),
               "candidate": fast.lower(dataclasses.replace(fast.program)),
               "region": fast.lower.region(fast.program)}
    x = _inputs(want)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    reference = session.run(None, {session.get_inputs()[0].name: x[0]})[0]
    exact = _outputs(want, x)[0]
    for what, mod in modules.items():
        ops = _ops(mod)
        assert ops["relax.erf"] == 0 and ops["relax.nn.softmax"] == 0, what
        assert {"fast_erf", "fast_softmax"} <= _tir_functions(mod), what
        got = _outputs(mod, x)[0]
        assert not np.array_equal(got, exact), what  # another lowering, not the same kernels
        np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5, err_msg=what)
        np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4, err_msg=what)


def test_fast_math_is_asked_by_a_flag_and_refused_for_a_program():
    from tvm_pet.cli import _driver_options, build_parser
    from tvm_pet.errors import PetError
    from tvm_pet.onnx import import_model
    from tvm_pet.pipeline.load import load

    parse = build_parser().parse_args
    assert _driver_options(parse(["optimize", "m.onnx", "--out", "o", "--fast-math"])).fast_math
    assert not _driver_options(parse(["optimize", "m.onnx", "--out", "o"])).fast_math
    assert _driver_options(parse(["tune", "m.onnx", "--fast-math"])).fast_math
    with pytest.raises(PetError, match="fast math is for a model imported through TVM"):
        load(import_model(build_model("conv5x5")), fast_math=True)


@pytest.mark.parametrize("op", ["gelu", "gelu_tanh", "silu", "sigmoid"])
def test_fast_math_writes_out_what_torch_export_imports_and_keeps_its_value(op):
    """GELU, its tanh form, SiLU and the sigmoid come from ``torch.export`` as operators of
    their own, which TVM's FastMathTransform does not know; ``fast_math`` writes each out as
    TVM legalizes it, so that its erf, tanh or exp becomes TVM's fast one. A float64 call, which
    the fast functions do not serve, stays as it is."""
    from tvm_pet.relax.rewrites import fast_math

    function = getattr(relax.op.nn, op, None) or getattr(relax.op, op)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 256), "float32"))
    y = relax.Var("y", relax.TensorType((4, 8), "float64"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            out = bb.emit_output(relax.Tuple([bb.emit(function(x)), bb.emit(function(y))]))
        bb.emit_func_output(out)
    exact = bb.get()
    fast = fast_math(exact)
    name = f"relax.{'nn.' if op != 'sigmoid' else ''}{op}"
    assert _ops(exact)[name] == 2 and _ops(fast)[name] == 1  # the float64 one stays
    assert any(n.startswith("fast_") for n in _tir_functions(fast)), _tir_functions(fast)
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-6, 6, (4, 256)).astype("float32"), rng.standard_normal((4, 8))]

    def run(mod):
        vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
        return [r.numpy() for r in vm["main"](*[tvm.runtime.tensor(a) for a in inputs])]

    (want, want64), (got, got64) = run(exact), run(fast)
    assert not np.array_equal(got, want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got64, want64)


def _by_fold_constant_alone(mod: tvm.IRModule, monkeypatch) -> tvm.IRModule:
    """``mod`` through :func:`tvm_rewrites` with every fold left to TVM's ``FoldConstant``."""
    from tvm_pet.relax import rewrites

    monkeypatch.setattr(rewrites, "_sequence", lambda names: tvm.transform.Sequential(
        [getattr(relax.transform, name)() for name in names]))
    with tvm.transform.PassContext(opt_level=3):
        return tvm_rewrites(mod)


@pytest.mark.parametrize("name, kwargs", [
    ("resnet18", {}), ("csrnet_backend", {}), ("bert_encoder", {}),
    # FoldConstant alone takes about a minute on Inception-v3's 94 folded batch norms
    pytest.param("inception_v3", {"image": 75}, marks=pytest.mark.slow)])
def test_constants_folded_with_numpy_are_what_fold_constant_gives(name, kwargs, monkeypatch):
    """TVM's rewrites fold what numpy folds bit for bit before ``FoldConstant``: the module,
    constants included, is the one ``FoldConstant`` alone gives (the batch norms folded into
    the convolutions, BERT's combined projections)."""
    mod = from_onnx(build_model(name, **kwargs), keep_params_in_input=False)
    with tvm.transform.PassContext(opt_level=3):
        with_numpy = tvm_rewrites(mod)
    tvm.ir.assert_structural_equal(with_numpy, _by_fold_constant_alone(mod, monkeypatch))


def _constant_calls() -> tvm.IRModule:
    """Integer and float arithmetic, moves and a ``take`` on constants, negatives included
    (``mod`` truncates, ``floor_mod`` floors), and a cast numpy leaves to ``FoldConstant``."""
    bb = relax.BlockBuilder()
    ints = relax.const(np.array([[-7, 7], [5, -5]], "int64"))
    divisors = relax.const(np.array([[2, -3], [-2, 3]], "int64"))
    floats = relax.const(np.array([[1.5, -2.25], [3.0, 1e-30]], "float32"))
    x = relax.Var("x", relax.TensorType((2, 2), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            outs = [bb.emit(relax.op.mod(ints, divisors)),
                    bb.emit(relax.op.floor_mod(ints, divisors)),
                    bb.emit(relax.op.multiply(ints, ints)),
                    bb.emit(relax.op.divide(floats, relax.const(np.float32(3.0)))),
                    bb.emit(relax.op.sqrt(relax.op.multiply(floats, floats))),
                    bb.emit(relax.op.permute_dims(floats, [1, 0])),
                    bb.emit(relax.op.take(floats, relax.const(np.array([1, 0], "int64")),
                                          axis=1)),
                    bb.emit(relax.op.astype(ints, "float32")),
                    bb.emit(relax.op.add(x, floats))]
            gv = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(gv)
    return bb.get()


def test_numpy_folds_integer_and_float_arithmetic_as_fold_constant_does(monkeypatch):
    from tvm_pet.relax import rewrites

    mod = _constant_calls()
    folded = rewrites.fold_with_numpy(mod)
    assert _ops(folded) == collections.Counter({"relax.astype": 1, "relax.add": 1})
    tvm.ir.assert_structural_equal(
        rewrites._sequence(("FoldConstant",))(mod),
        tvm.transform.Sequential([relax.transform.FoldConstant()])(mod))
