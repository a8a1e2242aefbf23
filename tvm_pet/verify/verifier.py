"""PET's verifier (paper 5.1-5.2): where does a candidate program differ from the original?

For each output, the boxes of both programs (per-axis label classes, :mod:`tvm_pet.ops.labels`)
are intersected. Inside one intersected box every index map of both programs is affine and the
summation domain is fixed, so by Theorem 1 the two programs agree on the whole box iff they agree
at ``v0`` and at ``v0 + step_i * e_i`` for every axis ``i``. Each such position is compared with
``t`` random tests over Z_p, p = 2^31 - 1 (Theorem 2): all runtime inputs and weights are random
residues, and a missed difference has probability at most ``(n / p) ** t`` for polynomials of
degree ``n``. Only the elements those positions need are computed (:func:`evaluate_points`).

Weights are variables, identified by content: two weights are the same variable iff they have
equal shapes and values (so a candidate with one weight element changed differs wherever that
weight is read).

>>> import numpy as np
>>> from tvm_pet.ir import ProgramBuilder
>>> b = ProgramBuilder(); x = b.input("x", (4, 6)); w = b.weight("w", np.ones((6, 5)))
>>> p0 = b.build([b.matmul(x, w, out="y")])
>>> verify(p0, p0).equivalent
True
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from tvm_pet.errors import UnsupportedOperator, VerificationError
from tvm_pet.ir.node import Program, Shape, weight_key
from tvm_pet.ops.gather import GATHER_RULES, ravel
from tvm_pet.ops.labels import LABEL_RULES, combine, trivial
from tvm_pet.ops.modp import P, apply_gather, gathers
from tvm_pet.verify.boxes import Box, axis_progressions, merge_boxes
from tvm_pet.verify.interpreter import run
from tvm_pet.verify.limits import check_tensor_sizes

#: Default number of random tests per position (Theorem 2).
DEFAULT_TESTS = 4
#: Refuse to test more boxes than this for one output (the candidate is then reported unverifiable).
MAX_BOXES = 200_000


def miss_probability(degree: int, tests: int = DEFAULT_TESTS) -> float:
    """The Schwartz-Zippel bound ``(degree / p) ** tests`` on missing a difference.

    Where the two programs differ, their difference at a position is a non-zero polynomial of
    total degree at most ``degree`` in the inputs and weights. One random test over Z_p
    (p = 2^31 - 1) evaluates it to zero with probability at most ``degree / p``; the ``tests``
    independent tests all do with probability at most ``(degree / p) ** tests``. One such
    position in a differing box suffices to report the box, so this also bounds the chance that
    a non-equivalent candidate is declared equivalent.

    With the default ``tests = 4``: about 4.7e-38 for degree 1, 7.5e-37 for degree 2 (a
    convolution or matmul of an input by a weight), 1.2e-35 for degree 4 and 1.9e-34 for
    degree 8.

    Args:
        degree: the largest polynomial degree of an output (:func:`degree_of`); 0 for
            constants, which differ at every test when they differ at all.
        tests: random tests per position.

    Returns:
        The bound, a float in [0, 1].

    >>> miss_probability(2, 1) == 2 / (2**31 - 1)
    True
    >>> miss_probability(2) < 1e-36
    True
    """
    if degree < 0 or tests < 1:
        raise ValueError(f"miss_probability needs degree >= 0 and tests >= 1, got "
                         f"degree={degree}, tests={tests}")
    return float(min(1.0, degree / P) ** tests)


@dataclasses.dataclass(frozen=True)
class OutputDiff:
    """The verdict for one output: the boxes where the candidate differs from the original."""

    name: str
    shape: Shape
    equivalent: bool
    boxes: tuple[Box, ...]
    tested_boxes: int = 0

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "equivalent": self.equivalent,
                "differing_boxes": [b.to_json() for b in self.boxes],
                "tested_boxes": self.tested_boxes}


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    """The verifier's answer for a pair of programs."""

    outputs: tuple[OutputDiff, ...]
    tests: int
    degree: int
    positions: int

    @property
    def equivalent(self) -> bool:
        return all(o.equivalent for o in self.outputs)

    @property
    def prime(self) -> int:
        return P

    @property
    def error_bound(self) -> float:
        """Chance that some difference was missed, bounded by (degree / p) ** tests."""
        return miss_probability(self.degree, self.tests)

    @property
    def differing_boxes(self) -> int:
        return sum(len(o.boxes) for o in self.outputs)

    def output(self, name: str) -> OutputDiff:
        return next(o for o in self.outputs if o.name == name)

    def to_json(self) -> dict:
        """The ``tvm-pet verify --json`` object."""
        return {"equivalent": self.equivalent, "prime": P, "tests": self.tests,
                "error_bound": self.error_bound, "degree": self.degree,
                "positions_checked": self.positions,
                "outputs": [o.to_json() for o in self.outputs]}


