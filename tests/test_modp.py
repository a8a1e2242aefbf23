"""Exact arithmetic mod p against a Python-integer oracle (NumPy object arrays of exact rationals)."""
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.strategies import small_programs
from tvm_pet.ir import Op, ProgramBuilder
from tvm_pet.ops.float_eval import FLOAT_RULES
from tvm_pet.ops.gather import GATHER_RULES
from tvm_pet.ops.modp import P, inverse, sum_mod
from tvm_pet.testing.modp_oracle import evaluate_modp
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
