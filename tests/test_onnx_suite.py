"""PETPass is transparent on onnx's own backend test material (see ``tests/onnx_suite.py``).

Every case TVM's frontend imports and runs correctly still gives the reference outputs after
PETPass, changed or not, and after the adapter's lift-and-lower round trip. The default run
takes a sample of node cases and one light model; ``-m slow`` runs all 1884 node cases (about
3 minutes per cost model) and all nine light models (about 4 minutes).
"""
import pytest

pytest.importorskip("tvm")

from tests.onnx_suite import (NODE_SAMPLE, REWRITE_CONFIG, FewerOperators,  # noqa: E402
                               light_model_names, run_light_models, run_node_cases)

#: Full runs are skipped unless selected with ``-m slow`` (pytest evaluates the string).
only_when_selected = pytest.mark.skipif("'slow' not in config.getoption('markexpr')",
                                        reason="the whole onnx backend suite; select it with "
                                               "-m slow")


def _assert_transparent(result: dict) -> None:
    assert result["crashes"] == 0, result["failures"]
    assert result["mismatches"] == 0, result["failures"]
    assert result["round_trip_crashes"] == 0 and result["round_trip_mismatches"] == 0, \
        result["failures"]
    assert result["compared"] == result["unchanged"] + result["optimized"]
    assert result["total"] == result["compared"] + result["tvm_cannot_total"]


def test_node_sample_is_unchanged_or_still_exact():
    result = run_node_cases(names=NODE_SAMPLE)
    _assert_transparent(result)
    assert result["compared"] >= len(NODE_SAMPLE) - 2  # the sample was picked to run in TVM
    assert result["optimized"] >= 1, "the sample holds a case PETPass changes"
    assert result["round_trip_compared"] >= 10


def test_node_cases_rewritten_by_petpass_keep_reference_outputs():
    """Under a cost preferring fewer operators PETPass changes these three; still exact."""
    names = ("test_spacetodepth_example", "test_depthtospace_crd_mode_example", "test_shrink_soft")
    result = run_node_cases(names=names, cost=FewerOperators())
    _assert_transparent(result)
    assert result["optimized"] == 3, result["optimized_cases"]


def test_light_model_sample():
    result = run_light_models(["squeezenet"])
    _assert_transparent(result)
    assert result["compared"] == 1 and result["round_trip_compared"] == 1


def test_light_models_are_the_shipped_nine():
    assert {"resnet50", "squeezenet", "vgg19", "densenet121"} <= set(light_model_names())


@pytest.mark.slow
@only_when_selected
def test_all_node_cases():
    result = run_node_cases()
    _assert_transparent(result)
    assert result["total"] > 1500 and result["compared"] > 500
    assert result["optimized"] >= 1


@pytest.mark.slow
@only_when_selected
def test_all_node_cases_under_a_cost_that_rewrites_more():
    result = run_node_cases(cost=FewerOperators())
    _assert_transparent(result)
    assert result["optimized"] >= 10


@pytest.mark.slow
@only_when_selected
def test_all_light_models():
    result = run_light_models()
    _assert_transparent(result)
    assert result["total"] == len(light_model_names()) and result["compared"] >= 1


@pytest.mark.slow
@only_when_selected
def test_light_model_rewritten_by_petpass_keeps_reference_outputs():
    """Under a cost preferring fewer operators PETPass changes Inception-v1; still exact."""
    from tvm_pet.search.config import SearchConfig
    result = run_light_models(["inception_v1"], cost=FewerOperators(),
                              config=SearchConfig(**REWRITE_CONFIG))
    _assert_transparent(result)
    assert result["optimized"] == 1
