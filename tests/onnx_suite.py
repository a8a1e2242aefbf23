"""PETPass transparency on external ONNX material: the backend test cases shipped in the onnx wheel.

Two sources, both inside the installed ``onnx`` package (nothing is downloaded):

- the **node cases** of ``onnx.backend.test`` (one operator per model, with inputs and reference
  outputs), generated in memory by ``onnx.backend.test.case.node.collect_testcases``;
- the **light models** ``onnx/backend/test/data/light/light_*.onnx`` (AlexNet, ResNet-50,
  DenseNet-121, ...: real CNN graphs whose weights are ``ConstantOfShape`` fills), with their
  reference outputs ``light_*_output_0.pb``. As onnx's own runner does, the inputs are the
  runner's dummy data, ``arange(n).reshape(shape) / n`` in float32.

For each case: import it with TVM's ONNX frontend, compile with ``tvm.compile(mod, "llvm")`` and
run. A case TVM cannot import, compile or run, or whose plain TVM outputs disagree with the
reference, is counted under ``tvm_cannot`` by stage and left out. Every other case goes through
:class:`~tvm_pet.relax.PETPass` (analytic cost, small budgets), is compiled and run again, and
its outputs are compared with the reference with the case's tolerances (as onnx's runner
compares them). A module the pass leaves unchanged is checked to be the same module (structural
equality), so its outputs are the plain run's. An exception from PETPass, or a module after
PETPass that no longer builds or runs, is a crash.

Every case is also lifted into a tvm_pet program and lowered back without search (the adapter's
round trip), and that module too must reproduce the reference: this exercises the adapter on
every case, not only on the few the search changes.

``benchmarks/reliability.py`` imports :func:`run_node_cases` and :func:`run_light_models`.
"""
from __future__ import annotations

import glob
import os
import re
import time
import traceback
import warnings
from collections import Counter

import numpy as np

#: Small budgets: node cases are one operator, light models are whole CNNs searched on 2 cores.
NODE_CONFIG = dict(depth=2, rounds=1, topk=2, max_subset=2, time_limit=5.0, max_candidates=300)
LIGHT_CONFIG = dict(depth=2, rounds=1, topk=2, max_subset=2, time_limit=30.0, max_candidates=300)

#: The node cases of the default run: linear operators PET lifts and searches (conv, matmul,
#: gemm, add, ...), layout operators, and non-linear ones that stay opaque.
NODE_SAMPLE = (
    "test_conv_with_strides_padding", "test_conv_with_autopad_same", "test_basic_conv_with_padding",
    "test_matmul_2d", "test_matmul_3d", "test_gemm_default_single_elem_vector_bias",
    "test_add", "test_add_bcast", "test_mul_bcast", "test_sub", "test_div_bcast",
    "test_batchnorm_example", "test_averagepool_2d_pads", "test_globalaveragepool",
    "test_concat_2d_axis_1", "test_transpose_default", "test_reshape_reordered_all_dims",
    "test_relu", "test_softmax_axis_1", "test_maxpool_2d_pads",
    "test_transpose_all_permutations_0",  # PETPass removes this identity transpose
    "test_hardmax_example",  # one_hot's on/off values are prim values (a fixed crash)
)

#: Budgets under which :class:`FewerOperators` rewrites Inception-v1 (one operator fewer).
REWRITE_CONFIG = dict(depth=3, rounds=1, max_subset=3, time_limit=60.0)


class FewerOperators:
    """A cost model that prefers fewer operators (then the analytic cost).

    Under the analytic cost PETPass finds nothing cheaper in the light models; this one makes it
    rewrite some (Inception-v1 loses an operator), so that the reference check also covers whole
    CNNs that PETPass changed.
    """

    name = "fewer-operators"

    def cost(self, program) -> float:
        from tvm_pet.cost.analytic import AnalyticCost
        return len(program.nodes) + AnalyticCost().cost(program)


# ------------------------------------------------------------------------------------ helpers
def _node_testcases():
    """All node cases of the installed onnx (collected once per process; onnx caches them)."""
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return list(collect_testcases())


