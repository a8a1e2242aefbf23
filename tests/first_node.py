"""A one-layer program with its first node's attributes changed, and its inputs: the shared tail
of the tests of forms that are a node attribute (``tests/test_im2col.py``)."""
from __future__ import annotations

import dataclasses

import numpy as np

from tvm_pet.ir.node import Program


def with_inputs(program: Program, rng: np.random.Generator, x_shape, w_value: np.ndarray,
                weight_input: bool, **attrs) -> tuple[Program, dict[str, np.ndarray]]:
    """``program`` with its first node's attributes updated by ``attrs`` (none given: as it
    is), and its inputs: a random ``x`` of ``x_shape`` and, where the weight is a run-time
    input (``weight_input``), ``w`` = ``w_value``."""
    if attrs:
        node = program.nodes[0]
        program = program.replace(nodes=(dataclasses.replace(
            node, attrs=node.attrs.replace(**attrs)),) + tuple(program.nodes[1:]))
    inputs = {"x": rng.standard_normal(x_shape).astype("float32")}
    if weight_input:
        inputs["w"] = w_value
    return program, inputs


def run_module(mod, *inputs) -> np.ndarray:
    """Compile a Relax module for this CPU and run its ``main`` on ``inputs``."""
    import tvm
    from tvm import relax
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()


def lowers_to_the_same(program: Program, plain: Program, inputs: dict) -> str:
    """Check that ``program`` lowered to Relax and run on TVM computes what ``plain`` computes
    in float64 (relative 1e-5); return the lowered module's text, for the caller to check its
    form."""
    from tvm_pet.relax.adapter import program_to_module
    from tvm_pet.verify.interpreter import evaluate
    want = evaluate(plain, inputs, dtype=np.float64)[plain.outputs[0]]
    module = program_to_module(program)
    got = run_module(module, *inputs.values())
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    return module.script()
