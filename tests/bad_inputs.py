"""Bad input at tvm_pet's three entry points: a clear error or an unchanged pass-through, never a
crash or a hang.

The inputs: a corrupt ONNX file, an unsupported operator, dynamic or symbolic
dimensions, zero-size dimensions, mismatched ``verify`` pairs, non-float32 dtypes and huge shapes.
The entry points:

- **cli**: ``tvm-pet optimize`` and ``tvm-pet verify`` must exit with code 2 and print one line,
  ``tvm-pet <command>: error: ...``, naming the offending thing (no traceback);
- **api**: :func:`~tvm_pet.onnx.import_model`, :func:`~tvm_pet.pipeline.optimize_model` and
  :func:`~tvm_pet.verify.verifier.verify` must raise the named :class:`~tvm_pet.errors.PetError`
  subclass, with a message naming the thing;
- **pass**: :class:`~tvm_pet.relax.PETPass` must never raise; it leaves the function (or the
  affected subgraph) unchanged and says why in ``.report``.

Huge shapes stay bounded by design, not by a timeout: every path that would materialise a tensor
checks :data:`~tvm_pet.verify.limits.MAX_TENSOR_ELEMENTS` first, so no case here allocates more
than a few megabytes.

Each :class:`Case` returns an outcome: ``clear_error``, ``passed_through``, ``wrong`` (no error
where one was due, a message not naming the thing, a changed module) or ``crash`` (an exception
other than the promised one). ``tests/test_bad_input.py`` runs every case not already checked by
another test (``covered_by``); :func:`run_bad_inputs` runs them all, for
``benchmarks/reliability.py``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import pathlib
import tempfile
import traceback
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tvm_pet.errors import ModelError, PetError, ShapeError, VerificationError

#: A 2**40-element shape, and a large conv input (2**33 elements): both above the size limit.
HUGE_2_40 = [1 << 20, 1 << 20]
HUGE_CONV = [1, 512, 4096, 4096]
LIMIT_WORDS = ("elements", "at most")

Outcome = tuple[str, str]  # (clear_error | passed_through | wrong, detail)


@dataclasses.dataclass(frozen=True)
class Case:
    """One bad input at one entry point.

    Attributes:
        name: ``<input>/<entry point>``, e.g. ``"zero-size/cli-optimize"``.
        entry: ``"cli"``, ``"api"`` or ``"pass"``.
        check: runs the case in a scratch folder and returns its :data:`Outcome`.
        covered_by: the existing test that already checks this case, if any.
    """

    name: str
    entry: str
    check: Callable[[pathlib.Path], Outcome]
    covered_by: str | None = None


# ------------------------------------------------------------------------------ ONNX models
def _model(nodes, inputs: dict, outputs: dict, inits=(), elem=TensorProto.FLOAT,
           opset: int = 17) -> onnx.ModelProto:
    """A model; ``inputs``/``outputs`` map names to shapes (a string is a symbolic dim)."""
    def vi(name, shape):
        return helper.make_tensor_value_info(name, elem, shape)
    graph = helper.make_graph(nodes, "bad_input", [vi(k, v) for k, v in inputs.items()],
                              [vi(k, v) for k, v in outputs.items()], initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _conv_model(shape=(1, 4, 8, 8), elem=TensorProto.FLOAT, extra=()) -> onnx.ModelProto:
    """x -> Conv(3x3, pad 1) [-> extra nodes] -> y."""
    channels = shape[1] if isinstance(shape[1], int) else 4
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    w = numpy_helper.from_array((np.ones((channels, channels, 3, 3)) * 0.1).astype(dtype), "w")
    conv_out = "c" if extra else "y"
    nodes = [helper.make_node("Conv", ["x", "w"], [conv_out], pads=[1, 1, 1, 1]), *extra]
    return _model(nodes, {"x": list(shape)}, {"y": list(shape)}, [w], elem)


def corrupt_model(path: pathlib.Path) -> pathlib.Path:
    """A valid model file cut in half (a truncated download)."""
    data = _conv_model().SerializeToString()
    path.write_bytes(data[: len(data) // 2])
    return path


def unsupported_model() -> onnx.ModelProto:
    """Conv then Hardmax: tvm_pet imports Hardmax as opaque but has no Relax lowering for it."""
    return _conv_model(extra=[helper.make_node("Hardmax", ["c"], ["y"], axis=1)])


def dynamic_model() -> onnx.ModelProto:
    return _conv_model(("batch", 4, 8, 8))


def zero_size_model() -> onnx.ModelProto:
    return _conv_model((0, 4, 8, 8))


def dtype_model(elem: int) -> onnx.ModelProto:
    return _model([helper.make_node("Add", ["x", "x"], ["y"])], {"x": [2, 3]}, {"y": [2, 3]},
                  elem=elem)


def cast_fp16_model() -> onnx.ModelProto:
    """float32 in and out, but a Relu computed in float16 in between."""
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
    return _model(nodes, {"x": [2, 3]}, {"y": [2, 3]})


def huge_conv_model() -> onnx.ModelProto:
    return _conv_model(tuple(HUGE_CONV))


def huge_constant_model() -> onnx.ModelProto:
    """A ConstantOfShape of 2**40 elements, which an importer would fold into memory."""
    shape = numpy_helper.from_array(np.array(HUGE_2_40, np.int64), "s")
    one = numpy_helper.from_array(np.array([1.0], np.float32))
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["k"], value=one),
             helper.make_node("Add", ["x", "k"], ["y"])]
    return _model(nodes, {"x": [1, 1]}, {"y": HUGE_2_40}, [shape])


def huge_input_model() -> onnx.ModelProto:
    return _model([helper.make_node("Add", ["x", "x"], ["y"])], {"x": HUGE_2_40},
                  {"y": HUGE_2_40})


def _matmul_model(x_name="x", m=4, outputs=1) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((6, 5), np.float32), "w")
    nodes = [helper.make_node("MatMul", [x_name, "w"], ["y"])]
    outs = {"y": [m, 5]}
    if outputs == 2:
        nodes.append(helper.make_node("MatMul", [x_name, "w"], ["z"]))
        outs["z"] = [m, 5]
    return _model(nodes, {x_name: [m, 6]}, outs, [w])


#: Mismatched ``verify`` pairs: (original, candidate, words the message must contain).
MISMATCHED_PAIRS = {
    "input-name": (lambda: _matmul_model("x"), lambda: _matmul_model("a"), ("inputs differ",)),
    "input-shape": (lambda: _matmul_model(m=4), lambda: _matmul_model(m=3), ("differ", "[4, 6]")),
    "output-count": (lambda: _matmul_model(), lambda: _matmul_model(outputs=2),
                     ("outputs differ", "z")),
}


# --------------------------------------------------------------------------- the three checks
def _cli(argv: Callable[[pathlib.Path], list[str]], *words: str) -> Callable:
    """A CLI case: exit code 2 and one line ``tvm-pet <cmd>: error: ...`` containing ``words``."""
    def check(tmp: pathlib.Path) -> Outcome:
        from tvm_pet.cli import main
        args = argv(tmp)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
        text = err.getvalue().strip()
        prefix = f"tvm-pet {args[0]}: error: "
        if code != 2:
            return "wrong", f"exit code {code}, expected 2 (stderr {text!r})"
        if "\n" in text or not text.startswith(prefix) or "Traceback" in text:
            return "wrong", f"expected one line starting {prefix!r}, got {text!r}"
        missing = [w for w in words if w not in text]
        if missing:
            return "wrong", f"message does not name {missing}: {text!r}"
        return "clear_error", text
    return check


def _raises(call: Callable[[pathlib.Path], object], error: type[PetError], *words: str):
    """An API case: ``call`` raises ``error`` with ``words`` in its message (any exception that
    is not a PetError propagates: the runner counts it as a crash)."""
    def check(tmp: pathlib.Path) -> Outcome:
        try:
            call(tmp)
        except error as e:
            missing = [w for w in words if w not in str(e)]
            if missing:
                return "wrong", f"{type(e).__name__} does not name {missing}: {e}"
            return "clear_error", f"{type(e).__name__}: {e}"
        except PetError as e:
            return "wrong", f"raised {type(e).__name__}, expected {error.__name__}: {e}"
        return "wrong", f"no error, expected {error.__name__}"
    return check


def _write(model: Callable[[], onnx.ModelProto], name: str = "m.onnx"):
    def path(tmp: pathlib.Path) -> str:
        p = tmp / name
        if not p.exists():
            onnx.save(model(), p)
        return str(p)
    return path


def _optimize_argv(model) -> Callable[[pathlib.Path], list[str]]:
    return lambda tmp: ["optimize", _write(model)(tmp), "--out", str(tmp / "out"),
                        "--cost", "analytic", "--time-limit", "10", "--trials", "0"]


def _verify_argv(original, candidate=None) -> Callable[[pathlib.Path], list[str]]:
    return lambda tmp: ["verify", _write(original, "a.onnx")(tmp),
                        _write(candidate or original, "b.onnx")(tmp)]


def _goes_through(run: Callable[[pathlib.Path], object]) -> Callable:
    """An optimize case that TVM imports and runs: ``run`` (an argv for ``main``, or an API call
    returning ``report.json``) succeeds, PET leaves an operator opaque, and what ``optimized.so``
    holds matches onnxruntime."""
    def check(tmp: pathlib.Path) -> Outcome:
        made = run(tmp)
        if isinstance(made, list):
            from tvm_pet.cli import main
            err = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                code = main(made)
            if code != 0:
                return "wrong", f"exit code {code}: {err.getvalue().strip()!r}"
            made = json.loads((tmp / "out" / "report.json").read_text())
        opaque, err = made["coverage"]["opaque"], made["max_abs_err_vs_onnxruntime"]
        if not opaque or err is None or err > 1e-4:
            return "wrong", f"opaque operators {opaque}, error against onnxruntime {err}"
        return "passed_through", f"left opaque: {opaque}; error against onnxruntime {err:.2g}"
    return check


def _optimize_model(source: Callable[[pathlib.Path], object]) -> Callable:
    """``optimize_model`` on what ``source(tmp)`` gives: a ModelProto or a path."""
    def call(tmp: pathlib.Path):
        from tvm_pet.pipeline import DriverOptions, optimize_model
        from tvm_pet.search.config import SearchConfig
        return optimize_model(source(tmp), tmp / "out", SearchConfig(rounds=1, time_limit=10),
                              DriverOptions(cost="analytic", timing_rounds=1))
    return call


def _import_path(path: pathlib.Path):
    from tvm_pet.onnx import import_model
    return import_model(path)


def _import(model) -> Callable[[pathlib.Path], object]:
    from tvm_pet.onnx import import_model
    return lambda tmp: import_model(model())


def _verify(original, candidate) -> Callable[[pathlib.Path], object]:
    from tvm_pet.onnx import import_model
    from tvm_pet.verify.verifier import verify
    return lambda tmp: verify(import_model(original()), import_model(candidate()))


# ------------------------------------------------------------------------------ Relax modules
def relax_conv(shape, dtype: str = "float32", n_var: bool = False):
    """``main(x, w) = conv2d(x, w, pad 2, dilation 2) + itself``: PET's favourite pattern."""
    import tvm
    from tvm import relax
    if n_var:
        shape = (tvm.tirx.Var("n", "int64"), *shape[1:])
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    w = relax.Var("w", relax.TensorType((4, shape[1], 3, 3), dtype))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, w, padding=(2, 2, 2, 2), dilation=(2, 2)))
            y = bb.emit_output(relax.op.add(c, c))
        bb.emit_func_output(y)
    return bb.finalize()


