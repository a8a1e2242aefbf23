"""Post-optimizations (paper 6.3): one before -> after test per rule, then random layout chains.

Every rewrite is checked twice: structurally (which nodes remain) and numerically (float64
evaluation of both programs on the same random inputs).
"""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tvm_pet.errors import VerificationError
from tvm_pet.ir import BIJECTIVE_LAYOUT, Node, Op, Program, ProgramBuilder, check_program
from tvm_pet.search import postopt
from tvm_pet.search.postopt import (POST_OPTIMIZATIONS, eliminate_inverse_layouts,
                                    fuse_layout_chains, move_layout_across_constant,
                                    move_layout_across_elementwise, post_optimize,
                                    precompute_weights)
from tvm_pet.verify.interpreter import evaluate
from tvm_pet.verify.verifier import verify


def assert_same_function(before: Program, after: Program, rtol: float = 0.0) -> None:
    """``after`` is valid, has the same signature, and computes what ``before`` computes."""
    check_program(after)
    assert after.outputs == before.outputs
    assert [(t.name, t.shape) for t in after.inputs] == [(t.name, t.shape) for t in before.inputs]
    rng = np.random.default_rng(0)
    inputs = {t.name: rng.normal(size=t.shape) for t in before.inputs}
    want, got = evaluate(before, inputs, np.float64), evaluate(after, inputs, np.float64)
    for name in before.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=rtol)


def ops(program: Program) -> list:
    return [n.attrs["kind"] if n.op is Op.OPAQUE else n.op for n in program.nodes]


def test_table_names_its_rules():
    assert list(POST_OPTIMIZATIONS) == [
        "move_layout_across_elementwise", "move_layout_across_constant",
        "eliminate_inverse_layouts", "fuse_layout_chains", "precompute_weights"]
    assert all(rule.__name__ == name for name, rule in POST_OPTIMIZATIONS.items())


# --------------------------------------------------------------------------------- move

def test_move_transpose_above_relu():
    b = ProgramBuilder()
    (r,) = b.opaque("Relu", [b.input("x", (2, 3, 4))])
    p = b.build([b.transpose(r, (2, 0, 1), out="y")])
    q = move_layout_across_elementwise(p)
    assert ops(q) == [Op.TRANSPOSE, "Relu"] and q.producers["y"].op is Op.OPAQUE
    assert q.shapes["y"] == (4, 2, 3)
    assert_same_function(p, q)


def test_move_through_several_elementwise_ops():
    b = ProgramBuilder()
    (s,) = b.opaque("Sigmoid", [b.input("x", (6, 4))])
    (g,) = b.opaque("Gelu", [s])
    p = b.build([b.reshape_transpose(g, (2, 3, 4), (1, 0, 2), (3, 8), out="y")])
    q = move_layout_across_elementwise(p)
    assert ops(q) == [Op.RESHAPE_TRANSPOSE, "Sigmoid", "Gelu"]
    assert_same_function(p, q, rtol=1e-12)


def test_no_move_when_the_opaque_output_is_shared_or_not_elementwise():
    b = ProgramBuilder()
    x = b.input("x", (2, 3))
    (r,) = b.opaque("Relu", [x])
    (s,) = b.opaque("Softmax", [x], params={"axis": 1})
    p = b.build([b.transpose(r, (1, 0)), r, b.transpose(s, (1, 0))])
    assert move_layout_across_elementwise(p) is p


def test_move_space_to_batch_above_a_per_channel_bias_keeps_it_per_channel():
    rng = np.random.default_rng(3)
    b = ProgramBuilder()
    x = b.input("x", (1, 5, 4, 6))
    bias = b.weight("bias", rng.normal(size=(1, 5, 1, 1)))
    y = b.add(x, bias)
    # space-to-batch by parity: [1,5,4,6] -> [4,5,2,3]
    p = b.build([b.reshape_transpose(y, (1, 5, 2, 2, 3, 2), (3, 5, 0, 1, 2, 4), (4, 5, 2, 3),
                                     out="z")])
    q = move_layout_across_constant(p)
    assert ops(q) == [Op.RESHAPE_TRANSPOSE, Op.ADD] and q.producers["z"].op is Op.ADD
    (w,) = [i for i in q.producers["z"].inputs if i in q.weights]
    assert q.weights[w].shape == (1, 5, 1, 1) and "bias" not in q.weights
    assert_same_function(p, q)


def test_move_above_a_scale_that_varies_along_the_moved_axes():
    rng = np.random.default_rng(4)
    b = ProgramBuilder()
    x = b.input("x", (2, 3, 4))
    y = b.mul(b.weight("s", rng.normal(size=(3, 1))), x)
    p = b.build([b.transpose(y, (2, 0, 1), out="z")])
    q = move_layout_across_constant(p)
    assert ops(q) == [Op.TRANSPOSE, Op.MUL]
    (w,) = [i for i in q.producers["z"].inputs if i in q.weights]
    assert q.weights[w].shape == (1, 1, 3)
    assert_same_function(p, q)


