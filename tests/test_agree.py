"""One float tolerance for the record check and the confirmation (tvm_pet.verify.agree), and the
confirmation's refusals of a candidate computing something else (no TVM needed)."""
import numpy as np
import pytest

from tvm_pet.errors import PetError
from tvm_pet.pipeline.confirm import check_outputs
from tvm_pet.verify.agree import outputs_agree


def test_outputs_agree_up_to_float32_rounding_of_the_largest_magnitude():
    big = np.array([1000.0, 0.0], dtype="float32")
    assert outputs_agree(big, big + np.float32(0.05))  # 5e-5 of the largest magnitude
    assert not outputs_agree(big, big + np.float32(0.5))
    assert outputs_agree(np.array([np.nan, np.inf, 1.0]), np.array([np.nan, np.inf, 1.0]))
    assert not outputs_agree(np.array([1.0, 2.0]), np.array([1.0, np.nan]))
    assert not outputs_agree(np.zeros((2, 3)), np.zeros((3, 2)))
    assert outputs_agree(np.array([3, 4]), np.array([3, 4]))
    assert not outputs_agree(np.array([3, 4]), np.array([3, 5]))  # integers: exactly


def test_the_confirmation_refuses_a_candidate_computing_something_else():
    reference = [np.ones((2, 2), "float32"), np.arange(3, dtype="float32")]
    check_outputs(reference, [r + np.float32(1e-6) for r in reference], 0)  # rounding: kept
    with pytest.raises(PetError, match="candidate 1's compiled module differs .* by 0.5"):
        check_outputs(reference, [reference[0], reference[1] + np.float32(0.5)], 1)
    with pytest.raises(PetError, match=r"candidate 2's .* shape \[4\] where the original's is"):
        check_outputs(reference, [reference[0], np.zeros(4, "float32")], 2)
    with pytest.raises(PetError, match="candidate 3's .* gives 1 output"):
        check_outputs(reference, reference[:1], 3)
