"""Exact arithmetic modulo the prime p = 2^31 - 1, derived from :mod:`~tvm_pet.ops.gather`.

Residues are int64 in ``[0, p)``. A product of two residues needs 62 bits and fits an int64, so
every product is reduced before it is summed; a sum of up to 2^32 reduced terms still fits, and
reductions are chunked far below that. Nothing can overflow, whatever the reduction size.

The verifier evaluates single nodes at chosen positions (:func:`eval_node_at`); whole programs are
evaluated mod p by the test oracle :func:`tvm_pet.testing.modp_oracle.evaluate_modp`.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from tvm_pet.errors import UnsupportedOperator
from tvm_pet.ir.node import Attrs, Shape
from tvm_pet.ir.ops import Op
from tvm_pet.ops.gather import GATHER_RULES, Gather, reduction_size, unravel

P = 2**31 - 1
#: Gathered elements per chunk (per test), to bound memory.
CHUNK = 1 << 20
#: Terms summed between two reductions; each term < 2^31, so a sum stays below 2^62.
MAX_SUM = 1 << 30


def inverse(values: np.ndarray) -> np.ndarray:
    """Multiplicative inverses mod p of positive ints (by Fermat, one pow per distinct value)."""
    uniq, where = np.unique(values, return_inverse=True)
    inv = np.array([pow(int(u) % P, P - 2, P) for u in uniq], dtype=np.int64)
    return inv[where].reshape(values.shape)


def mulmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise a*b mod p for residues (the product fits in 62 bits)."""
    return (a * b) % P


def sum_mod(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Sum of residues along an axis, reduced mod p, exact for any length."""
    n = x.shape[axis]
    if n <= MAX_SUM:
        return x.sum(axis=axis) % P
    parts = [np.take(x, range(i, min(n, i + MAX_SUM)), axis=axis).sum(axis=axis) % P
             for i in range(0, n, MAX_SUM)]
    return np.sum(parts, axis=0) % P


def gather_values(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``values[..., idx]`` with ``-1`` indices reading zero."""
    out = values[..., np.maximum(idx, 0)]
    return np.where(idx >= 0, out, 0)


def apply_gather(g: Gather, inputs: Sequence[np.ndarray], tests: int, count: int) -> np.ndarray:
    """Evaluate a :class:`Gather` for ``count`` positions mod p; ``inputs[i]`` is ``[T, size_i]``."""
    total = None
    for term in g.terms:
        prod = None
        for i, idx in term:
            vals = gather_values(inputs[i], idx)
            prod = vals if prod is None else mulmod(prod, vals)
        s = sum_mod(prod) if prod is not None else np.ones((tests, count), np.int64)
        total = s if total is None else (total + s) % P
    if g.divisor is not None:
        total = mulmod(total, inverse(g.divisor))
    num, den = g.constant
    if (num, den) != (1, 1):
        total = mulmod(total, num % P * pow(den % P, P - 2, P) % P)
    return total


def gathers(op: Op, attrs: Attrs, in_shapes: Sequence[Shape], out_shapes: Sequence[Shape],
            j: int, flat: np.ndarray) -> Iterator[tuple[np.ndarray, Gather]]:
    """The :class:`Gather` of output ``j`` at the flat positions ``flat``, in chunks that bound
    memory: ``(positions of the chunk, its gather)``."""
    if op not in GATHER_RULES:
        raise UnsupportedOperator(f"{op.value} is not multi-linear and has no exact evaluation")
    per = max(1, CHUNK // max(1, reduction_size(op, attrs, in_shapes)))
    for start in range(0, len(flat), per):
        part = flat[start:start + per]
        yield part, GATHER_RULES[op](attrs, in_shapes, out_shapes, j, unravel(part, out_shapes[j]))


def eval_node_at(op: Op, attrs: Attrs, in_shapes: Sequence[Shape], out_shapes: Sequence[Shape],
                 j: int, flat: np.ndarray, inputs: Sequence[np.ndarray], tests: int) -> np.ndarray:
    """Output ``j`` of a node, mod p, at the flat positions ``flat``; inputs are ``[T, size]``."""
    parts = [apply_gather(g, inputs, tests, len(part))
             for part, g in gathers(op, attrs, in_shapes, out_shapes, j, flat)]
    if not parts:
        return np.zeros((tests, 0), np.int64)
    return np.concatenate(parts, axis=-1)

