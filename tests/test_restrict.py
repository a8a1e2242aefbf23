"""The corrector's restriction rules: any region of any tensor equals the whole result, sliced."""
import numpy as np
from hypothesis import given, settings, strategies as st

from tests.strategies import small_programs
from tvm_pet.ir import ProgramBuilder
from tvm_pet.verify.corrector import _Recompute
from tvm_pet.verify.interpreter import evaluate


@settings(max_examples=60, deadline=None, derandomize=True)
@given(small_programs(), st.data())
def test_region_recomputation_equals_slice_of_whole(program, data):
    name = program.outputs[0]
    shape = program.shapes[name]
    region = []
    for n in shape:
        lo = data.draw(st.integers(0, n - 1))
        step = data.draw(st.integers(1, 3))
        cnt = data.draw(st.integers(1, (n - 1 - lo) // step + 1))
        region.append((lo, lo + (cnt - 1) * step + 1, step))
    region = tuple(region)
    b = ProgramBuilder("corr", prefix="c")
    for t in program.inputs:
        b.input(t.name, t.shape)
    for k, v in program.weights.items():
        b.weight(k, v)
    names = {n: n for n in list(program.input_names) + list(program.weights)}
    patch = _Recompute(b, program, names).region(name, region)
    sliced = b.build([patch])
    rng = np.random.default_rng(0)
    x = {t.name: rng.standard_normal(t.shape) for t in program.inputs}
    whole = evaluate(program, x, np.float64)[name]
    part = evaluate(sliced, x, np.float64)[patch]
    want = whole[tuple(slice(lo, hi, s) for lo, hi, s in region)]
    np.testing.assert_allclose(part, want, rtol=1e-10, atol=1e-10)