def relax_with_inner(kind: str):
    """float32 in and out; in between, ``kind``: a conv in float16 (``"float16"``), an operator
    PET does not know (``"unknown"``, ``cumsum``) or an operand that is a prim value
    (``"prim-value"``, ``one_hot``'s on and off values)."""
    import tvm
    from tvm import relax
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), "float32"))
    w = relax.const((np.arange(144, dtype="float32").reshape(4, 4, 3, 3) / 144))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, w, padding=(1, 1, 1, 1)))
            if kind == "float16":
                h = bb.emit(relax.op.astype(c, "float16"))
                h = bb.emit(relax.op.nn.conv2d(h, relax.const(np.ones((4, 4, 1, 1), "float16"))))
                m = bb.emit(relax.op.astype(h, "float32"))
            elif kind == "unknown":
                m = bb.emit(relax.op.cumsum(c, axis=3))
            else:
                i = bb.emit(relax.op.argmax(c, axis=1))
                m = bb.emit(relax.op.one_hot(i, tvm.tirx.FloatImm("float32", 1.0),
                                             tvm.tirx.FloatImm("float32", 0.0), 4, axis=1))
            d = bb.emit(relax.op.nn.conv2d(m, w, padding=(1, 1, 1, 1)))
            y = bb.emit_output(relax.op.add(d, d))
        bb.emit_func_output(y)
    return bb.finalize()


