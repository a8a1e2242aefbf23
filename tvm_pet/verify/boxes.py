"""Strided boxes: products of arithmetic progressions, one per axis.

A :class:`Box` holds ``lo`` (inclusive), ``hi`` (exclusive, one past the last position, so that
``[lo, hi)`` is the tight bounding box) and ``step`` per axis.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True, slots=True)
class Box:
    """The positions ``lo[d] + k * step[d] < hi[d]`` on every axis ``d``."""

    lo: tuple[int, ...]
    hi: tuple[int, ...]
    step: tuple[int, ...]

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple((h - l + s - 1) // s for l, h, s in zip(self.lo, self.hi, self.step))

    @property
    def size(self) -> int:
        return math.prod(self.counts)

    def index(self) -> tuple[slice, ...]:
        """A NumPy index selecting the box."""
        return tuple(slice(l, h, s) for l, h, s in zip(self.lo, self.hi, self.step))

    def bounding(self) -> "Box":
        """The dense box ``[lo, hi)`` containing this one."""
        return Box(self.lo, self.hi, (1,) * len(self.lo))

    def mask(self, shape: Sequence[int]) -> np.ndarray:
        """A boolean array of ``shape`` that is True inside the box."""
        m = np.zeros(shape, bool)
        m[self.index()] = True
        return m

    def to_json(self) -> dict:
        return {"lo": list(self.lo), "hi": list(self.hi), "step": list(self.step)}

    @staticmethod
    def from_progressions(aps: Sequence[tuple[int, int, int]]) -> "Box":
        """From ``(lo, count, step)`` per axis."""
        return Box(tuple(l for l, _, _ in aps), tuple(l + (c - 1) * s + 1 for l, c, s in aps),
                   tuple(s if c > 1 else 1 for _, c, s in aps))


def progressions(positions: np.ndarray) -> list[tuple[int, int, int]]:
    """Decompose sorted distinct positions into arithmetic progressions ``(lo, count, step)``.

    Runs of consecutive positions become intervals; what is left (isolated positions) is grouped
    greedily into progressions of constant step. Any decomposition is sound; this one is small
    for the classes that occur (intervals, parities, isolated seams).
    """
    pos = [int(p) for p in positions]
    runs: list[list[int]] = []
    for p in pos:
        if runs and p == runs[-1][-1] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    out: list[tuple[int, int, int]] = []
    singles: list[int] = []

    def flush():
        i = 0
        while i < len(singles):
            if i + 1 < len(singles):
                step, j = singles[i + 1] - singles[i], i + 1
                while j + 1 < len(singles) and singles[j + 1] - singles[j] == step:
                    j += 1
                out.append((singles[i], j - i + 1, step))
                i = j + 1
            else:
                out.append((singles[i], 1, 1))
                i += 1
        singles.clear()

    for run in runs:
        if len(run) == 1:
            singles.append(run[0])
        else:
            flush()
            out.append((run[0], len(run), 1))
    flush()
    return out


def axis_progressions(labels: np.ndarray) -> list[tuple[int, int, int]]:
    """All progressions of all classes of one axis."""
    out = []
    for c in np.unique(labels):
        out += progressions(np.flatnonzero(labels == c))
    return out


def _join(a: tuple[int, int, int], b: tuple[int, int, int]) -> tuple[int, int, int] | None:
    """Join two progressions into one when b continues a with a common step."""
    (la, ca, sa), (lb, cb, sb) = a, b
    step = lb - (la + (ca - 1) * sa)
    if step <= 0 or (ca > 1 and sa != step) or (cb > 1 and sb != step):
        return None
    return (la, ca + cb, step)


def merge_boxes(boxes: Iterable[Box]) -> list[Box]:
    """Merge boxes that continue each other along one axis into fewer, larger boxes.

    Only boxes that agree on every other axis are merged, so the union of positions is unchanged.
    """
    items = [tuple(zip(b.lo, b.counts, b.step)) for b in boxes]
    changed = True
    while changed and items:
        changed = False
        for d in range(len(items[0])):
            groups: dict[tuple, list] = {}
            for it in items:
                groups.setdefault(it[:d] + it[d + 1:], []).append(it)
            merged = []
            for key, group in groups.items():
                group.sort(key=lambda it: it[d][0])
                cur = group[0]
                for nxt in group[1:]:
                    joined = _join(cur[d], nxt[d])
                    if joined is None:
                        merged.append(cur)
                        cur = nxt
                    else:
                        cur = cur[:d] + (joined,) + cur[d + 1:]
                        changed = True
                merged.append(cur)
            items = merged
    return sorted((Box.from_progressions(it) for it in items), key=lambda b: (b.lo, b.hi))