def _light_dir() -> str:
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _to_numpy(value):
    """A VM result as NumPy: a tensor, or a list for a tuple."""
    import tvm
    if hasattr(value, "numpy"):
        return value.numpy()
    if isinstance(value, tvm.runtime.ShapeTuple):
        return np.array(list(value), dtype=np.int64)
    if isinstance(value, (int, float, bool)):
        return np.asarray(value)
    return [_to_numpy(v) for v in value]


def _mismatch(ref, out, rtol: float, atol: float) -> str | None:
    """Why ``out`` fails onnx's ``assert_similar_outputs`` against ``ref``, or None."""
    if isinstance(ref, (list, tuple)) != isinstance(out, (list, tuple)):
        return f"expected {type(ref).__name__}, got {type(out).__name__}"
    if isinstance(ref, (list, tuple)):
        if len(ref) != len(out):
            return f"{len(out)} outputs, expected {len(ref)}"
        for k, (r, o) in enumerate(zip(ref, out)):
            why = _mismatch(r, o, rtol, atol)
            if why is not None:
                return f"output {k}: {why}"
        return None
    ref, out = np.asarray(ref), np.asarray(out)
    if ref.shape != out.shape:
        return f"shape {out.shape}, expected {ref.shape}"
    if ref.dtype == object:
        return None if np.array_equal(ref, out) else "strings differ"
    if ref.dtype != out.dtype:
        return f"dtype {out.dtype}, expected {ref.dtype}"
    if ref.dtype.name == "bfloat16":
        rtol, ref, out = max(rtol, 2**-6), ref.astype(np.float32), out.astype(np.float32)
    try:
        np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)
    except AssertionError as e:
        lines = [s for s in str(e).splitlines() if "Max" in s or "Mismatched" in s]
        return "; ".join(s.strip() for s in lines) or "values differ"
    return None


def _run(mod, inputs: list[np.ndarray], outputs: int):
    import tvm
    from tvm import relax
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    args = [tvm.runtime.tensor(x) for x in inputs]
    result = _to_numpy(vm["main"](*args))
    return [result] if outputs == 1 else result


def _reason_kind(reason: str) -> str:
    """A PETPass reason with names and numbers blanked, to count reasons by kind."""
    reason = re.sub(r"`[^`]*`|'[^']*'|\[[^\]]*\]|R\.shape\([^)]*\)", "_", reason)
    return re.sub(r"\d+", "N", reason)[:160]


def _error(e: BaseException) -> str:
    first = str(e).strip().splitlines()
    return f"{type(e).__name__}: {first[-1][:200] if first else ''}"


class _Tally:
    """The counts of one run, and the failures with what went wrong."""

    def __init__(self):
        self.total = 0
        self.tvm_cannot: Counter = Counter()
        self.compared = 0
        self.unchanged = 0
        self.optimized = 0
        self.not_searched = 0
        self.not_searched_reasons: Counter = Counter()
        self.mismatches = 0
        self.crashes = 0
        self.round_trip_compared = 0
        self.round_trip_not_lifted = 0
        self.round_trip_mismatches = 0
        self.round_trip_crashes = 0
        self.optimized_cases: list[str] = []
        self.failures: list[dict] = []
        self.start = time.perf_counter()

    def fail(self, name: str, kind: str, detail: str) -> None:
        self.failures.append({"case": name, "kind": kind, "detail": detail})

    def to_json(self) -> dict:
        return {"total": self.total, "tvm_cannot": dict(self.tvm_cannot),
                "tvm_cannot_total": sum(self.tvm_cannot.values()), "compared": self.compared,
                "unchanged": self.unchanged, "optimized": self.optimized,
                "not_searched": self.not_searched,
                "not_searched_reasons": dict(self.not_searched_reasons.most_common()),
                "mismatches": self.mismatches,
                "crashes": self.crashes, "round_trip_compared": self.round_trip_compared,
                "round_trip_not_lifted": self.round_trip_not_lifted,
                "round_trip_mismatches": self.round_trip_mismatches,
                "round_trip_crashes": self.round_trip_crashes,
                "optimized_cases": self.optimized_cases, "failures": self.failures,
                "seconds": round(time.perf_counter() - self.start, 1)}


