"""Structural keys of programs: equal keys mean equal programs up to the names of their leaves.

:func:`canonical` is how the search recognises a subprogram it has already searched (repeated
layers are searched once), a mutant it has already seen, and how a measured cost model recognises
a kernel it has already timed. Weights are keyed by content (:func:`~tvm_pet.ir.node.weight_key`).

>>> from tvm_pet.ir.builder import ProgramBuilder
>>> def scaled(name):
...     b = ProgramBuilder()
...     x = b.input(name, (2, 3))
...     return b.build([b.add(x, x)])
>>> canonical(scaled("a"))[0] == canonical(scaled("b"))[0]
True
"""
from __future__ import annotations

import hashlib

from tvm_pet.ir.node import Program, weight_key
from tvm_pet.ir.ops import COMMUTATIVE


def canonical(program: Program, keys=weight_key) -> tuple[tuple, list[str]]:
    """A key of the program's structure with leaf names abstracted, and its leaves in key order.

    Two programs with equal keys differ only in the names of inputs, weights and outputs (and in
    weight values, with the same pattern of equal weights). ``keys`` gives weight content keys
    (pass a :class:`~tvm_pet.ir.node.WeightKeys` to memoize them).

    Each tensor's key is a Merkle digest (16-byte BLAKE2b) of its operator, attributes and its
    inputs' digests, so the key of a whole model is computed in linear time and stays small:
    nesting the structure itself would expand a DAG with shared branches (Inception's concats,
    residual adds) into a tree exponentially large in its depth. A digest collision (2^-128)
    is far less likely than a miss of the verifier's random tests.
    """
    producer = {o: (n, k) for n in program.nodes for k, o in enumerate(n.outputs)}
    leaves: list[str] = []
    content: dict[str, int] = {}
    memo: dict[str, bytes] = {}

    def leaf(t: str) -> bytes:
        leaves.append(t)
        if t in program.weights:
            c = content.setdefault(keys(program.weights[t]), len(content))
            return _digest("w", program.shapes[t], c)
        return _digest("x", program.shapes[t], len(leaves) - 1)

    # Depth first, inputs in order (the order the leaves are numbered in), with a stack of its
    # own: a deep model (EfficientNet's or ConvNeXt's chains) is deeper than Python's recursion.
    stack: list[tuple[str, bool]] = [(o, False) for o in reversed(program.outputs)]
    while stack:
        t, ready = stack.pop()
        if t in memo:
            continue
        if t not in producer:
            memo[t] = leaf(t)
            continue
        n, k = producer[t]
        if not ready:
            stack.append((t, True))
            stack.extend((i, False) for i in reversed(n.inputs))
            continue
        args = [memo[i] for i in n.inputs]
        if n.op in COMMUTATIVE:
            args.sort()
        memo[t] = _digest(n.op.value, n.attrs, *args, k)
    return tuple(memo[o] for o in program.outputs), leaves


def _digest(*parts) -> bytes:
    """A 16-byte digest of ``parts`` (strings, ints, shapes, Attrs and other digests)."""
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()
