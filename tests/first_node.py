"""A one-layer program with its first node's attributes changed, and its inputs: the shared tail
of the tests of forms that are a node attribute (``tests/test_splitk.py``, ``test_im2col.py``)."""
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