def test_no_move_across_a_constant_when_shared_or_broadcasting_x():
    b = ProgramBuilder()
    x = b.input("x", (1, 4))
    y = b.add(x, b.weight("w", np.ones((3, 4))))          # x broadcasts into w's shape
    p = b.build([b.transpose(y, (1, 0))])
    assert move_layout_across_constant(p) is p
    b = ProgramBuilder()
    x = b.input("x", (3, 4))
    y = b.add(x, b.weight("w", np.ones((1, 4))))
    p = b.build([b.transpose(y, (1, 0)), y])               # y is read twice
    assert move_layout_across_constant(p) is p


# --------------------------------------------------------------------------------- fuse

def test_fuse_reshape_reshape_into_reshape():
    b = ProgramBuilder()
    x = b.input("x", (2, 3, 4))
    p = b.build([b.reshape(b.reshape(x, (6, 4)), (3, 8), out="y")])
    q = fuse_layout_chains(p)
    assert ops(q) == [Op.RESHAPE] and q.nodes[0].attrs["shape"] == (3, 8)
    assert_same_function(p, q)


def test_fuse_transpose_transpose_into_transpose():
    b = ProgramBuilder()
    x = b.input("x", (2, 3, 4))
    p = b.build([b.transpose(b.transpose(x, (1, 0, 2)), (2, 0, 1), out="y")])
    q = fuse_layout_chains(p)
    assert ops(q) == [Op.TRANSPOSE] and q.nodes[0].attrs["perm"] == (2, 1, 0)
    assert_same_function(p, q)


def test_fuse_transpose_reshape_into_reshape_transpose():
    b = ProgramBuilder()
    x = b.input("x", (2, 3, 4))
    p = b.build([b.reshape(b.transpose(x, (0, 2, 1)), (2, 12), out="y")])
    q = fuse_layout_chains(p)
    assert ops(q) == [Op.RESHAPE_TRANSPOSE]
    assert dict(q.nodes[0].attrs) == {"split_shape": (2, 3, 4), "perm": (0, 2, 1),
                                      "shape": (2, 12)}
    assert_same_function(p, q)


def test_fuse_leaves_inexpressible_composites_and_shared_tensors():
    b = ProgramBuilder()
    x = b.input("x", (6,))
    twice = b.reshape_transpose(b.reshape_transpose(x, (2, 3), (1, 0), (6,)), (2, 3), (1, 0), (6,))
    t = b.transpose(b.input("z", (2, 3)), (1, 0))
    p = b.build([twice, t, b.reshape(t, (6,))])
    assert fuse_layout_chains(p) is p


# --------------------------------------------------------------------------------- eliminate

def test_eliminate_transpose_and_its_inverse_rewires_consumers():
    b = ProgramBuilder()
    x = b.input("x", (2, 3, 4))
    back = b.transpose(b.transpose(x, (2, 0, 1)), (1, 2, 0))
    (r,) = b.opaque("Relu", [back])
    p = b.build([b.add(r, x)])
    q = eliminate_inverse_layouts(p)
    assert ops(q) == ["Relu", Op.ADD] and q.nodes[0].inputs == (x,)
    assert_same_function(p, q)


def test_eliminate_reshape_transpose_round_trip_and_identity_reshape():
    b = ProgramBuilder()
    x = b.input("x", (4, 6))
    there = b.reshape_transpose(x, (2, 2, 6), (1, 0, 2), (2, 12))
    back = b.reshape_transpose(there, (2, 2, 6), (1, 0, 2), (4, 6))
    same = b.reshape(b.input("z", (3, 5)), (3, 5))
    p = b.build([b.add(back, x), b.add(same, same)])
    q = eliminate_inverse_layouts(p)
    assert ops(q) == [Op.ADD, Op.ADD]
    assert_same_function(p, q)


def test_eliminate_keeps_the_name_of_a_program_output():
    b = ProgramBuilder()
    x = b.input("x", (2, 3))
    p = b.build([b.reshape(b.reshape(x, (3, 2)), (2, 3), out="y")])
    q = eliminate_inverse_layouts(p)
    assert ops(q) == [Op.RESHAPE] and q.nodes[0].inputs == (x,) and q.outputs == ("y",)
    assert eliminate_inverse_layouts(q) is q
    assert_same_function(p, q)


def test_eliminate_asks_the_verifier(monkeypatch):
    class Rejects:
        equivalent = False
    monkeypatch.setattr(postopt, "_accepted", {})  # no fact accepted before
    monkeypatch.setattr(postopt, "verify", lambda a, b: Rejects())
    b = ProgramBuilder()
    x = b.input("x", (2, 3))
    p = b.build([b.add(b.transpose(b.transpose(x, (1, 0)), (1, 0)), x)])
    with pytest.raises(VerificationError, match="verifier rejects"):
        eliminate_inverse_layouts(p)


