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
import dataclasses
import json
import pathlib
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


#: The file in a target's records folder that keeps, per mutant tuned there, its kind and how
#: its tuned kernels compared with those they replace (:class:`Evidence`; it ships with the
#: records: ``tvm_pet.tune.dbfile.EVIDENCE_FILE`` names it for the package's TVM side).
EVIDENCE_FILE = "kinds.json"


@dataclasses.dataclass(frozen=True)
class Evidence:
    """Which kinds of rewrites won once tuned on one target: per set of new kernels tuned
    (keyed by their structural hashes, so a rerun counts nothing twice), the mutant's kind and
    its tuned time over the time of the kernels it replaces (below 1: it won).

    The tuning plan ranks the mutants it has not tuned yet by their expected saving times their
    kind's odds of winning here (:meth:`odds`: won + 1 over tuned + 2, so a kind never tuned
    has even odds), and keeps fewer places for aligning mutants where they seldom win
    (:func:`~tvm_pet.pipeline.plan.rank_mutants`).

    >>> e = Evidence({"k1": ("merged", 0.8), "k2": ("merged", 1.1), "k3": ("extents", 0.9)})
    >>> e.counts("merged"), round(e.odds("merged"), 2), e.odds("winograd")
    ((1, 2), 0.5, 0.5)
    >>> e.words("merged")
    'merged won 1 of 2 tuned on this target'
    """

    outcomes: dict = dataclasses.field(default_factory=dict)

    @staticmethod
    def key(new_kernels) -> str:
        """The key of a set of new kernels."""
        return "|".join(sorted(map(str, new_kernels)))

    @classmethod
    def load(cls, records_dir) -> "Evidence":
        """The evidence kept in ``records_dir`` (none where the file is missing or unreadable)."""
        path = pathlib.Path(records_dir) / EVIDENCE_FILE
        try:
            data = json.loads(path.read_text())
            return cls({k: (v["kind"], float(v["ratio"])) for k, v in data.items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return cls()

    def save(self, records_dir) -> "Evidence":
        """Write the evidence into ``records_dir``, merged with what the file holds; returns
        the merged evidence."""
        merged = Evidence.load(records_dir).adding((k, kind, r)
                                                   for k, (kind, r) in self.outcomes.items())
        path = pathlib.Path(records_dir)
        path.mkdir(parents=True, exist_ok=True)
        (path / EVIDENCE_FILE).write_text(json.dumps(
            {k: {"kind": kind, "ratio": round(ratio, 4)}
             for k, (kind, ratio) in sorted(merged.outcomes.items())}, indent=1) + "\n")
        return merged

    def adding(self, outcomes: Iterable[tuple[str, str, float]]) -> "Evidence":
        """The evidence with ``(key, kind, tuned ratio)`` outcomes added (replacing a key's)."""
        return Evidence({**self.outcomes, **{k: (kind, r) for k, kind, r in outcomes}})

    def counts(self, kind: str) -> tuple[int, int]:
        """``(won, tuned)`` of ``kind``."""
        ratios = [r for k, r in self.outcomes.values() if k == kind]
        return sum(r < 1.0 for r in ratios), len(ratios)

    def odds(self, kind: str) -> float:
        """The odds that a mutant of ``kind`` wins once tuned: won + 1 over tuned + 2."""
        won, tuned = self.counts(kind)
        return (won + 1) / (tuned + 2)

    def words(self, kind: str) -> str:
        """What the evidence says of ``kind``."""
        won, tuned = self.counts(kind)
        return (f"{kind} won {won} of {tuned} tuned on this target" if tuned
                else f"{kind} not tuned on this target yet (even odds)")

    def to_json(self) -> dict:
        """Per kind seen: won, tuned and odds (the tuning summary's ``evidence``)."""
        kinds = sorted({kind for kind, _ in self.outcomes.values()})
        return {kind: dict(zip(("won", "tuned"), self.counts(kind)),
                           odds=round(self.odds(kind), 3)) for kind in kinds}
