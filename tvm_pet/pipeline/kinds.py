"""Kinds of PET's rewrites, by what they change, for the report and the benchmarks.

A mutant is named by its operators (``Pad -> Conv -> Slice``); its *kind* says what it does
to the kernels TVM builds, so that runs on different models can be compared: which kinds were
offered, tuned, timed against the original, and kept (``report.json``: ``tuning.offered``, each
look's ``kinds``; ``benchmarks/run.py``'s rows).

>>> kind_of(("Pad", "Conv", "Slice")), kind_of(("Concat", "Conv", "Split"))
('extents', 'merged')
>>> kind_of(("ReshapeTranspose", "Conv", "ReshapeTranspose")), kind_of(("Pad", "WinogradConv"))
('space-to-batch', 'winograd')
"""
from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence

#: Each kind in words.
KINDS = {
    "winograd": "a 3x3 convolution by Winograd's F(4x4, 3x3)",
    "windows": "a convolution as one matrix product over its windows",
    "merged": "independent operators on a shared input as one (concatenated, then split)",
    "space-to-batch": "a dilated convolution as an undilated one over a reshaped batch",
    "reshaped": "a product over reshaped or transposed operands",
    "extents": "a convolution or product over padded or sliced extents (an awkward side "
               "aligned, padding made explicit)",
    "other": "another verified form",
}


def kind_of(ops: Sequence[str]) -> str:
    """The kind (a key of :data:`KINDS`) of a mutant with operators ``ops`` (their labels)."""
    if any(op.startswith("Winograd") for op in ops):
        return "winograd"
    if any(op.startswith("Im2col") for op in ops):
        return "windows"
    if "Concat" in ops and "Split" in ops:
        return "merged"
    if "ReshapeTranspose" in ops:
        return "space-to-batch" if any(op == "Conv" for op in ops) else "reshaped"
    if ops and (ops[0] in ("Pad", "Fill") or ops[-1] == "Slice"):
        return "extents"
    return "other"


def offered(screened: Iterable, picked: Iterable) -> dict[str, dict[str, int]]:
    """Per kind: how many mutants the screen looked at, and how many were tuned
    (``screened``: :class:`~tvm_pet.pipeline.plan.Screened`; ``picked``: the
    :class:`~tvm_pet.pipeline.plan.Pick` of those tuned, the combination aside).

    >>> from types import SimpleNamespace as S
    >>> offered([S(mutant=("Conv", "Slice")), S(mutant=("Concat", "Conv", "Split"))],
    ...         [S(mutant=("Conv", "Slice"), subprogram="sub0")])
    {'extents': {'screened': 1, 'tuned': 1}, 'merged': {'screened': 1, 'tuned': 0}}
    """
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for s in screened:
        counts[kind_of(s.mutant)]["screened"] += 1
    for p in picked:
        if p.subprogram != "combined":
            counts[kind_of(p.mutant)]["tuned"] += 1
    return {kind: {"screened": c["screened"], "tuned": c["tuned"]}
            for kind, c in sorted(counts.items())}
