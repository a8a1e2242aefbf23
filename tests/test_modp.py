"""Exact arithmetic mod p against a Python-integer oracle (NumPy object arrays of exact rationals)."""
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tvm_pet.ir import Op, ProgramBuilder
from tvm_pet.ops.float_eval import FLOAT_RULES
from tvm_pet.ops.gather import GATHER_RULES
from tvm_pet.ops.modp import P, evaluate_modp, inverse, sum_mod
from tvm_pet.verify.interpreter import run


def exact_reference(program, env_ints):
    """Evaluate with Python integers / Fractions, then map each rational a/b to a * b^-1 mod p."""
    env = {k: np.asarray(v, dtype=object) for k, v in env_ints.items()}
    out = run(program, FLOAT_RULES, env)

    def to_residue(x):
        x = Fraction(x)
        return x.numerator % P * pow(x.denominator % P, P - 2, P) % P

    return {k: np.vectorize(to_residue, otypes=[object])(v).astype(np.int64) for k, v in out.items()}


def random_residues(rng, program):
    env = {t.name: rng.integers(0, P, t.shape) for t in program.inputs}
    env.update({k: rng.integers(0, P, v.shape) for k, v in program.weights.items()})
    return env


def _to_object(env):
    return {k: np.vectorize(lambda i: Fraction(int(i)), otypes=[object])(v) for k, v in env.items()}


def test_gather_table_covers_every_multilinear_op():
    assert set(GATHER_RULES) == set(Op) - {Op.OPAQUE}
    assert set(FLOAT_RULES) == set(Op)


def test_long_reduction_beyond_two_to_the_sixteen():
    """70,000-term dot products of residues near p: int64 would overflow without reduction."""
    b = ProgramBuilder()
    x = b.input("x", (2, 70_000))
    w = b.weight("w", np.zeros((70_000, 3)))
    program = b.build([b.matmul(x, w, out="y")])
    rng = np.random.default_rng(1)
    env = {"x": P - 1 - rng.integers(0, 1000, (2, 70_000)), "w": P - 1 - rng.integers(0, 1000, (70_000, 3))}
    got = evaluate_modp(program, env)["y"]
    want = exact_reference(program, _to_object(env))["y"]
    np.testing.assert_array_equal(got, want)


def test_sum_mod_chunks_exactly():
    x = np.full(3 * (1 << 10), P - 1, dtype=np.int64)
    assert int(sum_mod(x)) == (len(x) * (P - 1)) % P


def test_inverse():
    v = np.array([1, 2, 3, 9, 25, 27])
    assert np.all(inverse(v) * v % P == 1)


@st.composite
def small_programs(draw):
    """A random chain over every multi-linear operator, on small shapes."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    b = ProgramBuilder()
    n, c, h = draw(st.integers(1, 2)), draw(st.sampled_from([2, 4])), draw(st.integers(4, 6))
    x = b.input("x", (n, c, h, h))
    ops = draw(st.lists(st.sampled_from(["conv", "pool", "pad", "slice", "transpose", "rt",
                                         "concat", "split", "bn", "mul", "add", "matmul", "update"]),
                        min_size=1, max_size=4))
    cur = x
    for op in ops:
        s = b.shapes[cur]
        if len(s) != 4:
            cur = b.reshape(cur, (1, 1, 1, -1))
            s = b.shapes[cur]
        if op == "conv":
            g = draw(st.sampled_from([g for g in (1, 2) if s[1] % g == 0]))
            k = draw(st.integers(1, min(3, s[2], s[3])))
            w = b.weight(b.fresh("w"), rng.standard_normal((2 * g, s[1] // g, k, k)))
            cur = b.conv(cur, w, strides=draw(st.integers(1, 2)), pads=draw(st.integers(0, 1)),
                         groups=g)
        elif op == "pool":
            k = draw(st.integers(1, min(2, s[2], s[3])))
            cur = b.avgpool(cur, k, 1, pads=draw(st.integers(0, k - 1)),
                            count_include_pad=draw(st.booleans()))
        elif op == "pad":
            cur = b.pad(cur, (0, 0, draw(st.integers(0, 2)), 1, 0, 1, 0, draw(st.integers(0, 2))))
        elif op == "slice" and s[3] > 2:
            cur = b.slice(cur, (0, 0, 0, 1), (s[0], s[1], s[2], s[3]), (1, 1, 2, 2))
        elif op == "transpose":
            cur = b.transpose(cur, (0, 1, 3, 2))
        elif op == "rt" and s[2] % 2 == 0:
            cur = b.reshape_transpose(cur, (s[0], s[1], s[2] // 2, 2, s[3]), (0, 3, 1, 2, 4),
                                      (s[0] * 2, s[1], s[2] // 2, s[3]))
        elif op == "concat":
            cur = b.concat([cur, x] if b.shapes[x][1:] == s[1:] else [cur, cur], 0)
        elif op == "split" and s[1] >= 2:
            cur = b.split(cur, 1, (1, s[1] - 1))[draw(st.integers(0, 1))]
        elif op == "bn":
            cur = b.batchnorm(cur, b.weight(b.fresh("s"), rng.standard_normal(s[1])),
                              b.weight(b.fresh("t"), rng.standard_normal(s[1])))
        elif op == "mul":
            cur = b.mul(cur, b.weight(b.fresh("m"), rng.standard_normal((1, s[1], 1, 1))))
        elif op == "add":
            cur = b.add(cur, cur)
        elif op == "matmul":
            cur = b.matmul(cur, b.weight(b.fresh("k"), rng.standard_normal((s[3], 3))))
        elif op == "update" and s[2] > 1:
            patch = b.slice(cur, (0, 0, 0, 0), (s[0], s[1], 1, s[3]))
            cur = b.update(cur, patch, (0, 0, s[2] - 1, 0))
    return b.build([cur])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(small_programs(), st.integers(0, 2**32 - 1))
def test_modp_matches_python_integers(program, seed):
    env = random_residues(np.random.default_rng(seed), program)
    got = evaluate_modp(program, env)
    want = exact_reference(program, _to_object(env))
    for name in program.outputs:
        np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("op", [Op.CONV, Op.MATMUL])
def test_batched_tests_axis_is_independent(op):
    b = ProgramBuilder()
    if op is Op.CONV:
        x = b.input("x", (1, 3, 5, 5))
        y = b.conv(x, b.weight("w", np.ones((2, 3, 3, 3))), pads=1)
    else:
        x = b.input("x", (2, 4, 5))
        y = b.matmul(x, b.weight("w", np.ones((5, 3))))
    program = b.build([y])
    rng = np.random.default_rng(3)
    envs = [random_residues(rng, program) for _ in range(3)]
    stacked = {k: np.stack([e[k] for e in envs]) for k in envs[0]}
    together = evaluate_modp(program, stacked)[y]
    for t, env in enumerate(envs):
        np.testing.assert_array_equal(together[t], evaluate_modp(program, env)[y])
