"""Boxes: arithmetic-progression decomposition, merging, and label propagation invariants."""
import itertools

import numpy as np
from hypothesis import given, settings, strategies as st

from tvm_pet.ir import ProgramBuilder
from tvm_pet.ops.labels import merge_axes, reshape_labels, split_axis
from tvm_pet.verify.boxes import Box, axis_progressions, merge_boxes, progressions
from tvm_pet.verify.verifier import labels_of


def _positions(aps):
    return sorted(lo + k * s for lo, c, s in aps for k in range(c))


@given(st.sets(st.integers(0, 60), min_size=1))
def test_progressions_partition_the_positions(positions):
    pos = np.array(sorted(positions))
    aps = progressions(pos)
    assert _positions(aps) == pos.tolist()


def test_progressions_prefer_intervals_and_strides():
    assert progressions(np.array([0, 2, 3, 4, 5])) == [(0, 1, 1), (2, 4, 1)]
    assert progressions(np.arange(0, 14, 2)) == [(0, 7, 2)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=20, unique=True))
def test_merge_boxes_keeps_the_union(points):
    boxes = [Box((a, b), (a + 1, b + 1), (1, 1)) for a, b in points]
    merged = merge_boxes(boxes)
    union = np.zeros((6, 6), bool)
    for bx in merged:
        assert not (union & bx.mask((6, 6))).any(), "merged boxes overlap"
        union |= bx.mask((6, 6))
    want = np.zeros((6, 6), bool)
    for a, b in points:
        want[a, b] = True
    np.testing.assert_array_equal(union, want)
    assert len(merged) <= len(boxes)


def test_merge_axes_chooses_rows_or_columns():
    # inner axis split in two classes, outer trivial: columns (2 classes) beat rows (8 x 2)
    cols = merge_axes(np.zeros(8, np.int64), np.array([0, 1]))
    assert len(np.unique(cols)) == 2
    assert set(np.flatnonzero(cols == cols[0])) == set(range(0, 16, 2))


def test_split_axis_classes_lie_in_one_input_class():
    labels = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2, 0, 0, 1])
    a, b = split_axis(labels, [3, 4])
    grid = labels.reshape(3, 4)
    for ca, cb in itertools.product(np.unique(a), np.unique(b)):
        assert len(np.unique(grid[np.ix_(a == ca, b == cb)])) == 1


def test_space_to_batch_round_trip_gives_strided_boxes():
    """The Figure-3 regrouping makes parity classes (VERIFIER_NOTES: rows of one parity)."""
    b = ProgramBuilder()
    x = b.input("x", (1, 2, 8, 8))
    t = b.reshape_transpose(x, (1, 2, 4, 2, 4, 2), (3, 5, 0, 1, 2, 4), (4, 2, 4, 4))
    c = b.conv(t, b.weight("w", np.ones((2, 2, 3, 3))), pads=1)
    y = b.reshape_transpose(c, (2, 2, 1, 2, 4, 4), (2, 3, 4, 0, 5, 1), (1, 2, 8, 8))
    labels = labels_of(b.build([y]))[y]
    rows = axis_progressions(labels[2])
    assert any(step == 2 and count > 1 for _, count, step in rows)
    for lo, count, step in rows:  # every class keeps one parity: affine maps inside
        assert step % 2 == 0 or count == 1


def test_reshape_labels_of_trivial_split_are_trivial():
    out = reshape_labels([np.zeros(12, np.int64)], (3, 4))
    assert [len(np.unique(a)) for a in out] == [1, 1]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.lists(st.tuples(st.integers(-2, 6), st.integers(1, 3)),
                                    min_size=1, max_size=3), st.integers(0, 2**31))
def test_combine_ranks_rows_as_unique_by_rows_does(n, columns, seed):
    from tvm_pet.ops.labels import combine
    rng = np.random.default_rng(seed)
    cols = [rng.integers(-2, high + 3, (n,) if width == 1 else (n, width))
            for high, width in columns]
    stacked = np.concatenate([c.reshape(n, -1) for c in cols], axis=1)
    _, want = np.unique(stacked, axis=0, return_inverse=True)
    got = combine(*cols)
    assert got.dtype == np.int64 and np.array_equal(got, want.reshape(-1))


def test_random_env_reused_is_a_fresh_draw():
    from tvm_pet.verify import verifier
    b = ProgramBuilder()
    x = b.input("x", (3, 4))
    w = b.weight("w", np.arange(20, dtype=np.float32).reshape(4, 5))
    p = b.build([b.matmul(x, w)])
    first = verifier.random_env([p, p], 2, seed=5)
    again = verifier.random_env([p, p], 2, seed=5)  # from the kept draws
    verifier._drawn.clear()
    fresh = verifier.random_env([p, p], 2, seed=5)
    assert first.keys() == again.keys() == fresh.keys()
    for key in fresh:
        assert np.array_equal(again[key], fresh[key]) and not again[key].flags.writeable
    assert not np.array_equal(fresh[(0, "x")], verifier.random_env([p], 2, seed=6)[(0, "x")])


def test_random_env_keeps_no_draw_of_large_tensors(monkeypatch):
    from tvm_pet.verify import verifier
    monkeypatch.setattr(verifier, "RANDOM_ENV_KEPT_ELEMENTS", 2 * 12)  # tests x elements of x
    b = ProgramBuilder()
    x = b.input("x", (3, 4))
    w = b.weight("w", np.ones((4, 5), np.float32))
    large = b.build([b.matmul(x, w)])
    c = ProgramBuilder()
    y = c.input("x", (3, 4))
    small = c.build([c.add(y, y)])
    verifier._drawn.clear()
    verifier.random_env([large], 2, seed=5)  # 2 x (12 + 20) residues: drawn, not kept
    assert not verifier._drawn
    verifier.random_env([small], 2, seed=5)  # 2 x 12: kept
    assert len(verifier._drawn) == 1
