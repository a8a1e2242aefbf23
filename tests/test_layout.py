"""The layout both sides are built in (``tvm_pet.pipeline.layout``): with ``auto``, NHWC only
where the rule keeps it over NCHW on the timed original, NCHW where nothing can be timed, and
the original tuned in both layouts first when the run tunes. The stage runs on the fake
toolchain of the pipeline tests; the TVM side of it (both layouts built and checked against
each other and onnxruntime) on a convolution with records made here."""
import dataclasses

import numpy as np
import pytest

from tests.dilated import dilated_chain
from tests.test_pipeline import FakeToolchain
from tvm_pet.ir import ProgramBuilder
from tvm_pet.pipeline import DriverOptions
from tvm_pet.pipeline.layout import choose_layout
from tvm_pet.pipeline.load import LoadedModel


def _two_layouts(program) -> LoadedModel:
    """A model the fake toolchain lowers in NCHW, and in NHWC on asking."""
    nchw = LoadedModel.from_program(program)
    nhwc = dataclasses.replace(nchw, layout="NHWC")
    return dataclasses.replace(nchw, relayout=lambda layout: nhwc)


def _matmul_only():
    g = ProgramBuilder("mm")
    x = g.input("x", (4, 8))
    w = g.weight("w", np.ones((8, 8), np.float32))
    return g.build([g.matmul(x, w)])


@pytest.mark.parametrize("ratio, chosen", [(1.5, "NHWC"), (1.0, "NCHW"), (0.7, "NCHW")])
def test_auto_builds_the_layout_the_rule_keeps(ratio, chosen):
    # the fake's timing: NCHW's median over NHWC's is ``ratio``, with 4 % spread
    toolchain = FakeToolchain(ratios=[ratio])
    picked = choose_layout(_two_layouts(dilated_chain(layers=1)),
                           DriverOptions(timing_rounds=2), toolchain)
    assert picked.choice.layout == chosen and picked.loaded.layout == chosen
    assert picked.choice.ratio == pytest.approx(ratio)
    assert set(picked.choice.times_ms) == {"NCHW", "NHWC"}
    assert len(toolchain.timed) == 1 and toolchain.tuned == []
    word = "faster than NCHW" if chosen == "NHWC" else ("slower" if ratio < 1 else "not surely")
    assert word in picked.choice.reason and "on the tuned original" in picked.choice.reason


def test_auto_tunes_the_original_in_both_layouts_when_the_run_tunes():
    toolchain = FakeToolchain(ratios=[1.5])
    picked = choose_layout(_two_layouts(dilated_chain(layers=1)),
                           DriverOptions(trials=16, seed=3, timing_rounds=2), toolchain)
    assert toolchain.tuned == [(16, 3), (16, 3)]
    assert picked.choice.new_trials == 32 and picked.choice.layout == "NHWC"


def test_auto_keeps_nchw_untimed_where_kernels_lack_records():
    toolchain = FakeToolchain(untuned=2)
    picked = choose_layout(_two_layouts(dilated_chain(layers=1)), DriverOptions(), toolchain)
    assert picked.choice.layout == "NCHW" and toolchain.timed == []
    assert "NCHW 2 of" in picked.choice.reason and "NHWC 2 of" in picked.choice.reason
    assert "--trials" in picked.choice.reason
    assert picked.choice.ratio is None


def test_auto_leaves_a_model_without_convolutions_and_a_program_in_nchw():
    toolchain = FakeToolchain(ratios=[2.0])
    no_convs = choose_layout(_two_layouts(_matmul_only()), DriverOptions(), toolchain)
    assert no_convs.choice.layout == "NCHW" and "no convolutions" in no_convs.choice.reason
    program = choose_layout(LoadedModel.from_program(dilated_chain(layers=1)), DriverOptions(),
                            toolchain)
    assert program.choice.layout == "NCHW" and "one layout" in program.choice.reason
    assert toolchain.timed == []


def test_a_layout_asked_is_built_as_asked_without_timing():
    toolchain = FakeToolchain(ratios=[2.0])
    picked = choose_layout(LoadedModel.from_program(dilated_chain(layers=1)),
                           DriverOptions(layout="NCHW"), toolchain)
    assert picked.choice.line() == "layout: NCHW, as asked" and toolchain.timed == []


def test_an_unknown_layout_is_one_clear_error():
    from tvm_pet.errors import PetError
    with pytest.raises(PetError, match="auto, NCHW or NHWC"):
        DriverOptions(layout="NCWH")


@pytest.mark.tuning
def test_auto_on_tvm_tunes_both_layouts_times_them_and_builds_the_faster(tmp_path):
    """Through TVM, at 1 trial per kernel: the original tuned in NCHW and NHWC, both built and
    timed, both sides built in the layout chosen, the libraries equal to onnxruntime; a rerun
    on the same records tunes nothing and times the layouts again."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import tvm
    from tvm import relax

    from tests.dilated import dilated_model
    from tvm_pet.pipeline import optimize_model
    from tvm_pet.search.config import SearchConfig

    model = tmp_path / "model.onnx"
    onnx.save(dilated_model(), model)
    options = DriverOptions(records_dir=str(tmp_path / "records"), trials=1, cost="analytic",
                            timing_processes=1, timing_rounds=3, second_look=False, confirm=1)
    config = SearchConfig(rounds=1, time_limit=60)
    report = optimize_model(model, tmp_path / "out", config, options)
    layout = report["layout"]
    assert layout["asked"] == "auto" and layout["new_trials"] > 0
    assert set(layout["times_ms"]) == {"NCHW", "NHWC"}
    chosen = layout["layout"]
    assert (chosen == "NHWC") == ("faster than NCHW" in layout["reason"])
    assert chosen == "NCHW" or layout["nchw_over_nhwc"] > 1
    script = (tmp_path / "out" / "optimized.py").read_text()
    assert ('data_layout="NHWC"' in script) == (chosen == "NHWC")
    x = np.random.default_rng(3).standard_normal((1, 8, 12, 12)).astype(np.float32)
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    for name in ("baseline.so", "optimized.so"):
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / "out" / name)),
                                  tvm.cpu())
        np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), want,
                                   rtol=1e-4, atol=1e-5, err_msg=name)
    again = optimize_model(model, tmp_path / "again", config, options)
    assert again["new_trials"] == 0 and again["layout"]["new_trials"] == 0
    assert set(again["layout"]["times_ms"]) == {"NCHW", "NHWC"}