_INNER_OPS = {"float16": "relax.astype", "unknown": "relax.cumsum", "prim-value": "relax.one_hot"}


def _pet(mod):
    from tvm_pet.relax import PETPass
    from tvm_pet.search.config import SearchConfig
    pet = PETPass(config=SearchConfig(depth=2, rounds=1, time_limit=10))
    return pet(mod), pet.report["main"]


def _unchanged(build: Callable[[], object], *words: str) -> Callable:
    """A pass case: the module comes back structurally equal, and the reason names ``words``."""
    def check(tmp: pathlib.Path) -> Outcome:
        import tvm_ffi
        mod = build()
        new, report = _pet(mod)
        reason = str(report.get("reason", ""))
        if report.get("changed") or not tvm_ffi.structural_equal(new, mod):
            return "wrong", f"the module was changed: {report}"
        missing = [w for w in words if w not in reason]
        if missing:
            return "wrong", f"the reason does not name {missing}: {reason!r}"
        return "passed_through", reason
    return check


def _subgraph_kept(kind: str) -> Callable:
    """A pass case: the inner subgraph is still there, and the module computes what it did."""
    def check(tmp: pathlib.Path) -> Outcome:
        import tvm
        from tvm import relax
        mod = relax_with_inner(kind)
        new, report = _pet(mod)
        op = _INNER_OPS[kind]
        text = new.script()
        if op.replace("relax.", "R.") + "(" not in text:
            return "wrong", f"{op} is gone after PETPass"
        x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
        outs = []
        for m in (mod, new):
            vm = relax.VirtualMachine(tvm.compile(m, "llvm"), tvm.cpu())
            outs.append(vm["main"](tvm.runtime.tensor(x)).numpy())
        err = float(np.abs(outs[0] - outs[1]).max())
        if err > 1e-3 * (1 + float(np.abs(outs[0]).max())):
            return "wrong", f"outputs differ by {err:.3g} after PETPass"
        state = "changed around it" if report.get("changed") else report.get("reason", "")
        return "passed_through", f"{op} kept ({state})"
    return check


