"""Do two float outputs agree up to float32 rounding? The one tolerance that the record check
(:mod:`tvm_pet.tune.record_check`: a tuned schedule against its kernel) and the confirmation
(:func:`tvm_pet.pipeline.confirm.check_outputs`: a candidate's compiled module against the
original's) apply, without TVM.

>>> outputs_agree(np.array([100.0, 1.0]), np.array([100.001, 1.0]))
True
>>> outputs_agree(np.array([0.0, 1.0]), np.array([0.58, 1.0]))
False
>>> outputs_agree(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))
True
"""
from __future__ import annotations

import numpy as np

#: Relative tolerance, and absolute tolerance per unit of the reference's largest magnitude.
TOLERANCE = 1e-4


def outputs_agree(reference: np.ndarray, other: np.ndarray) -> bool:
    """True when ``other`` equals ``reference`` up to float32 rounding (relative to the larger of
    1 and the reference's largest finite magnitude); NaN where the reference has NaN counts as
    equal, and integer or boolean outputs must be equal.

    Args:
        reference: the trusted output.
        other: the output checked against it.

    Returns:
        Whether they agree (False when their shapes differ).
    """
    reference, other = np.asarray(reference), np.asarray(other)
    if reference.shape != other.shape:
        return False
    if reference.dtype.kind not in "fc":
        return bool(np.array_equal(reference, other))
    finite = np.abs(reference[np.isfinite(reference)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    return bool(np.allclose(reference, other, rtol=TOLERANCE, atol=TOLERANCE * scale,
                            equal_nan=True))
