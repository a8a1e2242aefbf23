"""The generic search finds each of the paper's case-study transformations at its real shape.

Whether a mutant is *chosen* depends on the cost; each test asserts that the transformation is
generated, verified, corrected when partially equivalent, and equal to the original.
"""
import time

import numpy as np
import pytest

from tvm_pet.search.case_studies import CASE_STUDIES
from tvm_pet.search.config import SearchConfig
from tvm_pet.search.generator import iter_mutants
from tvm_pet.verify.interpreter import evaluate
from tvm_pet.verify.verifier import verify


def first_match(case, limit=60.0):
    sub = case.build()
    start = time.perf_counter()
    mutants, stats = iter_mutants(sub, SearchConfig(depth=case.depth, time_limit=limit))
    for mutant in mutants:
        if case.found(sub, mutant.program):
            return sub, mutant, time.perf_counter() - start
    pytest.fail(f"{case.name}: not found ({stats.to_json()})")


@pytest.mark.parametrize("name", sorted(CASE_STUDIES))
def test_case_is_generated_verified_and_corrected(name):
    sub, mutant, seconds = first_match(CASE_STUDIES[name])
    # the verifier's own verdict on the corrected mutant, with fresh random values
    assert verify(sub, mutant.corrected, seed=11).equivalent
    if mutant.partially_equivalent:
        assert mutant.corrected_boxes > 0 and len(mutant.corrected.nodes) > len(mutant.program.nodes)
    x = {t.name: np.random.default_rng(3).standard_normal(t.shape) for t in sub.inputs}
    want = evaluate(sub, x, np.float64)
    got = evaluate(mutant.corrected, x, np.float64)
    for o in sub.outputs:
        np.testing.assert_allclose(got[o], want[o], rtol=1e-9, atol=1e-9)
    print(f"{name}: {mutant.ops} {'partial' if mutant.partially_equivalent else 'exact'} "
          f"in {seconds:.2f} s")
