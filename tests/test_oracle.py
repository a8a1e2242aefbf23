"""The brute-force oracle, the example pairs and the strategies, checked without the verifier.

Every expected mask here is derived by hand from the construction of the pair (the seam of
Figure 1, the parity grid of Figure 3, the edge of a padding), not read back from the code.
"""
import math
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tests.strategies import mutant_pairs, programs
from tvm_pet import example_pairs
from tvm_pet.errors import VerificationError
from tvm_pet.ir import ProgramBuilder, check_program, weight_key
from tvm_pet.verify.boxes import Box
from tvm_pet.testing.bruteforce import (compare_with_report, differing_masks, shared_values)
from tvm_pet.verify.interpreter import evaluate

QUICK = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _renamed_weights(program):
    return program.replace(weights={f"{k}_copy": v for k, v in program.weights.items()},
                           nodes=tuple(n.__class__(n.op, tuple(f"{i}_copy" if i in program.weights
                                                               else i for i in n.inputs),
                                                   n.outputs, n.attrs) for n in program.nodes))


# ----------------------------------------------------------------------------- shared variables

def test_shared_values_share_by_input_name_and_weight_content():
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    b0 = ProgramBuilder()
    x = b0.input("x", (4, 2))
    p0 = b0.build([b0.matmul(b0.matmul(x, b0.weight("a", w)), b0.weight("b", np.ones((3, 1))))])
    b1 = ProgramBuilder()
    x = b1.input("x", (4, 2))
    w_changed = w.copy()
    w_changed[0, 0] = 7
    p1 = b1.build([b1.add(b1.matmul(x, b1.weight("renamed", w)),
                          b1.matmul(x, b1.weight("other", w_changed)))])
    rng = np.random.default_rng(0)
    inputs, (w0, w1) = shared_values([p0, p1], lambda s: rng.standard_normal(s))
    assert set(inputs) == {"x"} and inputs["x"].shape == (4, 2)
    assert w0["a"] is w1["renamed"]                       # same content, other name
    assert not np.array_equal(w1["other"], w1["renamed"])  # one element differs: new variable
    assert w0["b"].shape == (3, 1)


def test_masks_are_empty_for_a_program_and_its_renamed_copy():
    original, _ = example_pairs.figure1_pair()
    copy = _renamed_weights(original)
    assert set(copy.weights) != set(original.weights)
    masks = differing_masks(original, copy)
    assert list(masks) == ["y"] and masks["y"].shape == original.shapes["y"]
    assert not masks["y"].any()


def test_masks_reject_different_signatures():
    b = ProgramBuilder()
    x = b.input("x", (2, 3))
    p = b.build([b.add(x, x)])
    b = ProgramBuilder()
    x = b.input("x", (3, 2))
    q = b.build([b.add(x, x)])
    with pytest.raises(VerificationError):
        differing_masks(p, q)


def test_masks_reject_non_linear_programs():
    b = ProgramBuilder()
    x = b.input("x", (2, 3))
    (y,) = b.opaque("Relu", [x])
    p = b.build([y])
    with pytest.raises(VerificationError, match="OPAQUE"):
        differing_masks(p, p)


