"""Bad input gives a clear error or passes through unchanged, never a crash or a hang.

The cases live in ``tests/bad_inputs.py`` (shared with ``benchmarks/reliability.py``); cases an
older test already checks (``covered_by``) are not run twice. Huge shapes are bounded by a size
guard, not by a timeout: those cases allocate nothing large.
"""
import pytest

pytest.importorskip("tvm")

from tests.bad_inputs import CASES, run_bad_inputs, run_case  # noqa: E402
from tvm_pet.verify.limits import MAX_TENSOR_ELEMENTS  # noqa: E402

NEW = [c for c in CASES if c.covered_by is None]
EXPECTED = {"cli": "clear_error", "api": "clear_error", "pass": "passed_through"}
#: Cases whose model TVM imports and runs: optimize takes them through, the
#: operator PET cannot lift left opaque.
GOES_THROUGH = {"unsupported-op/cli-optimize", "unsupported-op/api-optimize"}


@pytest.mark.parametrize("case", NEW, ids=[c.name for c in NEW])
def test_bad_input(case, tmp_path):
    outcome, detail = run_case(case, tmp_path)
    expected = "passed_through" if case.name in GOES_THROUGH else EXPECTED[case.entry]
    assert outcome == expected, detail


def test_every_input_kind_is_covered_at_each_entry_point():
    names = {c.name for c in CASES}
    for kind in ("corrupt", "unsupported-op", "dynamic-dim", "zero-size", "float16",
                 "bfloat16", "int32", "huge-conv"):
        assert any(n.startswith(kind + "/") for n in names), kind
    assert {n.split("/")[1] for n in names if n.startswith("mismatched-")} == {"cli-verify",
                                                                               "api-verify"}
    assert {"symbolic-dim/pass", "zero-size/pass", "float16/pass", "huge-conv/pass"} <= names


def test_run_bad_inputs_counts_add_up():
    cases = tuple(c for c in CASES if c.name in ("zero-size/api-import", "int32/pass"))
    result = run_bad_inputs(cases)
    assert result["tried"] == 2 and result["clear_errors"] == 1
    assert result["passed_through"] == 1 and result["crashes"] == result["wrong"] == 0
    assert [r["name"] for r in result["cases"]] == ["zero-size/api-import", "int32/pass"]


def test_size_limit_admits_common_models():
    """VGG's largest weight (25088 x 4096) is below the limit; the huge cases are above it."""
    assert 25088 * 4096 < MAX_TENSOR_ELEMENTS < 1 * 512 * 4096 * 4096