def _check_case(tally: _Tally, name: str, model, inputs, ref, rtol: float, atol: float,
                config, cost) -> None:
    """One case through plain TVM, PETPass and the adapter's round trip (see the module doc)."""
    import tvm_ffi
    from tvm.relax.frontend.onnx import from_onnx

    from tvm_pet.relax import PETPass
    tally.total += 1
    if any(not isinstance(x, np.ndarray) for x in inputs):
        tally.tvm_cannot["non-tensor inputs"] += 1
        return
    stage = "import"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = from_onnx(model)
        stage = "build or run"
        plain = _run(mod, inputs, len(ref))
    except Exception:  # noqa: BLE001 - TVM's frontend failing is what this counts
        tally.tvm_cannot[stage] += 1
        return
    if _mismatch(ref, plain, rtol, atol) is not None:
        tally.tvm_cannot["wrong outputs"] += 1
        return
    tally.compared += 1
    pet = PETPass(target="llvm", config=config, cost=cost)
    try:
        new = pet(mod)
    except Exception as e:  # noqa: BLE001 - PETPass must never raise: a crash, recorded
        tally.crashes += 1
        tally.fail(name, "PETPass raised", _error(e) + "\n" + traceback.format_exc(limit=-3))
        return
    changed = [f for f, r in pet.report.items() if r.get("changed")]
    reasons = [str(r.get("reason", "")) for r in pet.report.values()]
    if all(r.startswith("not searched") for r in reasons):
        tally.not_searched += 1
        tally.not_searched_reasons[_reason_kind(reasons[0])] += 1
    if not changed and tvm_ffi.structural_equal(new, mod):
        tally.unchanged += 1
        after = plain
    else:
        tally.optimized += 1
        tally.optimized_cases.append(name)
        try:
            after = _run(new, inputs, len(ref))
        except Exception as e:  # noqa: BLE001 - a module PETPass emitted must build and run
            tally.crashes += 1
            tally.fail(name, "module after PETPass does not build or run", _error(e))
            return
    why = _mismatch(ref, after, rtol, atol)
    if why is not None:
        tally.mismatches += 1
        tally.fail(name, "outputs after PETPass differ from the reference", why)
    _round_trip(tally, name, mod, inputs, ref, rtol, atol)


def _round_trip(tally, name, mod, inputs, ref, rtol, atol) -> None:
    """Lift ``main`` and lower it back unchanged: it must still compute the reference."""
    import tvm

    from tvm_pet.errors import PetError
    from tvm_pet.relax.adapter import from_relax, to_relax
    try:
        lifted = from_relax(mod["main"])
    except PetError:
        tally.round_trip_not_lifted += 1
        return
    except Exception as e:  # noqa: BLE001 - from_relax raises PetError only; anything else is a bug
        tally.round_trip_crashes += 1
        tally.fail(name, "from_relax raised a non-PetError", _error(e))
        return
    try:
        again = tvm.IRModule({**{g: f for g, f in mod.functions.items()
                                 if g.name_hint != "main"}})
        again["main"] = to_relax(lifted.program, lifted)
        out = _run(again, inputs, len(ref))
    except Exception as e:  # noqa: BLE001 - a lifted function must lower, build and run
        tally.round_trip_crashes += 1
        tally.fail(name, "round trip does not build or run", _error(e))
        return
    tally.round_trip_compared += 1
    why = _mismatch(ref, out, rtol, atol)
    if why is not None:
        tally.round_trip_mismatches += 1
        tally.fail(name, "round trip differs from the reference", why)


