"""Brute force, the oracle of the verifier: evaluate both programs everywhere and compare.

For the tests only (see :mod:`tvm_pet.testing`): the optimizer never runs it.

The verifier (:mod:`tvm_pet.verify.verifier`) tests a few positions per box and reasons about the
rest. This module does not reason at all: it evaluates the original and the candidate in float64
at *every* output position on a few random draws and marks where they differ. Tests then check the
verifier's boxes against these masks (:func:`compare_with_report`):

- **sound**: every differing position lies in a reported box of its output;
- **tight**: every reported box (strided boxes counted by their own positions) holds at least one
  differing position.

Random variables are the ones the verifier uses: one per runtime input *name*, and one per weight
*content* (:func:`~tvm_pet.ir.weight_key`), shared by both programs. Two weights with equal shape
and values are therefore the same variable even under different names, and a weight with one
element changed is a different variable altogether.

Tolerance. Every operator is a sum of products with non-negative structural coefficients (average
pooling divides by a positive count), so evaluating a program on the absolute values of its
variables gives ``S(x) = sum |term|``, a bound on the magnitude of everything that was added. The
float64 rounding error of the result is at most about ``n * 2**-53 * S(x)`` for reductions of
length ``n``. A position differs when ``|a - b| > RTOL * (S0(x) + S1(x))`` with ``RTOL = 1e-9``:
a million times the roundoff of a 4608-term reduction, and, since a genuine difference is a
non-zero polynomial of standard normal variables, a chance of about ``1e-9`` per trial of hiding
one. Positions where both bounds are exactly zero hold exact zeros on both sides.

>>> from tvm_pet.example_pairs import figure1_pair
>>> masks = differing_masks(*figure1_pair())
>>> int(masks["y"].sum()) > 0
True
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from tvm_pet.errors import VerificationError
from tvm_pet.ir.node import Program, Shape, weight_key
from tvm_pet.verify.interpreter import evaluate

#: Relative tolerance against the sum of absolute terms (see the module docstring).
RTOL = 1e-9

Sampler = Callable[[Shape], np.ndarray]


def check_same_signature(original: Program, candidate: Program) -> None:
    """Raise :class:`VerificationError` unless inputs and outputs agree in names and shapes."""
    ins0 = {t.name: t.shape for t in original.inputs}
    ins1 = {t.name: t.shape for t in candidate.inputs}
    outs0 = [(o, original.shapes[o]) for o in original.outputs]
    outs1 = [(o, candidate.shapes[o]) for o in candidate.outputs]
    if ins0 != ins1 or outs0 != outs1:
        raise VerificationError(f"programs differ in signature: inputs {ins0} vs {ins1}, "
                                f"outputs {outs0} vs {outs1}; a candidate must keep both")


def shared_values(programs: Sequence[Program], sample: Sampler
                  ) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """Draw one value per input name and one per weight content key, shared by ``programs``.

    Args:
        programs: programs with the same runtime inputs.
        sample: ``sample(shape) -> array``, called once per distinct variable.

    Returns:
        ``(inputs, weights)``: the runtime inputs by name, and for each program its weights by name.
    """
    inputs = {t.name: sample(t.shape) for t in programs[0].inputs}
    by_key: dict[str, np.ndarray] = {}
    weights = []
    for p in programs:
        named = {}
        for name, value in p.weights.items():
            key = weight_key(value)
            if key not in by_key:
                by_key[key] = sample(tuple(value.shape))
            named[name] = by_key[key]
        weights.append(named)
    return inputs, weights


def differing_masks(original: Program, candidate: Program, trials: int = 3, seed: int = 0,
                    rtol: float = RTOL) -> dict[str, np.ndarray]:
    """Mark every output position where the two programs differ on some random draw.

    Args:
        original: the reference program.
        candidate: a program with the same input and output names and shapes.
        trials: independent standard normal draws; a position differs if it differs in any.
        seed: seed of the draws.
        rtol: tolerance relative to the sum of absolute terms (see the module docstring).

    Returns:
        For each output name, a boolean array of its shape, True where the programs differ.

    Raises:
        VerificationError: the signatures differ, or a program is not multi-linear.
    """
    check_same_signature(original, candidate)
    for p in (original, candidate):
        if not p.is_multilinear():
            raise VerificationError(f"program {p.name!r} has non-linear (OPAQUE) nodes; the "
                                    f"brute-force tolerance assumes sums of products")
    rng = np.random.default_rng(seed)
    masks = {o: np.zeros(original.shapes[o], bool) for o in original.outputs}
    for _ in range(trials):
        inputs, (w0, w1) = shared_values([original, candidate],
                                         lambda shape: rng.standard_normal(shape))
        a = evaluate(original, inputs, np.float64, weights=w0)
        b = evaluate(candidate, inputs, np.float64, weights=w1)
        abs_in = {k: np.abs(v) for k, v in inputs.items()}
        s0 = evaluate(original, abs_in, np.float64, weights={k: np.abs(v) for k, v in w0.items()})
        s1 = evaluate(candidate, abs_in, np.float64, weights={k: np.abs(v) for k, v in w1.items()})
        for o in original.outputs:
            masks[o] |= np.abs(a[o] - b[o]) > rtol * (s0[o] + s1[o])
    return masks


@dataclasses.dataclass(frozen=True)
class OutputCheck:
    """The comparison of one output's reported boxes with its brute-force mask."""

    name: str
    shape: Shape
    differing: int                    # positions where brute force sees a difference
    boxes: int                        # boxes reported
    covered: int                      # positions inside the union of the boxes
    missed: int                       # differing positions outside every box (unsound)
    missed_examples: tuple            # a few of them
    empty_boxes: tuple                # reported boxes without a differing position (not tight)
    malformed_boxes: tuple            # boxes of the wrong rank or outside the output
    flag_ok: bool                     # the output's `equivalent` agrees with brute force

    @property
    def sound(self) -> bool:
        return self.missed == 0 and not self.malformed_boxes

    @property
    def tight(self) -> bool:
        return not self.empty_boxes and not self.malformed_boxes