def check_comparable(original: Program, candidate: Program) -> None:
    """Raise :class:`VerificationError` unless both programs have the same signature."""
    a = {t.name: t.shape for t in original.inputs}
    b = {t.name: t.shape for t in candidate.inputs}
    if a != b:
        raise VerificationError(f"inputs differ: original has {_sig(a)}, candidate has {_sig(b)}")
    oa = {o: original.shapes[o] for o in original.outputs}
    ob = {o: candidate.shapes[o] for o in candidate.outputs}
    if oa != ob:
        raise VerificationError(f"outputs differ: original has {_sig(oa)}, candidate has {_sig(ob)}")
    for p, which in ((original, "original"), (candidate, "candidate")):
        bad = next((n for n in p.nodes if n.op not in GATHER_RULES), None)
        if bad is not None:
            raise UnsupportedOperator(
                f"the {which} program is not multi-linear: `{bad.describe()}` uses "
                f"{bad.attrs.get('kind', bad.op.value)!r}; the verifier compares multi-linear "
                f"programs only (split the model at non-linear operators first)")


def _sig(m: Mapping[str, Shape]) -> str:
    return ", ".join(f"{k}{list(v)}" for k, v in sorted(m.items())) or "nothing"


def labels_of(program: Program) -> dict[str, list[np.ndarray]]:
    """Per-axis box labels of every output of a multi-linear program."""
    env = {t.name: trivial(t.shape) for t in program.inputs}
    env.update({k: trivial(v.shape) for k, v in program.weights.items()})
    return run(program, LABEL_RULES, env)


def degree_of(program: Program) -> int:
    """The largest polynomial degree of any output, in the inputs and weights."""
    deg = {name: 1 for name in list(program.input_names) + list(program.weights)}
    shapes = program.shapes
    for node in program.nodes:
        ins = [shapes[i] for i in node.inputs]
        outs = [shapes[o] for o in node.outputs]
        for j, name in enumerate(node.outputs):
            g = GATHER_RULES[node.op](node.attrs, ins, outs, j, np.zeros((1, len(outs[j])), np.int64))
            deg[name] = max(sum(deg[node.inputs[i]] for i, _ in term) for term in g.terms)
    return max(deg[o] for o in program.outputs)


#: The most draws :func:`random_env` keeps (a generator verifies every candidate of one
#: subprogram on the same inputs and weights, so the same draws recur).
RANDOM_ENV_CACHE = 4
#: The most residues one kept draw holds (32 MB of int64): a larger one is drawn afresh each
#: time, so that the kept draws never hold large tensors' residues alive.
RANDOM_ENV_KEPT_ELEMENTS = 1 << 22
_drawn: dict[tuple, dict] = {}


def random_env(programs: Sequence[Program], tests: int, seed: int) -> dict[str, np.ndarray]:
    """Random residues ``[tests, size]`` for every input (by name) and weight (by content).

    The residues are drawn in order, each distinct input and weight once, from one generator
    seeded with ``seed``: the same programs' leaves in the same order get the same residues.
    The last :data:`RANDOM_ENV_CACHE` draws (of at most :data:`RANDOM_ENV_KEPT_ELEMENTS`
    residues each) are kept (read-only) and reused for the same sequence of leaves, seed and
    tests: the residues are those a fresh draw would give.

    Raises:
        ShapeError: a tensor above :data:`~tvm_pet.verify.limits.MAX_TENSOR_ELEMENTS`.
    """
    for p in programs:
        check_tensor_sizes(p)
    leaves: dict[tuple, int] = {}  # (kind, name or content) -> elements, in draw order
    names: list[tuple[int, str, tuple]] = []
    for k, p in enumerate(programs):
        for t in p.inputs:
            key = ("in", t.name)
            leaves.setdefault(key, math.prod(t.shape))
            names.append((k, t.name, key))
        for name, value in p.weights.items():
            key = ("w", weight_key(value))
            leaves.setdefault(key, value.size)
            names.append((k, name, key))
    signature = (seed, tests, tuple(leaves.items()))
    by_key = _drawn.pop(signature, None)
    if by_key is None:
        rng = np.random.default_rng(seed)
        by_key = {}
        for key, size in leaves.items():
            by_key[key] = rng.integers(0, P, (tests, size), np.int64)
            by_key[key].setflags(write=False)
    if tests * sum(leaves.values()) <= RANDOM_ENV_KEPT_ELEMENTS:
        _drawn[signature] = by_key  # the most recent last
    while len(_drawn) > RANDOM_ENV_CACHE:
        del _drawn[next(iter(_drawn))]
    return {(k, name): by_key[key] for k, name, key in names}  # type: ignore[return-value]


