"""The tuning plan: which mutants get their kernels tuned, and why (pure; no TVM).

Tuning every candidate is unaffordable on a CPU (about a minute per kernel at 32 trials), so
``tvm-pet tune`` (and ``optimize --trials N``) tunes the original and only a few mutants of the
whole model. This module holds the rules; :mod:`tvm_pet.pipeline.tune` applies them with a
toolchain.

- :func:`rank_mutants`: the screened mutants of the whole model, ranked by the time they are
  expected to save, in milliseconds per run: the replaced kernels' tuned time (the original's
  records) scaled by how the new kernels compare untuned
  (:attr:`~tvm_pet.cost.model.RewriteScreen.expected_saving_s`). Mutants whose kernels all
  have records already (an earlier run tuned them) take places first, ranked by what they
  really save, tuned, so that a rerun at the same budget tunes nothing new (a larger budget
  tops them up to its trials per task, as it does the original's); the free places go to the best
  expected savings, each only if its new kernels take at most ``screen_ratio`` times as long
  untuned. Before them, up to half the places go to mutants that pad a convolution's awkward
  output side (38 = 2 * 19) to a smooth one (40) and slice it back: untuned they only add
  work, and tuned they ran x1.2 to x2.5 faster on Inception-v3's 38 x 38 convolutions. With
  ``--winograd``, as many places again go to mutants computing a 3x3 convolution by
  Winograd's algorithm, whose untuned products are a naive loop nest; with ``--im2col``, as
  many to mutants computing a convolution as one product over its windows
  (:mod:`tvm_pet.ir.im2col`), per order of the product.
- :func:`combination`: the tuned mutants that beat the original by themselves, applied together
  (:func:`~tvm_pet.search.optimizer.combine`): the program the search's combine step will cost,
  whose kernels (layouts cancelled between neighbours, new fusions) must be tuned too.

>>> from tvm_pet.cost.model import RewriteScreen
>>> screened = [Screened("conv0", ("Conv",), RewriteScreen(0.004, 3.0), 0),
...             Screened("conv0", ("Conv", "Transpose"), RewriteScreen(0.004, 0.5), 1),
...             Screened("conv1", ("Conv", "Transpose"), RewriteScreen(0.010, 0.7), 2)]
>>> [(p.subprogram, p.index, round(p.expected_saving_ms, 2))
...  for p in rank_mutants(screened, promising=2, screen_ratio=2.0)]
[('conv1', 2, 3.0), ('conv0', 1, 2.0)]
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from tvm_pet.cost.model import CostModel, RewriteScreen
from tvm_pet.ir import im2col
from tvm_pet.ir import winograd as wino
from tvm_pet.ir.node import Program
from tvm_pet.pipeline.kinds import Evidence, kind_of
from tvm_pet.search.optimizer import combine
from tvm_pet.search.partition import Subprogram

#: The ``subprogram`` of the pick that stands for the combination of the tuned mutants.
COMBINED = "combined"


@dataclasses.dataclass(frozen=True)
class Screened:
    """One mutant the screen looked at.

    Args:
        subprogram: the subprogram it rewrites.
        mutant: its operators.
        screen: what the screen measured of its kernels.
        index: its position in the caller's list of screened candidates.
        aligns: it pads an awkward output side of a convolution to a smooth one
            (:func:`~tvm_pet.search.moves.aligns_extents`): untuned, it only adds work, and
            tuned it can run much faster (MetaSchedule tiles a loop by divisors of its extent).
    """

    subprogram: str
    mutant: tuple[str, ...]
    screen: RewriteScreen
    index: int
    aligns: bool = False
    #: it computes a 3x3 convolution by Winograd's algorithm (``--winograd``): untuned, its
    #: batched products are a naive loop nest, so its untuned time cannot rank it either
    winograd: bool = False
    #: it computes a convolution as one matrix product over its windows
    #: (:mod:`tvm_pet.ir.im2col`): untuned, a naive product; tuned, it can run faster
    windows: bool = False


@dataclasses.dataclass(frozen=True)
class Pick:
    """One mutant chosen for tuning.

    Args:
        subprogram: the subprogram it rewrites (``"combined"`` for the combination).
        mutant: its operators.
        untuned_ratio: what the screen measured (new kernels' untuned time over the replaced
            ones'); None for the combination.
        index: its :attr:`Screened.index` (-1 for the combination).
        expected_saving_ms: the screen's expected saving per run (None for the combination).
        tuned_before: its kernels had records already (an earlier run tuned it): tuned again
            only up to this run's trials per task (nothing, at the same budget).
        basis: what ``untuned_ratio`` compares (:attr:`RewriteScreen.basis`): the kernels'
            untuned times, or their FLOPs where they are too large to time untuned.
        aligns: it took one of the places kept for mutants that align an awkward side
            (:func:`rank_mutants`).
        winograd: it took one of those places as a convolution by Winograd's algorithm.
        windows: it took one of those places as a convolution by a product over its windows.
        evidence: what the kinds tuned before on this target say of its kind, in words (None
            for a mutant tuned before and the combination).
    """

    subprogram: str
    mutant: tuple[str, ...]
    untuned_ratio: float | None
    index: int = -1
    expected_saving_ms: float | None = None
    tuned_before: bool = False
    basis: str = "untuned"
    aligns: bool = False
    winograd: bool = False
    windows: bool = False
    evidence: str | None = None

    @property
    def reason(self) -> str:
        """Why it is tuned, in words, with what its kind's record here says."""
        return self._why() + ("" if self.evidence is None else f"; {self.evidence}")

    def _why(self) -> str:
        if self.subprogram == COMBINED:
            return "the tuned mutants that improve, applied together"
        if self.tuned_before:
            return (f"has records already, from an earlier run (tuned, it saves "
                    f"{self.expected_saving_ms:.2f} ms per run)")
        compared = ("the FLOPs (too large to time untuned)" if self.basis == "flops"
                    else "the time untuned")
        if self.winograd:
            return (f"a 3x3 convolution by Winograd's F(4x4, 3x3): a quarter of the products, "
                    f"which its untuned time does not show (its new kernels take "
                    f"x{self.untuned_ratio:.2f} {compared})")
        if self.windows:
            return (f"a convolution as one matrix product over its shifted windows, which can "
                    f"tune faster than the direct loop nest (its new kernels take "
                    f"x{self.untuned_ratio:.2f} {compared})")
        if self.aligns:
            return (f"pads an awkward side to a smooth one, which tunes better than the untuned "
                    f"time says (its new kernels take x{self.untuned_ratio:.2f} {compared})")
        return (f"screened: expected to save {self.expected_saving_ms:.2f} ms per run (its new "
                f"kernels take x{self.untuned_ratio:.2f} {compared})")

    def to_json(self) -> dict:
        """The pick as ``report.json`` and ``tvm-pet tune`` write it."""
        return {"subprogram": self.subprogram, "mutant": list(self.mutant),
                "kind": None if self.subprogram == COMBINED else kind_of(self.mutant),
                "untuned_ratio": self.untuned_ratio, "ratio_of": self.basis,
                "expected_saving_ms": self.expected_saving_ms, "aligns": self.aligns,
                "winograd": self.winograd, "windows": self.windows,
                "reason": self.reason}


@dataclasses.dataclass(frozen=True)
class TuningPlan:
    """The mutants tuned besides the original, in the order they were chosen, how many the
    screen looked at, how many of those it compared by FLOPs (kernels too large to time
    untuned), per kind of rewrite how many were screened and tuned
    (:func:`tvm_pet.pipeline.kinds.offered`), and per kind how many won of those tuned on this
    target (:meth:`tvm_pet.pipeline.kinds.Evidence.to_json`, this run's included)."""

    picks: tuple[Pick, ...] = ()
    screened: int = 0
    by_flops: int = 0
    offered: dict = dataclasses.field(default_factory=dict)
    evidence: dict = dataclasses.field(default_factory=dict)

    def to_json(self) -> list[dict]:
        """One entry per pick (``tuned_mutants`` of the tuning summary)."""
        return [p.to_json() for p in self.picks]


def rank_mutants(screened: Sequence[Screened], promising: int,
                 screen_ratio: float, evidence: Evidence | None = None) -> tuple[Pick, ...]:
    """Choose the mutants of the whole model to tune.

    Mutants the untuned screen cannot rank, and not tuned yet, take places of their own first:
    up to ``promising`` of those computing a 3x3 convolution by Winograd's algorithm, for each
    order of its products (:attr:`Screened.winograd`, :data:`tvm_pet.ir.winograd.PRODUCTS`;
    these places come on top of ``promising``, so that offering Winograd takes no place from the
    other mutants: asked for, it is tuned on the convolutions taking the most time), and as
    many of those computing a convolution as a product over its windows, for each order of the
    product (:attr:`Screened.windows`, :data:`tvm_pet.ir.im2col.ORDERS`), then up to half of
    ``promising`` those aligning an awkward side (:attr:`Screened.aligns`; fewer where aligning
    mutants seldom win here: ``promising`` times the odds of their kind, ``extents``). Of each kind
    (and order), one per subprogram, those whose new kernels replace the most time across the
    model first (:func:`reach_s`; then the one with fewer operators: the padding in the
    convolution, not a PAD that fuses into the kernel before it), less one place per subprogram
    with a Winograd mutant tuned before (its best one keeps the place, and no other of its
    Winograd mutants takes one), and one per set of aligning kernels tuned before (so that a
    rerun tunes nothing new): untuned, padding only adds work and Winograd's products are a
    naive loop nest, so their expected saving cannot rank them. Mutants tuned before come next,
    best tuned saving first; the remaining places go to the others in decreasing order of
    expected saving times the odds that their kind wins once tuned on this target
    (:class:`~tvm_pet.pipeline.kinds.Evidence`: ``evidence``, with the mutants here whose
    kernels hold records already). An untuned mutant takes a place only if its untuned ratio
    is at most ``screen_ratio``. A mutant whose new kernels are all among those of a mutant
    ranked above it takes no place (tuning that one tunes it: the same kernel in two layers, or
    a subset and the same subset with its bias).

    Args:
        screened: every mutant the screen measured, across the model.
        promising: mutants tuned in all, besides the Winograd and window places.
        screen_ratio: the screen's threshold.
        evidence: the kinds' outcomes tuned before on this target (default: none).

    Returns:
        The picks: those in the reserved places, tuned-before ones, then the others from best
        to worst.
    """
    covered: set = set()  # new kernels of the mutants picked so far
    reach = reach_s(screened)
    by_reach = sorted(screened, key=lambda s: (-reach.get(s.screen.new_kernels, 0.0),
                                               len(s.mutant), s.index))
    orders = sorted({_order(s) for s in screened if _own_places(s)})
    kept, reserved = _own_kind_places(screened, by_reach, orders, promising, covered,
                                      screen_ratio)
    evidence = (evidence or Evidence()).adding(outcomes(screened))
    aligning = min(promising // 2, round(promising * evidence.odds("extents")))
    reserved += _reserve([s for s in by_reach if _aligning(s)], aligning - len(
        {s.screen.new_kernels for s in screened if _aligning(s) and s.screen.tuned}),
        covered, screen_ratio)
    total = promising * (1 + len(orders))
    kept_at = {k.index for k in kept}
    done = kept + _best_first((s for s in screened if s.screen.tuned and s.index not in
                               kept_at), covered)[:total - len(reserved) - len(kept)]
    covered = set().union(*(s.screen.new_kernels for s in reserved + done))
    fresh = _best_first((s for s in screened if not s.screen.tuned
                         and s.screen.untuned_ratio <= screen_ratio), covered,
                        lambda s: _weighted(s, evidence))
    return tuple([_pick(s, evidence, reserved=True) for s in reserved] + [_pick(s) for s in done]
                 + [_pick(s, evidence) for s in fresh[:total - len(reserved) - len(done)]])


def _best_first(items, covered: set, saving=lambda s: s.screen.expected_saving_s) -> list:
    """``items`` (screened mutants), best ``saving`` first, skipping a mutant whose new kernels
    are all ``covered`` (updated) or added by a better one."""
    kept = []
    for s in sorted(items, key=lambda s: (-saving(s), s.index)):
        if not s.screen.new_kernels or not s.screen.new_kernels <= covered:
            covered.update(s.screen.new_kernels)
            kept.append(s)
    return kept


def outcome(screen: RewriteScreen, mutant) -> tuple[str, str, float] | None:
    """``(key, kind, tuned ratio)`` of a mutant (its operators) screened with its new kernels'
    records (:meth:`~tvm_pet.pipeline.kinds.Evidence.adding`): its tuned time over the replaced
    time; None where they have none."""
    if screen.tuned and screen.new_kernels and screen.replaced_s > 0:
        return (Evidence.key(screen.new_kernels), kind_of(mutant),
                screen.tuned_s / screen.replaced_s)
    return None


def outcomes(screened: Sequence[Screened]) -> list[tuple[str, str, float]]:
    """The :func:`outcome` of each screened mutant whose new kernels all hold records."""
    return [o for s in screened if (o := outcome(s.screen, s.mutant)) is not None]


def _weighted(s: Screened, evidence: Evidence) -> float:
    """``s``'s expected saving weighed by its kind's odds of winning once tuned: times the
    odds where it saves, divided by them where it loses (a kind that seldom wins ranks lower
    either way)."""
    saving, odds = s.screen.expected_saving_s, evidence.odds(kind_of(s.mutant))
    return saving * odds if saving > 0 else saving / odds


def _own_kind_places(screened: Sequence[Screened], by_reach: list[Screened],
                     orders: list[str], promising: int, covered: set,
                     screen_ratio: float) -> tuple[list[Screened], list[Screened]]:
    """The mutants with places of their own (:func:`_own_places`: Winograd's, the windows')
    that keep a place (tuned before) and those reserved one, up to ``promising`` of each order
    (:func:`_order`): per order, the best one tuned before of each subprogram keeps its place
    (a rerun tunes no new such mutant), and the other places go
    to subprograms with none tuned yet, furthest reach first (``by_reach``); ``covered``
    (updated) holds the new kernels of the mutants chosen."""
    tuned_w = {order: _best_tuned_own([s for s in screened if _order(s) == order])
               for order in orders}
    kept = [s for order in orders for s in list(tuned_w[order].values())[:promising]]
    covered.update(*(s.screen.new_kernels for s in kept))
    reserved: list[Screened] = []
    for order in orders:
        reserved += _reserve([s for s in by_reach if _own_places(s) and _order(s) == order
                              and s.subprogram not in tuned_w[order]],
                             promising - len(tuned_w[order]), covered, screen_ratio)
    return kept, reserved


def _reserve(candidates: list[Screened], places: int, covered: set,
             screen_ratio: float) -> list[Screened]:
    """Up to ``places`` of ``candidates`` (in their order) not tuned yet, one per subprogram,
    each within ``screen_ratio`` and adding a kernel not in ``covered`` (updated)."""
    chosen: list[Screened] = []
    for s in candidates:
        if len(chosen) >= places:
            break
        if (not s.screen.tuned and s.screen.untuned_ratio <= screen_ratio
                and s.screen.new_kernels and not s.screen.new_kernels <= covered
                and all(a.subprogram != s.subprogram for a in chosen)):
            covered.update(s.screen.new_kernels)
            chosen.append(s)
    return chosen


def _best_tuned_own(screened: Sequence[Screened]) -> dict[str, Screened]:
    """Per subprogram, its Winograd (or window) mutant tuned before that saves the most, tuned
    (best first)."""
    best: dict[str, Screened] = {}
    for s in sorted((s for s in screened if _own_places(s) and s.screen.tuned),
                    key=lambda s: (-s.screen.expected_saving_s, s.index)):
        best.setdefault(s.subprogram, s)
    return best


def _own_places(s: Screened) -> bool:
    """Whether ``s`` has places of its own: by Winograd's algorithm, or a convolution as a
    product over its windows."""
    return s.winograd or s.windows


def _order(s: Screened) -> str:
    """The order of a Winograd mutant's products (:data:`tvm_pet.ir.winograd.PRODUCTS`, read
    from its operators' labels), or ``im2col:<order>`` for a window mutant
    (:data:`tvm_pet.ir.im2col.ORDERS`): each has places of its own."""
    if s.windows and not s.winograd:
        return f"im2col:{im2col.order_of(s.mutant)}"
    return wino.order_of(s.mutant)


def _aligning(s: Screened) -> bool:
    """Whether ``s`` competes for the aligning places: it aligns a side, and has no places of
    its own (:func:`_own_places`)."""
    return s.aligns and not _own_places(s)


def reach_s(screened: Sequence[Screened]) -> dict[frozenset, float]:
    """Per set of new kernels, the seconds per run they could replace across the model: the
    replaced time of each subprogram with a mutant adding them, summed (the largest where
    several of one subprogram's subsets do, as with and without its bias).

    >>> screen = lambda s: RewriteScreen(s, 1.0, new_kernels=frozenset("k"))
    >>> reach_s([Screened("conv0", ("Pad", "Conv"), screen(0.03), 0),
    ...          Screened("conv0", ("Pad", "Conv", "Add"), screen(0.03), 1),
    ...          Screened("conv1", ("Pad", "Conv"), screen(0.02), 2)])
    {frozenset({'k'}): 0.05}
    """
    per: dict[frozenset, dict[str, float]] = {}
    for s in screened:
        if s.screen.new_kernels:
            subs = per.setdefault(s.screen.new_kernels, {})
            subs[s.subprogram] = max(subs.get(s.subprogram, 0.0), s.screen.replaced_s)
    return {keys: sum(subs.values()) for keys, subs in per.items()}


def _pick(s: Screened, evidence: Evidence | None = None, reserved: bool = False) -> Pick:
    """The pick of ``s``; ``reserved``: it took one of the places kept for mutants the untuned
    screen cannot rank (aligning an awkward side, or by Winograd's algorithm); ``evidence``:
    the kinds' outcomes that ranked it, for its reason."""
    saving = 1e3 * s.screen.expected_saving_s
    return Pick(s.subprogram, tuple(s.mutant), s.screen.untuned_ratio, s.index,
                saving if math.isfinite(saving) else None, s.screen.tuned, s.screen.basis,
                reserved and s.aligns, reserved and s.winograd, reserved and s.windows,
                None if evidence is None else evidence.words(kind_of(s.mutant)))


def combination(program: Program, tuned: Sequence[tuple[Subprogram, Program, Program]],
                cost: CostModel) -> Program | None:
    """The tuned mutants that beat the original by themselves, applied together.

    Args:
        program: the original.
        tuned: ``(subprogram, whole program with the mutant in place, corrected mutant)`` per
            tuned mutant.
        cost: the tuned cost model.

    Returns:
        The best improving mutant of each disjoint subset applied together and post-optimized,
        or None when fewer than two subsets improve.
    """
    if len(tuned) < 2:
        return None
    scored = [(cost.cost(whole), part, corrected) for part, whole, corrected in tuned]
    together = combine(program, scored, cost.cost(program),
                       None if getattr(cost, "additive", True) else cost.cost)
    return None if together is None else together[0]


def combined_pick(program: Program) -> Pick:
    """The pick that stands for the combination ``program``."""
    return Pick(COMBINED, tuple(n.label for n in program.nodes), None)