def test_a_layout_fact_accepted_once_is_the_same_fact_under_other_names(monkeypatch):
    monkeypatch.setattr(postopt, "_accepted", {})
    calls = []
    monkeypatch.setattr(postopt, "verify", lambda a, b: calls.append(1) or verify(a, b))

    def chain(a, m, out):  # two transposes that undo each other
        return [Node(Op.TRANSPOSE, (a,), (m,), {"perm": (2, 0, 1)}),
                Node(Op.TRANSPOSE, (m,), (out,), {"perm": (1, 2, 0)})]

    def identity(a, out, shape):
        return [Node(Op.RESHAPE, (a,), (out,), {"shape": shape})]

    shape = (2, 3, 4)
    postopt._check_with_verifier(chain("a", "m", "b"), identity("a", "b", shape), "a", shape, "b")
    postopt._check_with_verifier(chain("x", "t", "y"), identity("x", "y", shape), "x", shape, "y")
    assert len(calls) == 1  # the second is the first fact under other names
    # the verdict kept is the verifier's: a fresh check of the same fact agrees
    postopt._verify_layout_fact(chain("x", "t", "y"), identity("x", "y", shape), "x", shape, "y")
    # the same chains on another shape are another fact, verified afresh
    other = (2, 3, 5)
    postopt._check_with_verifier(chain("a", "m", "b"), identity("a", "b", other), "a", other, "b")
    assert len(calls) == 3
    # a wrong fact is rejected, and rejected again: it is never kept
    square = (2, 3, 3)
    swap = [Node(Op.TRANSPOSE, ("a",), ("b",), {"perm": (0, 2, 1)})]
    for _ in range(2):
        with pytest.raises(VerificationError, match="verifier rejects"):
            postopt._check_with_verifier(swap, identity("a", "b", square), "a", square, "b")
    assert len(calls) == 5


# --------------------------------------------------------------------------------- precompute

def test_precompute_folds_weight_chains_and_fills():
    b = ProgramBuilder()
    x = b.input("x", (3, 4))
    w = b.transpose(b.weight("w", np.arange(12.0).reshape(4, 3)), (1, 0))
    bias = b.add(b.weight("c", np.ones((3, 4))), b.fill((3, 4), 0.5))
    p = b.build([b.add(b.mul(x, w), bias)])
    q = precompute_weights(p)
    assert ops(q) == [Op.MUL, Op.ADD]
    assert set(q.weights) == {w, bias}          # folded weights take the nodes' names
    assert_same_function(p, q, rtol=1e-6)
    assert precompute_weights(q) is q


def test_precompute_keeps_a_node_defining_a_program_output():
    b = ProgramBuilder()
    x = b.input("x", (2, 2))
    w = b.weight("w", np.eye(2))
    p = b.build([b.add(x, w), b.transpose(w, (1, 0), out="wt")])
    assert precompute_weights(p) is p


# --------------------------------------------------------------------------------- pipeline

def test_post_optimize_cancels_layouts_between_two_matmuls():
    rng = np.random.default_rng(1)
    b = ProgramBuilder()
    x = b.input("x", (4, 6))
    h = b.matmul(x, b.weight("w1", rng.normal(size=(6, 8))))
    (r,) = b.opaque("Relu", [b.reshape_transpose(h, (4, 2, 4), (1, 0, 2), (2, 16))])
    h2 = b.reshape_transpose(r, (2, 4, 4), (1, 0, 2), (4, 8))
    w2 = b.reshape(b.transpose(b.weight("w2", rng.normal(size=(5, 8))), (1, 0)), (8, 5))
    p = b.build([b.matmul(h2, w2, out="y")])
    q, applied = post_optimize(p)
    assert ops(q) == [Op.MATMUL, "Relu", Op.MATMUL]
    assert applied == ["move_layout_across_elementwise", "eliminate_inverse_layouts",
                       "precompute_weights"]
    assert_same_function(p, q, rtol=1e-6)
    assert post_optimize(q) == (q, [])