@dataclasses.dataclass(frozen=True)
class OracleReport:
    """Brute force against a :class:`~tvm_pet.verify.verifier.VerifyResult`, output by output."""

    outputs: tuple[OutputCheck, ...]
    result_equivalent: bool
    missing_outputs: tuple[str, ...] = ()

    @property
    def sound(self) -> bool:
        """Every differing position lies in a reported box of its output."""
        return not self.missing_outputs and all(o.sound for o in self.outputs)

    @property
    def tight(self) -> bool:
        """Every reported box contains at least one differing position."""
        return not self.missing_outputs and all(o.tight for o in self.outputs)

    @property
    def consistent(self) -> bool:
        """The `equivalent` flags (per output and overall) agree with brute force."""
        return (all(o.flag_ok for o in self.outputs)
                and self.result_equivalent == all(o.differing == 0 for o in self.outputs))

    @property
    def differing(self) -> int:
        return sum(o.differing for o in self.outputs)

    @property
    def ok(self) -> bool:
        return self.sound and self.tight and self.consistent

    def explain(self) -> str:
        """A few lines for an assertion message."""
        lines = [f"sound={self.sound} tight={self.tight} consistent={self.consistent} "
                 f"(result.equivalent={self.result_equivalent})"]
        if self.missing_outputs:
            lines.append(f"  outputs not reported: {list(self.missing_outputs)}")
        for o in self.outputs:
            lines.append(f"  {o.name}{list(o.shape)}: {o.differing} differing, {o.boxes} boxes "
                         f"covering {o.covered}, {o.missed} missed {list(o.missed_examples)}, "
                         f"{len(o.empty_boxes)} empty {list(o.empty_boxes)[:3]}, "
                         f"malformed {list(o.malformed_boxes)[:3]}, flag_ok={o.flag_ok}")
        return "\n".join(lines)

    __str__ = explain


def _box_fits(box, shape: Shape) -> bool:
    rank = len(shape)
    if not (len(box.lo) == len(box.hi) == len(box.step) == rank):
        return False
    return all(0 <= l < h <= n and s >= 1 for l, h, s, n in zip(box.lo, box.hi, box.step, shape))


def check_output(name: str, shape: Shape, mask: np.ndarray, diff) -> OutputCheck:
    """Compare one reported output (an ``OutputDiff``) with its brute-force mask."""
    covered = np.zeros(shape, bool)
    empty, malformed = [], []
    for box in diff.boxes:
        if not _box_fits(box, shape):
            malformed.append(box)
            continue
        index = box.index()
        covered[index] = True
        if not mask[index].any():
            empty.append(box)
    missed = np.argwhere(mask & ~covered)
    return OutputCheck(name=name, shape=tuple(shape), differing=int(mask.sum()),
                       boxes=len(diff.boxes), covered=int(covered.sum()), missed=len(missed),
                       missed_examples=tuple(tuple(int(i) for i in p) for p in missed[:5]),
                       empty_boxes=tuple(empty), malformed_boxes=tuple(malformed),
                       flag_ok=bool(diff.equivalent) == (not mask.any()))


def compare_with_report(masks: Mapping[str, np.ndarray], result) -> OracleReport:
    """Check a verifier result against brute-force masks.

    Args:
        masks: from :func:`differing_masks`.
        result: a ``VerifyResult`` (``.equivalent``, ``.outputs`` of ``OutputDiff`` with ``name``,
            ``equivalent`` and ``boxes``).

    Returns:
        An :class:`OracleReport`; ``report.ok`` when sound, tight and consistent.
    """
    reported = {o.name: o for o in result.outputs}
    checks = tuple(check_output(name, mask.shape, mask, reported[name])
                   for name, mask in masks.items() if name in reported)
    missing = tuple(name for name in masks if name not in reported)
    return OracleReport(outputs=checks, result_equivalent=bool(result.equivalent),
                        missing_outputs=missing)