def evaluate_points(program: Program, env: Mapping[str, np.ndarray],
                    requests: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Exact values mod p of some output positions, computing only the elements they need.

    Args:
        program: a multi-linear program.
        env: residues ``[T, size]`` for every input and weight.
        requests: flat output positions wanted, per output name.

    Returns:
        ``[T, len(positions)]`` residues per requested output.
    """
    shapes = program.shapes
    need: dict[str, np.ndarray] = {}
    for name, flat in requests.items():
        mask = need.setdefault(name, np.zeros(math.prod(shapes[name]), bool))
        mask[flat] = True
    plans = []
    for node in reversed(program.nodes):
        if not any(o in need for o in node.outputs):
            continue
        ins = [shapes[i] for i in node.inputs]
        outs = [shapes[o] for o in node.outputs]
        for j, name in enumerate(node.outputs):
            if name not in need:
                continue
            for part, g in gathers(node.op, node.attrs, ins, outs, j, np.flatnonzero(need[name])):
                for term in g.terms:
                    for i, idx in term:
                        src = node.inputs[i]
                        mask = need.setdefault(src, np.zeros(math.prod(shapes[src]), bool))
                        mask[idx[idx >= 0]] = True
                plans.append((node, j, part, g))
    tests = next(iter(env.values())).shape[0]
    values = {k: v for k, v in env.items()}
    for node, j, part, g in reversed(plans):
        # an operand none of whose elements are needed (an unread concat piece, an overwritten
        # update base) gets zeros: its gathered indices are all -1
        for name in (*node.inputs, node.outputs[j]):
            if name not in values:
                values[name] = np.zeros((tests, math.prod(shapes[name])), np.int64)
        values[node.outputs[j]][:, part] = apply_gather(g, [values[i] for i in node.inputs], tests,
                                                        len(part))
    return {name: values[name][:, flat] for name, flat in requests.items()}


def _test_positions(boxes: Sequence[Box], shape: Shape) -> tuple[np.ndarray, list[np.ndarray]]:
    """The Theorem-1 positions of every box: flat positions (unique) and, per box, their indices."""
    points, owners = [], []
    for k, box in enumerate(boxes):
        v0 = np.asarray(box.lo, np.int64)
        pts = [v0]
        for d, c in enumerate(box.counts):
            if c > 1:
                v = v0.copy()
                v[d] += box.step[d]
                pts.append(v)
        points.append(np.stack(pts))
        owners.append(np.full(len(pts), k))
    flat = ravel(np.concatenate(points), shape)
    uniq, where = np.unique(flat, return_inverse=True)
    return uniq, np.split(where, np.cumsum([len(o) for o in owners])[:-1])


def verify(original: Program, candidate: Program, tests: int = DEFAULT_TESTS,
           seed: int = 0) -> VerifyResult:
    """Find where ``candidate`` differs from ``original``.

    Args:
        original: the reference program P0 (multi-linear).
        candidate: the program P1 to check; same input and output names and shapes.
        tests: random tests per position (Theorem 2); the miss probability is (n/p)^tests.
        seed: seed of the random residues.

    Returns:
        A :class:`VerifyResult`: per output, whether it is equivalent and the boxes that differ.

    Raises:
        VerificationError: the programs' inputs or outputs differ.
        UnsupportedOperator: a program has a non-linear (opaque) operator.
    """
    if tests < 1:
        raise VerificationError(f"tests must be at least 1, got {tests}")
    check_comparable(original, candidate)
    la, lb = labels_of(original), labels_of(candidate)
    envs = random_env([original, candidate], tests, seed)
    env_a = {n: envs[(0, n)] for n in list(original.input_names) + list(original.weights)}
    env_b = {n: envs[(1, n)] for n in list(candidate.input_names) + list(candidate.weights)}
    boxes: dict[str, list[Box]] = {}
    requests: dict[str, np.ndarray] = {}
    owners: dict[str, list[np.ndarray]] = {}
    for name in original.outputs:
        shape = original.shapes[name]
        per_axis = [axis_progressions(combine(a, b)) for a, b in zip(la[name], lb[name])]
        count = math.prod(len(p) for p in per_axis)
        if count > MAX_BOXES:
            raise VerificationError(f"output {name!r} splits into {count} boxes (limit "
                                    f"{MAX_BOXES}); the candidate is too irregular to verify")
        boxes[name] = [Box.from_progressions(aps) for aps in itertools.product(*per_axis)]
        requests[name], owners[name] = _test_positions(boxes[name], shape)
    va = evaluate_points(original, env_a, requests)
    vb = evaluate_points(candidate, env_b, requests)
    outputs = []
    for name in original.outputs:
        differs = np.any(va[name] != vb[name], axis=0)
        bad = [box for box, idx in zip(boxes[name], owners[name]) if differs[idx].any()]
        outputs.append(OutputDiff(name, original.shapes[name], not bad, tuple(merge_boxes(bad)),
                                  len(boxes[name])))
    degree = max(degree_of(original), degree_of(candidate))
    return VerifyResult(tuple(outputs), tests, degree, sum(len(r) for r in requests.values()))
