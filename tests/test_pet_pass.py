"""PETPass inside tvm.transform.Sequential, and tvm.compile(..., relax_pipeline="pet").

No tuning here: the search uses a cost model that penalises dilated convolutions, so that the
pass provably changes the module, and the outputs are compared with the unoptimized module and
with onnxruntime.
"""
import numpy as np
import onnxruntime as ort
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402
from tvm.relax.frontend.onnx import from_onnx  # noqa: E402

from tests.dilated import PenaliseDilation, dilated_model  # noqa: E402
from tvm_pet.relax import PETPass, register_pipeline  # noqa: E402
from tvm_pet.search.config import SearchConfig  # noqa: E402


def run(mod, x, pipeline="default"):
    ex = tvm.compile(mod, target="llvm", relax_pipeline=pipeline)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


CONFIG = SearchConfig(depth=3, rounds=1, time_limit=60)


@pytest.fixture(scope="module")
def model_and_input():
    model = dilated_model()
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return model, x, want


def _ops(mod):
    names = []

    @relax.expr_functor.visitor
    class Calls(relax.PyExprVisitor):
        def visit_call_(self, call):
            if isinstance(call.op, tvm.ir.Op):
                names.append(str(call.op.name))
            super().visit_call_(call)

    Calls().visit_expr(mod["main"])
    return names


def test_pet_pass_in_sequential_changes_and_stays_exact(model_and_input):
    model, x, want = model_and_input
    mod = from_onnx(model)
    pet = PETPass(config=CONFIG, cost=PenaliseDilation())
    new = tvm.transform.Sequential([pet])(mod)
    assert pet.report["main"]["changed"] is True
    assert "relax.nn.relu" in _ops(new)  # the opaque operator survived
    before, after = run(mod, x), run(new, x)
    np.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(after, want, rtol=1e-4, atol=1e-5)


def test_pet_pass_without_a_cheaper_program_leaves_the_module(model_and_input):
    model, x, _ = model_and_input
    mod = from_onnx(model)
    pet = PETPass(config=CONFIG)  # analytic cost: no cheaper exact program here
    new = pet(mod)
    assert pet.report["main"]["changed"] is False and "reason" in pet.report["main"]
    tvm.ir.assert_structural_equal(new, mod)


def test_pet_pipeline_compiles_and_matches(model_and_input):
    model, x, want = model_and_input
    register_pipeline()
    register_pipeline()  # idempotent
    mod = from_onnx(model)
    pipeline = relax.get_pipeline("pet", config=CONFIG, cost=PenaliseDilation())
    np.testing.assert_allclose(run(mod, x, pipeline), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run(mod, x, "pet"), want, rtol=1e-4, atol=1e-5)
    plain = relax.get_pipeline("pet", enable_pet=False)
    np.testing.assert_allclose(run(mod, x, plain), want, rtol=1e-4, atol=1e-5)


def test_function_with_symbolic_shape_is_left_unchanged():
    n = tvm.tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.add(x, x))
        bb.emit_func_output(y)
    mod = bb.finalize()
    pet = PETPass(config=CONFIG)
    new = pet(mod)
    tvm.ir.assert_structural_equal(new, mod)
    assert pet.report["main"]["changed"] is False


def test_names_a_tvm_user_reaches_for():
    """`import tvm_pet` loads no TVM; `tvm_pet.PETPass` is the pass; importing tvm_pet.relax
    registers "pet" (checked in a fresh interpreter, where nothing registered it before)."""
    code = ("import sys, tvm_pet\n"
            "assert 'tvm' not in sys.modules\n"
            "from tvm_pet import PETPass\n"
            "import tvm_pet.relax\n"
            "from tvm import relax\n"
            "assert PETPass is tvm_pet.relax.PETPass\n"
            "assert 'pet' in relax.pipeline.PIPELINE_MAP\n"
            "tvm_pet.relax.register_pipeline()\n")
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_report_has_coverage(model_and_input):
    model, _, _ = model_and_input
    pet = PETPass(config=CONFIG, cost=PenaliseDilation())
    pet(from_onnx(model))
    cov = pet.report["main"]["coverage"]
    assert cov["coverage"] == 1.0 and cov["subprograms"] == 1 == cov["searched_subprograms"]
    assert cov["opaque"] == {"Relu": 1} and cov["linear_flops"] == 2 * 8 * 12 * 12 * 8 * 9
    assert pet.coverage["main"].summary_line().startswith("main: 100.0% of linear FLOPs")
    assert len(pet.summary()) == 1