def test_tolerance_ignores_reassociation_but_sees_one_missing_term():
    """A 4096-term dot product split in 2 and in 64 pieces is equal; one term dropped is not."""
    k = 4096
    w = np.random.default_rng(1).standard_normal((k, 2)).astype(np.float32)

    def build(pieces: int, drop_last: bool = False):
        b = ProgramBuilder()
        x = b.input("x", (3, k))
        wt = b.weight("w", w)
        parts = [k // pieces] * pieces
        xs, ws = b.split(x, 1, parts), b.split(wt, 0, parts)
        if drop_last:
            xs = list(xs)
            last = xs[-1]
            n = parts[-1]
            xs[-1] = b.pad(b.slice(last, (0, 0), (3, n - 1)), (0, 0, 0, 1))
        acc = b.matmul(xs[0], ws[0])
        for xi, wi in zip(xs[1:], ws[1:]):
            acc = b.add(acc, b.matmul(xi, wi))
        return b.build([b.reshape(acc, (3, 2), out="y")])

    one = build(1)
    assert not differing_masks(one, build(64), trials=5)["y"].any()
    assert differing_masks(one, build(2, drop_last=True))["y"].all()


# ----------------------------------------------------------------------------- the paper's pairs

def _seam_mask(batch, o, h, w, k):
    """Figure 1: left images (even batch items) differ on their last k//2 columns, right images
    (odd items) on their first k//2 columns."""
    m = np.zeros((batch, o, h, w), bool)
    p = k // 2
    m[0::2, :, :, w - p:] = True
    m[1::2, :, :, :p] = True
    return m


@pytest.mark.parametrize("batch,c,h,w,o,k", [(2, 3, 8, 8, 4, 5), (4, 2, 5, 7, 3, 3),
                                              (2, 1, 3, 9, 2, 1)])
def test_figure1_differs_exactly_at_the_seam(batch, c, h, w, o, k):
    original, candidate = example_pairs.figure1_pair(batch, c, h, w, o, k)
    np.testing.assert_array_equal(differing_masks(original, candidate)["y"],
                                  _seam_mask(batch, o, h, w, k))


def test_figure1_float_outputs_agree_away_from_the_seam():
    original, candidate = example_pairs.figure1_pair()
    x = np.random.default_rng(3).standard_normal(original.inputs[0].shape)
    a = evaluate(original, {"x": x}, np.float64)["y"]
    b = evaluate(candidate, {"x": x}, np.float64)["y"]
    seam = _seam_mask(2, 4, 8, 8, 5)
    np.testing.assert_allclose(a[~seam], b[~seam], rtol=1e-12, atol=1e-12)
    assert np.all(np.abs(a[seam] - b[seam]) > 1e-6)


@pytest.mark.parametrize("builder", [
    lambda: example_pairs.figure3_pair(exact=True),
    lambda: example_pairs.figure3_pair(n=2, c=2, h=8, w=4, exact=True),
    example_pairs.figure3_batch_pad1_pair,
    lambda: example_pairs.figure3_batch_pad1_pair(n=1, c=3, h=4, w=10),
    example_pairs.equivalent_pair])
def test_equivalent_pairs_agree_everywhere(builder):
    original, candidate = builder()
    assert not differing_masks(original, candidate)["y"].any()


@pytest.mark.parametrize("n,c,h,w,o", [(1, 4, 6, 6, 3), (2, 2, 8, 10, 2), (1, 1, 4, 4, 1)])
def test_figure3_grid_differs_on_the_inner_seams(n, c, h, w, o):
    """Rows h-2 (last even row) and 1 (first odd row) meet at the grid's seam; same for columns."""
    original, candidate = example_pairs.figure3_pair(n, c, h, w, o)
    expected = np.zeros((n, o, h, w), bool)
    expected[:, :, [1, h - 2], :] = True
    expected[:, :, :, [1, w - 2]] = True
    np.testing.assert_array_equal(differing_masks(original, candidate)["y"], expected)


def test_wrong_candidates_differ_where_constructed():
    masks = differing_masks(*example_pairs.weight_changed_pair())["y"]
    assert not masks[:, :2].any() and masks[:, 2:].all()      # only the second conv's channels
    assert differing_masks(*example_pairs.off_by_one_slice_pair())["y"].all()
    masks = differing_masks(*example_pairs.wrong_padding_pair())["y"]
    assert masks[..., -1].all() and not masks[..., :-1].any()  # only the last column


def test_cases_are_well_formed_pairs():
    assert set(example_pairs.ALL_CASES) == (set(example_pairs.EQUIVALENT_CASES)
                                            | set(example_pairs.PARTIAL_CASES)
                                            | set(example_pairs.WRONG_CASES))
    for name, build in example_pairs.ALL_CASES.items():
        original, candidate = build()
        check_program(original), check_program(candidate)
        assert original.inputs == candidate.inputs, name
        assert [(o, original.shapes[o]) for o in original.outputs] == \
            [(o, candidate.shapes[o]) for o in candidate.outputs], name
        masks = differing_masks(original, candidate)
        differs = any(m.any() for m in masks.values())
        everywhere = all(m.all() for m in masks.values())
        if name in example_pairs.EQUIVALENT_CASES:
            assert not differs, name
        elif name in example_pairs.PARTIAL_CASES:
            assert differs and not everywhere, name
        else:
            assert differs, name


def test_cases_share_weights_by_content_only():
    original, candidate = example_pairs.figure1_pair()
    assert set(original.weights) != set(candidate.weights)
    assert {weight_key(v) for v in original.weights.values()} == \
        {weight_key(v) for v in candidate.weights.values()}


def test_cases_build_at_benchmark_size():
    original, candidate = example_pairs.figure1_pair(16, 48, 38, 38, 64, 5)
    assert original.shapes["y"] == candidate.shapes["y"] == (16, 64, 38, 38)
    original, candidate = example_pairs.figure3_pair(1, 512, 14, 14, 256)
    assert original.shapes["y"] == candidate.shapes["y"] == (1, 256, 14, 14)
    original, candidate = example_pairs.figure3_pair(1, 512, 14, 14, 256, exact=True)
    assert candidate.shapes["y"] == (1, 256, 14, 14)


def test_cases_reject_odd_sizes():
    with pytest.raises(ValueError):
        example_pairs.figure1_pair(batch=3)
    with pytest.raises(ValueError):
        example_pairs.figure3_pair(h=7)


# ----------------------------------------------------------------------------- report checks

def _result(boxes_by_output, shapes, equivalent=None):
    outs = tuple(types.SimpleNamespace(name=n, shape=shapes[n], boxes=tuple(bx),
                                       equivalent=not bx if equivalent is None else equivalent)
                 for n, bx in boxes_by_output.items())
    return types.SimpleNamespace(outputs=outs, equivalent=all(o.equivalent for o in outs))


def test_report_sound_and_tight_with_strided_boxes():
    mask = np.zeros((4, 6), bool)
    mask[0::2, 1] = True              # rows 0 and 2, column 1
    mask[3, 5] = True
    good = [Box((0, 1), (3, 2), (2, 1)), Box((3, 5), (4, 6), (1, 1))]
    report = compare_with_report({"y": mask}, _result({"y": good}, {"y": (4, 6)}))
    assert report.sound and report.tight and report.consistent and report.ok
    assert report.outputs[0].covered == 3 and report.differing == 3

    dense = [Box((0, 1), (3, 2), (1, 1)), Box((3, 5), (4, 6), (1, 1))]   # covers row 1 too
    report = compare_with_report({"y": mask}, _result({"y": dense}, {"y": (4, 6)}))
    assert report.sound and report.tight                                 # still a differing one
    assert report.outputs[0].covered == 4


def test_report_detects_missed_positions_and_empty_boxes():
    mask = np.zeros((4, 6), bool)
    mask[0, 0] = mask[3, 3] = True
    boxes = [Box((0, 0), (1, 1), (1, 1)), Box((1, 4), (3, 6), (1, 1))]
    report = compare_with_report({"y": mask}, _result({"y": boxes}, {"y": (4, 6)}))
    assert not report.sound and not report.tight
    check = report.outputs[0]
    assert check.missed == 1 and check.missed_examples == ((3, 3),)
    assert check.empty_boxes == (boxes[1],)
    assert "missed" in report.explain()


def test_report_checks_flags_and_malformed_boxes():
    mask = np.zeros((3,), bool)
    result = _result({"y": []}, {"y": (3,)}, equivalent=False)
    report = compare_with_report({"y": mask}, result)
    assert report.sound and report.tight and not report.consistent
    report = compare_with_report({"y": mask}, _result({"y": [Box((2,), (5,), (1,))]}, {"y": (3,)}))
    assert not report.sound and not report.tight and report.outputs[0].malformed_boxes
    report = compare_with_report({"y": mask, "z": mask}, _result({"y": []}, {"y": (3,)}))
    assert report.missing_outputs == ("z",) and not report.sound


# ----------------------------------------------------------------------------- strategies

@QUICK
@given(programs())
def test_random_programs_are_valid_and_small(program):
    check_program(program)
    assert program.is_multilinear()
    assert all(math.prod(s) <= 1500 for s in program.shapes.values())
    assert program.outputs[0] == "y0"
    rng = np.random.default_rng(0)
    out = evaluate(program, {t.name: rng.standard_normal(t.shape) for t in program.inputs},
                   np.float64)
    assert all(np.isfinite(v).all() for v in out.values())


@QUICK
@given(mutant_pairs())
def test_mutants_keep_the_signature(pair):
    original, candidate = pair
    check_program(candidate)
    assert candidate.name.startswith("mutant")
    assert original.inputs == candidate.inputs
    assert [(o, original.shapes[o]) for o in original.outputs] == \
        [(o, candidate.shapes[o]) for o in candidate.outputs]
    masks = differing_masks(original, candidate)
    assert set(masks) == set(original.outputs)
