"""Exact evaluation of whole programs modulo p, an oracle for the tests.

The verifier never evaluates a whole program exactly: it evaluates single nodes at the positions
it tests (:func:`tvm_pet.ops.modp.eval_node_at`). The tests and the fuzzer use this module to check
a corrected program against its original on every position, in Z_p, with no tolerance. Nothing in
the optimizer imports it.

>>> from tvm_pet.example_pairs import figure3_pair
>>> a, b = outputs_modp(*figure3_pair(exact=True))
>>> bool((a["y"] == b["y"]).all())
True
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tvm_pet.ir.node import Program
from tvm_pet.ops.modp import P, eval_node_at
from tvm_pet.testing.bruteforce import shared_values


def evaluate_modp(program: Program, env: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Exact evaluation of a multi-linear program mod p on whole tensors.

    Args:
        program: a program without OPAQUE nodes.
        env: int64 residues for every input and weight, each shaped like the tensor, or with one
            extra leading axis of independent tests.

    Returns:
        The outputs by name, shaped like ``env`` (with the test axis if it was given).
    """
    shapes = program.shapes
    first = next(iter(env.values())) if env else None
    batched = first is not None and first.ndim == len(shapes[next(iter(env))]) + 1
    flat_env = {k: (np.asarray(v, np.int64) % P).reshape((v.shape[0] if batched else 1, -1))
                for k, v in env.items()}
    values = dict(flat_env)
    tests = first.shape[0] if batched else 1
    for node in program.nodes:
        ins = [shapes[i] for i in node.inputs]
        outs = [shapes[o] for o in node.outputs]
        args = [values[i] for i in node.inputs]
        for j, name in enumerate(node.outputs):
            size = int(np.prod(outs[j]))
            values[name] = eval_node_at(node.op, node.attrs, ins, outs, j, np.arange(size), args,
                                        tests)
    result = {}
    for o in program.outputs:
        v = values[o].reshape((-1,) + shapes[o])
        result[o] = v if batched else v[0]
    return result


def outputs_modp(original: Program, other: Program, seed: int = 0
                 ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Both programs evaluated exactly in Z_p on the same random residues (inputs shared by name,
    weights by content: :func:`shared_values`); returns (original's outputs, other's)."""
    rng = np.random.default_rng(seed)
    inputs, (w0, w1) = shared_values([original, other],
                                     lambda s: rng.integers(0, P, size=s, dtype=np.int64))
    return evaluate_modp(original, {**inputs, **w0}), evaluate_modp(other, {**inputs, **w1})
