"""The verifier against brute force, and the corrector against exact and float evaluation.

For every pair (the paper's cases and random mutants):

- the verifier's boxes are **sound** (cover every position brute force finds differing) and
  **tight** (each holds a differing position), and its `equivalent` flags agree;
- the corrected candidate equals the original exactly in Z_p (shared random residues for inputs
  and for weights by content), agrees with it in float64 (random and actual weights) and float32,
  and is verified equivalent; so does the correction with fusion, in Z_p;
- if ``tvm_pet.onnx`` is there, the corrected program survives an ONNX export and import, and runs
  in onnxruntime, with the original's float results.

The default run draws 300 general mutants, 150 convolution mutants focused on the paper's
regroupings, 60 random programs and 25 ONNX round trips; ``-m slow`` runs ten times as many.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tests.strategies import mutant_pairs, programs
from tvm_pet import example_pairs
from tvm_pet.ir import ProgramBuilder, check_program
from tvm_pet.testing.bruteforce import compare_with_report, differing_masks
from tvm_pet.testing.modp_oracle import outputs_modp
from tvm_pet.verify.corrector import correct
from tvm_pet.verify.interpreter import evaluate
from tvm_pet.verify.verifier import verify

#: The paper's regroupings of convolutions, and the almost-right paddings and strides.
CONV_FOCUS = ("conv_side_by_side", "conv_grid", "conv_space_to_batch", "conv_interleave_batch",
              "conv_edge_replicated", "conv_pad_shift", "stride_as_slice", "conv_explicit_pad")


#: Long runs are skipped unless selected with ``-m slow`` (pytest evaluates the string).
only_when_selected = pytest.mark.skipif("'slow' not in config.getoption('markexpr')",
                                        reason="long property run; select it with -m slow")


def _settings(n: int):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def _listing(original, candidate) -> str:
    return f"\n--- original\n{original.describe()}\n--- candidate\n{candidate.describe()}"


def assert_same_signature(original, other):
    assert other.inputs == original.inputs
    assert [(o, original.shapes[o]) for o in original.outputs] == \
        [(o, other.shapes[o]) for o in other.outputs]


def assert_equal_modp(original, other, seed=0):
    """Exact equality in Z_p on shared random residues (inputs by name, weights by content)."""
    a, b = outputs_modp(original, other, seed)
    for o in original.outputs:
        assert a[o].shape == original.shapes[o]
        np.testing.assert_array_equal(a[o], b[o], err_msg=f"output {o} differs mod p")


def assert_close_float(original, other, seed=0):
    """Float64 (actual weights) to roundoff, float32 to a tolerance scaled by the magnitudes."""
    rng = np.random.default_rng(seed)
    x = {t.name: rng.standard_normal(t.shape) for t in original.inputs}
    for dtype, rtol in ((np.float64, 1e-9), (np.float32, 1e-4)):
        a, b = evaluate(original, x, dtype), evaluate(other, x, dtype)
        for o in original.outputs:
            scale = 1.0 + np.abs(a[o]).max(initial=0.0)
            np.testing.assert_allclose(b[o], a[o], rtol=rtol, atol=rtol * scale,
                                       err_msg=f"output {o} ({np.dtype(dtype).name})")


def check_pair(original, candidate):
    """Verifier vs brute force; corrector exact. Returns the result and the corrected program."""
    result = verify(original, candidate)
    report = compare_with_report(differing_masks(original, candidate), result)
    assert report.ok, report.explain() + _listing(original, candidate)
    corrected = check_program(correct(original, candidate, result))
    assert_same_signature(original, corrected)
    assert_equal_modp(original, corrected)
    assert_close_float(original, corrected)
    masks = differing_masks(original, corrected, seed=1)
    assert not any(m.any() for m in masks.values()), "corrected program differs in float64"
    assert verify(original, corrected, seed=1).equivalent
    fused = check_program(correct(original, candidate, result, fuse=True))
    assert_same_signature(original, fused)
    assert_equal_modp(original, fused, seed=3)
    return result, report, corrected


def check_onnx_round_trip(original, corrected):
    onnx_api = pytest.importorskip("tvm_pet.onnx")
    imported = onnx_api.import_model(onnx_api.export_model(corrected))
    assert_same_signature(original, imported)
    assert_close_float(original, imported)
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(onnx_api.export_model(corrected).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    x = {t.name: np.random.default_rng(2).standard_normal(t.shape).astype(np.float32)
         for t in original.inputs}
    expected = evaluate(original, x, np.float64)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, x)))
    for o in original.outputs:
        scale = 1.0 + np.abs(expected[o]).max(initial=0.0)
        np.testing.assert_allclose(got[o], expected[o], rtol=1e-4, atol=1e-4 * scale)


# ----------------------------------------------------------------------------- regressions

def test_unread_intermediate_tensor():
    b = ProgramBuilder()
    x = b.input("x", (1, 2))
    t = b.concat([x, b.mul(x, x)], axis=1)                 # x*x is never read by y
    p = b.build([b.slice(t, (0, 0), (1, 2), out="y")])
    assert verify(p, p).equivalent


def test_reshape_dropping_a_unit_axis():
    b = ProgramBuilder()
    x = b.input("x", (2, 1))
    p = b.build([b.reshape(x, (2,), out="y")])
    assert verify(p, p).equivalent


# ----------------------------------------------------------------------------- the paper's cases

@pytest.mark.parametrize("name", sorted(example_pairs.ALL_CASES))
def test_cases_verified_as_brute_force_says_and_corrected(name):
    original, candidate = example_pairs.ALL_CASES[name]()
    result, report, corrected = check_pair(original, candidate)
    if name in example_pairs.EQUIVALENT_CASES:
        assert result.equivalent and report.differing == 0
    else:
        assert not result.equivalent and report.differing > 0
        assert corrected is not candidate


def test_figure1_boxes_are_the_seams():
    """Even batch items differ on the last k//2 columns, odd ones on the first: two strided boxes
    (or more, split further) that cover exactly the seams."""
    original, candidate = example_pairs.figure1_pair(batch=4, c=2, h=5, w=8, o=3, k=5)
    (diff,) = verify(original, candidate).outputs
    covered = np.zeros(diff.shape, bool)
    for box in diff.boxes:
        covered[box.index()] = True
    expected = np.zeros(diff.shape, bool)
    expected[0::2, ..., 6:] = True
    expected[1::2, ..., :2] = True
    np.testing.assert_array_equal(covered, expected)


@pytest.mark.parametrize("name", sorted(example_pairs.WRONG_CASES))
def test_wrong_candidates_are_detected(name):
    original, candidate = example_pairs.WRONG_CASES[name]()
    for seed in range(3):
        assert not verify(original, candidate, seed=seed).equivalent


@pytest.mark.parametrize("name", ["figure1", "figure3_grid", "wrong_padding", "weight_changed"])
def test_cases_corrected_survive_onnx(name):
    original, candidate = example_pairs.ALL_CASES[name]()
    check_onnx_round_trip(original, correct(original, candidate))


# ----------------------------------------------------------------------------- random pairs

@_settings(300)
@given(mutant_pairs())
def test_random_mutants_verified_as_brute_force_says(pair):
    check_pair(*pair)


@_settings(150)
@given(mutant_pairs(max_steps=3, focus=CONV_FOCUS))
def test_conv_regrouping_mutants_verified_as_brute_force_says(pair):
    check_pair(*pair)


@_settings(60)
@given(programs())
def test_random_programs_equal_themselves(program):
    result = verify(program, program)
    assert result.equivalent and all(not o.boxes for o in result.outputs)
    assert correct(program, program, result) is program


@_settings(25)
@given(mutant_pairs())
def test_random_corrections_survive_onnx(pair):
    original, candidate = pair
    check_onnx_round_trip(original, correct(original, candidate))


@pytest.mark.slow
@only_when_selected
@_settings(2000)
@given(mutant_pairs())
def test_many_random_mutants(pair):
    check_pair(*pair)


@pytest.mark.slow
@only_when_selected
@_settings(800)
@given(mutant_pairs(max_steps=4, focus=CONV_FOCUS))
def test_many_conv_regrouping_mutants(pair):
    check_pair(*pair)


@pytest.mark.parametrize("spatial", [(8,), (4, 5, 6)])
def test_side_by_side_seam_in_1d_and_3d_convolutions(spatial):
    """Figure 1's mutant along the first spatial axis of a 1-D and a 3-D convolution."""
    rng = np.random.default_rng(5)
    nsp, c, o, k = len(spatial), 2, 3, 3
    weight = rng.standard_normal((o, c) + (k,) * nsp)
    b0 = ProgramBuilder("original")
    x = b0.input("x", (2, c) + spatial)
    original = b0.build([b0.conv(x, b0.weight("w", weight), pads=1, out="y")])
    b1 = ProgramBuilder("candidate")
    x = b1.input("x", (2, c) + spatial)
    side = b1.reshape(b1.transpose(b1.reshape(x, (1, 2, c) + spatial),
                                   (0, 2, 1) + tuple(range(3, 3 + nsp))),
                      (1, c, 2 * spatial[0]) + spatial[1:])
    y = b1.conv(side, b1.weight("w2", weight), pads=1)
    back = b1.transpose(b1.reshape(y, (1, o, 2) + spatial), (0, 2, 1) + tuple(range(3, 3 + nsp)))
    candidate = b1.build([b1.reshape(back, (2, o) + spatial, out="y")])
    result, report, corrected = check_pair(original, candidate)
    assert not result.equivalent and report.sound and report.tight