# ---------------------------------------------------------------------------------- the cases
F16, BF16, I32 = TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.INT32

CASES: tuple[Case, ...] = (
    # a corrupt ONNX file
    Case("corrupt/cli-optimize", "cli", _cli(lambda t: ["optimize", str(corrupt_model(
        t / "cut.onnx")), "--out", str(t / "out")], "cut.onnx", "not a valid ONNX model")),
    Case("corrupt/cli-verify", "cli", _cli(lambda t: ["verify", str(corrupt_model(
        t / "cut.onnx")), str(corrupt_model(t / "cut.onnx"))], "cut.onnx", "not a valid"),
        covered_by="test_cli.py::test_corrupt_and_missing_files_exit_two"),
    Case("corrupt/api-import", "api", _raises(lambda t: _import_path(corrupt_model(
        t / "cut.onnx")), ModelError, "cut.onnx", "not a valid ONNX model"),
        covered_by="test_onnx_io.py::test_corrupt_file_is_model_error"),
    Case("corrupt/api-optimize", "api", _raises(_optimize_model(
        lambda t: corrupt_model(t / "cut.onnx")), ModelError, "cut.onnx", "not a valid")),
    # an unsupported operator
    # an operator PET cannot lift: optimize takes TVM's import and leaves it opaque
    Case("unsupported-op/cli-optimize", "cli", _goes_through(_optimize_argv(unsupported_model))),
    Case("unsupported-op/api-optimize", "api", _goes_through(
        _optimize_model(lambda t: unsupported_model()))),
    Case("unsupported-op/cli-verify", "cli", _cli(_verify_argv(unsupported_model), "Hardmax")),
    Case("unsupported-op/pass", "pass", _subgraph_kept("unknown")),
    Case("prim-value-operand/pass", "pass", _subgraph_kept("prim-value")),
    # dynamic or symbolic dimensions
    Case("dynamic-dim/cli-optimize", "cli", _cli(_optimize_argv(dynamic_model), "'x'",
                                                 "'batch'", "static")),
    Case("dynamic-dim/cli-verify", "cli", _cli(_verify_argv(dynamic_model), "'batch'")),
    Case("dynamic-dim/api-import", "api", _raises(_import(dynamic_model), ModelError, "'batch'"),
         covered_by="test_onnx_io.py::test_dynamic_dim_is_clear_error"),
    Case("symbolic-dim/pass", "pass", _unchanged(lambda: relax_conv((1, 4, 8, 8), n_var=True),
                                                 "not searched", "symbolic"),
         covered_by="test_pet_pass.py::test_function_with_symbolic_shape_is_left_unchanged"),
    # zero-size dimensions
    Case("zero-size/cli-optimize", "cli", _cli(_optimize_argv(zero_size_model), "'x'",
                                               "zero-size")),
    Case("zero-size/api-import", "api", _raises(_import(zero_size_model), ModelError, "'x'",
                                                "zero-size")),
    Case("zero-size/pass", "pass", _unchanged(lambda: relax_conv((0, 4, 8, 8)), "zero-size",
                                              "[0, 4, 8, 8]")),
    # mismatched verify pairs
    *(Case(f"mismatched-{k}/cli-verify", "cli", _cli(_verify_argv(a, b), *words),
           covered_by="test_cli.py::test_mismatched_models_exit_two" if k == "input-shape"
           else None) for k, (a, b, words) in MISMATCHED_PAIRS.items()),
    *(Case(f"mismatched-{k}/api-verify", "api", _raises(_verify(a, b), VerificationError,
                                                         *words))
      for k, (a, b, words) in MISMATCHED_PAIRS.items()),
    # non-float32 dtypes: rejected by the engine, passed through by PETPass
    *(Case(f"{name}/cli-optimize", "cli", _cli(_optimize_argv(lambda e=e: dtype_model(e)),
                                                "'x'", name, "float32"))
      for name, e in (("float16", F16), ("bfloat16", BF16), ("int32", I32))),
    Case("float16/cli-verify", "cli", _cli(_verify_argv(lambda: dtype_model(F16)), "float16")),
    *(Case(f"{name}/api-import", "api", _raises(_import(lambda e=e: dtype_model(e)), ModelError,
                                                 "'x'", name, "float32"))
      for name, e in (("float16", F16), ("bfloat16", BF16))),
    Case("float16-inside/api-import", "api", _raises(_import(cast_fp16_model), ModelError,
                                                     "'h'", "float32")),
    *(Case(f"{dtype}/pass", "pass", _unchanged(lambda d=dtype: relax_conv((1, 4, 8, 8), d),
                                                "not searched", dtype, "float32"))
      for dtype in ("float16", "bfloat16", "int32")),
    Case("float16-inside/pass", "pass", _subgraph_kept("float16")),
    # huge shapes: refused up front, nothing allocated
    Case("huge-conv/cli-optimize", "cli", _cli(_optimize_argv(huge_conv_model), "'x'",
                                               *LIMIT_WORDS)),
    Case("huge-conv/cli-verify", "cli", _cli(_verify_argv(huge_conv_model), *LIMIT_WORDS)),
    Case("huge-2^40/api-optimize", "api", _raises(
        _optimize_model(lambda t: huge_input_model()), ShapeError, "'x'", str(1 << 40))),
    Case("huge-constant/api-import", "api", _raises(_import(huge_constant_model), ModelError,
                                                    "ConstantOfShape", *LIMIT_WORDS)),
    Case("huge-conv/pass", "pass", _unchanged(lambda: relax_conv(tuple(HUGE_CONV)),
                                              "not searched", *LIMIT_WORDS)),
    Case("huge-2^40/pass", "pass", _unchanged(lambda: relax_conv((1, 4, 1 << 19, 1 << 19)),
                                              "not searched", *LIMIT_WORDS)),
)


