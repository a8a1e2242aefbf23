"""The one interpreter loop: run a program with any rule table.

Float evaluation, exact mod-p evaluation and box-label propagation are all this loop with a
different table. Errors say which node was running.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tvm_pet.errors import PetError, ProgramError
from tvm_pet.ir.node import Attrs, Program
from tvm_pet.ir.ops import Op

Rule = Callable[[Attrs, list], tuple]


def run(program: Program, rules: Mapping[Op, Rule], env: Mapping[str, Any],
        keep: bool = False) -> dict[str, Any]:
    """Evaluate ``program`` with ``rules`` from values of its inputs and weights.

    Args:
        program: the program to run.
        rules: one rule per operator kind, ``rule(attrs, input_values) -> output_values``.
        env: a value for every input and weight name.
        keep: return every intermediate value, not only the outputs.

    Returns:
        The outputs by name (or every tensor, with ``keep``).
    """
    values = dict(env)
    missing = [n for n in list(program.input_names) + list(program.weights) if n not in values]
    if missing:
        raise ProgramError(f"no value given for {missing}")
    last_use = {i: k for k, n in enumerate(program.nodes) for i in n.inputs}
    for k, node in enumerate(program.nodes):
        try:
            outs = rules[node.op](node.attrs, [values[i] for i in node.inputs])
        except PetError as e:
            raise type(e)(f"while executing `{node.describe()}`: {e}") from None
        for name, value in zip(node.outputs, outs):
            values[name] = value
        if not keep:
            for i in set(node.inputs):
                if last_use[i] == k and i not in program.outputs and i not in env:
                    del values[i]
    return values if keep else {o: values[o] for o in program.outputs}


def evaluate(program: Program, inputs: Mapping[str, np.ndarray], dtype=np.float32,
             weights: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Float evaluation of a program on NumPy inputs.

    Args:
        program: the program.
        inputs: an array for every runtime input.
        dtype: computation dtype (float64 for oracles).
        weights: optional replacement values for weights (same shapes).

    Returns:
        The outputs by name.

    >>> from tvm_pet.ir import ProgramBuilder
    >>> b = ProgramBuilder(); x = b.input("x", (2, 2)); y = b.add(x, x)
    >>> evaluate(b.build([y]), {"x": np.ones((2, 2))})[y].tolist()
    [[2.0, 2.0], [2.0, 2.0]]
    """
    from tvm_pet.ops.float_eval import FLOAT_RULES
    env: dict[str, np.ndarray] = {}
    for spec in program.inputs:
        if spec.name not in inputs:
            raise ProgramError(f"missing input {spec.name!r} of shape {list(spec.shape)}")
        value = np.asarray(inputs[spec.name], dtype=dtype)
        if value.shape != spec.shape:
            raise ProgramError(f"input {spec.name!r} has shape {list(value.shape)}, the program "
                               f"expects {list(spec.shape)}")
        env[spec.name] = value
    for name, value in program.weights.items():
        env[name] = np.asarray(weights[name] if weights and name in weights else value, dtype=dtype)
    return run(program, FLOAT_RULES, env)