def test_post_optimize_joins_space_to_batch_convs_across_bias_and_relu():
    """Two dilated convs, each rewritten as space-to-batch -> conv -> batch-to-space, with a
    bias and a ReLU between them: the layouts between the two convs vanish."""
    rng = np.random.default_rng(5)
    b = ProgramBuilder()
    x = b.input("x", (1, 3, 4, 4))
    s2b = dict(split_shape=(1, 3, 2, 2, 2, 2), perm=(3, 5, 0, 1, 2, 4), shape=(4, 3, 2, 2))
    b2s = dict(split_shape=(2, 2, 3, 2, 2), perm=(2, 3, 0, 4, 1), shape=(1, 3, 4, 4))
    h = x
    for layer in range(2):
        h = b.reshape_transpose(h, **s2b)
        h = b.conv(h, b.weight(f"w{layer}", rng.normal(size=(3, 3, 3, 3))), pads=1)
        h = b.reshape_transpose(h, **b2s)
        h = b.add(h, b.weight(f"b{layer}", rng.normal(size=(1, 3, 1, 1))))
        (h,) = b.opaque("Relu", [h])
    p = b.build([h])
    q, applied = post_optimize(p)
    assert ops(q) == [Op.RESHAPE_TRANSPOSE, Op.CONV, Op.ADD, "Relu", Op.CONV,
                      Op.RESHAPE_TRANSPOSE, Op.ADD, "Relu"]
    assert "move_layout_across_constant" in applied
    assert_same_function(p, q, rtol=1e-12)


# --------------------------------------------------------------------------------- properties

def _primes(n: int) -> list[int]:
    out, d = [], 2
    while n > 1:
        while n % d == 0:
            out.append(d)
            n //= d
        d += 1
    return out


@st.composite
def shapes_of(draw, n: int) -> tuple[int, ...]:
    """A random shape with ``n`` elements, sometimes with a unit axis."""
    dims, current = [], 1
    for p in draw(st.permutations(_primes(n))):
        if current > 1 and draw(st.booleans()):
            dims.append(current)
            current = 1
        current *= p
    dims.append(current)
    if draw(st.booleans()):
        dims.insert(draw(st.integers(0, len(dims))), 1)
    return tuple(dims)


@st.composite
def layout_step(draw, shape: tuple[int, ...]):
    """Random layout attributes for ``shape`` and their inverse, as (op, attrs, inverse)."""
    n = math.prod(shape)
    kind = draw(st.sampled_from([Op.RESHAPE, Op.TRANSPOSE, Op.RESHAPE_TRANSPOSE]))
    if kind is Op.RESHAPE:
        new = draw(shapes_of(n))
        return kind, {"shape": new}, {"shape": shape}
    if kind is Op.TRANSPOSE:
        perm = tuple(draw(st.permutations(range(len(shape)))))
        return kind, {"perm": perm}, {"perm": tuple(int(a) for a in np.argsort(perm))}
    split = draw(shapes_of(n))
    perm = tuple(draw(st.permutations(range(len(split)))))
    moved = tuple(split[p] for p in perm)
    return kind, {"split_shape": split, "perm": perm, "shape": draw(shapes_of(n))}, \
        {"split_shape": moved, "perm": tuple(int(a) for a in np.argsort(perm)), "shape": shape}


SIZES = st.sampled_from([6, 12, 24, 36, 48, 60, 72, 120])
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.data(), SIZES)
def test_random_layout_chains_keep_their_value(data, n):
    b = ProgramBuilder()
    tensors = [b.input("x", data.draw(shapes_of(n)))]
    for _ in range(data.draw(st.integers(1, 6))):
        if data.draw(st.integers(0, 3)) == 0:
            tensors += b.opaque("Relu", [tensors[-1]])
        else:
            op, attrs, _ = data.draw(layout_step(b.shapes[tensors[-1]]))
            tensors += b.node(op, [tensors[-1]], attrs)
    extra = data.draw(st.sampled_from(tensors[1:-1] or [tensors[-1]]))
    p = b.build(list(dict.fromkeys([tensors[-1], extra])))
    q, _ = post_optimize(p)
    assert_same_function(p, q)
    assert len(q.nodes) <= len(p.nodes)


@FAST
@given(st.data(), SIZES)
def test_inverse_layout_pairs_vanish(data, n):
    b = ProgramBuilder()
    current = b.input("x", data.draw(shapes_of(n)))
    inverses, relus = [], 0

    def maybe_relu(t):
        nonlocal relus
        if data.draw(st.booleans()):
            relus += 1
            return b.opaque("Relu", [t])[0]
        return t

    for _ in range(data.draw(st.integers(1, 3))):
        op, attrs, inverse = data.draw(layout_step(b.shapes[current]))
        current = maybe_relu(b.node(op, [current], attrs)[0])
        inverses.append((op, inverse))
    for op, inverse in reversed(inverses):
        current = maybe_relu(b.node(op, [current], inverse)[0])
    p = b.build([current])
    q, _ = post_optimize(p)
    assert_same_function(p, q)
    if relus:
        assert ops(q) == ["Relu"] * relus
    else:
        assert ops(q) == [Op.RESHAPE] and q.nodes[0].inputs == ("x",)
    assert not any(n.op in BIJECTIVE_LAYOUT and n.inputs[0] != "x" for n in q.nodes)