# ------------------------------------------------------------------------------------ runner
def run_case(case: Case, tmp: pathlib.Path) -> Outcome:
    """The case's outcome; an exception it lets escape is a ``crash``."""
    try:
        return case.check(tmp)
    except Exception as e:  # noqa: BLE001 - an escaping exception is exactly what this counts
        return "crash", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-4)}"


def run_bad_inputs(cases: tuple[Case, ...] = CASES) -> dict:
    """Run every case outside pytest.

    Returns:
        ``tried``, ``clear_errors``, ``passed_through``, ``wrong``, ``crashes`` and ``cases``:
        one ``{"name", "entry", "outcome", "detail"}`` per case.
    """
    rows = []
    for case in cases:
        with tempfile.TemporaryDirectory() as tmp:
            outcome, detail = run_case(case, pathlib.Path(tmp))
        rows.append({"name": case.name, "entry": case.entry, "outcome": outcome,
                     "detail": detail})
    count = lambda o: sum(r["outcome"] == o for r in rows)  # noqa: E731
    return {"tried": len(rows), "clear_errors": count("clear_error"),
            "passed_through": count("passed_through"), "wrong": count("wrong"),
            "crashes": count("crash"), "cases": rows}


if __name__ == "__main__":  # python -m tests.bad_inputs
    import json
    result = run_bad_inputs()
    for row in result["cases"]:
        print(f"{row['outcome']:15} {row['name']:32} {row['detail'].splitlines()[0][:150]}")
    print(json.dumps({k: v for k, v in result.items() if k != "cases"}))