# ---------------------------------------------------------------------------------- the runs
def run_node_cases(limit: int | None = None, seed: int = 0,
                   names: tuple[str, ...] | None = None, cost=None) -> dict:
    """PETPass on onnx's node test cases.

    Args:
        limit: run this many cases, drawn at random with ``seed`` (None: all of them).
        seed: seed of the draw.
        names: run exactly these cases instead (unknown names are an error).
        cost: PETPass's cost model (None: analytic; :class:`FewerOperators` makes it change
            more cases).

    Returns:
        Counts (``total``, ``tvm_cannot`` by stage, ``compared``, ``unchanged``, ``optimized``,
        ``mismatches``, ``crashes``, the round trip's counts, ``seconds``) and ``failures``.
    """
    from tvm_pet.search.config import SearchConfig
    cases = _node_testcases()
    if names is not None:
        by_name = {c.name: c for c in cases}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise KeyError(f"no onnx node test case named {missing}")
        cases = [by_name[n] for n in names]
    elif limit is not None and limit < len(cases):
        pick = np.random.default_rng(seed).choice(len(cases), size=limit, replace=False)
        cases = [cases[i] for i in sorted(pick)]
    config = SearchConfig(**NODE_CONFIG, seed=seed)
    tally = _Tally()
    for case in cases:
        inputs, ref = case.data_sets[0]
        inputs = [_proto_to_numpy(x) for x in inputs]
        ref = [_proto_to_numpy(x) for x in ref]
        _check_case(tally, case.name, case.model, inputs, ref, case.rtol, case.atol, config,
                    cost)
    return tally.to_json()


def _proto_to_numpy(x):
    import onnx
    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return x


#: onnx's tolerances for the light models (onnx.backend.test.case.model).
LIGHT_TOLERANCES = {"densenet121": (2e-3, 1e-7)}


def light_model_names() -> list[str]:
    """The light models shipped in the installed onnx, e.g. ``["bvlc_alexnet", ...]``."""
    files = sorted(glob.glob(os.path.join(_light_dir(), "light_*.onnx")))
    return [os.path.basename(f)[len("light_"):-len(".onnx")] for f in files]


def light_model_case(name: str):
    """``(model, inputs, reference outputs, rtol, atol)`` of one light model, inputs made as
    onnx's runner makes them (``Runner.generate_dummy_data(random=False)``)."""
    import onnx
    from onnx.backend.test.runner import Runner
    path = os.path.join(_light_dir(), f"light_{name}.onnx")
    model = onnx.load(path)
    inits = {i.name for i in model.graph.initializer}
    inputs = [Runner.generate_dummy_data(x, seed=0, name=name, random=False)
              for x in model.graph.input if x.name not in inits]
    ref = []
    for k in range(len(model.graph.output)):
        tensor = onnx.TensorProto()
        with open(f"{os.path.splitext(path)[0]}_output_{k}.pb", "rb") as f:
            tensor.ParseFromString(f.read())
        ref.append(onnx.numpy_helper.to_array(tensor))
    rtol, atol = LIGHT_TOLERANCES.get(name, (1e-3, 1e-7))
    return model, inputs, ref, rtol, atol


def run_light_models(names: list[str] | tuple[str, ...] | None = None, cost=None,
                     config=None) -> dict:
    """PETPass on onnx's light CNN models (all of them when ``names`` is None).

    Args:
        names: light model names (:func:`light_model_names`).
        cost: PETPass's cost model (None: analytic).
        config: PETPass's budgets (None: :data:`LIGHT_CONFIG`).

    Returns:
        The same counts as :func:`run_node_cases`, plus ``per_model_seconds``.
    """
    from tvm_pet.search.config import SearchConfig
    config = config or SearchConfig(**LIGHT_CONFIG)
    tally = _Tally()
    per_model = {}
    for name in names if names is not None else light_model_names():
        start = time.perf_counter()
        model, inputs, ref, rtol, atol = light_model_case(name)
        _check_case(tally, name, model, inputs, ref, rtol, atol, config, cost)
        per_model[name] = round(time.perf_counter() - start, 1)
    return {**tally.to_json(), "per_model_seconds": per_model}


if __name__ == "__main__":  # a quick look: python -m tests.onnx_suite [limit]
    import json
    import sys
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    print(json.dumps(run_node_cases(limit=limit), indent=1))
