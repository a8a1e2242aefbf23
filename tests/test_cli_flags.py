"""`tvm-pet optimize` and `tune` as a user reads them: a short ``--help`` with ``--help-all``
beside it, every flag still taking the values it took, a summary of a few lines with
``--verbose`` for the full account, and ``explore --emit`` naming tensors as the model does."""
import dataclasses
import importlib
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.test_pipeline import FakeToolchain
from tvm_pet.cli import _driver_options, _search_config, build_parser, main

# ------------------------------------------------------------------------------------ --help

#: The options ``optimize --help`` shows, by group (``model`` is the positional).
SHOWN = {"optimize": ["--target", "--input-shape", "--layout", "--fast-math", "--winograd",
                      "--trials", "--budget", "--time-limit", "--records", "--seed",
                      "--out", "--progress", "--quiet", "--verbose"]}
SHOWN["tune"] = [flag for flag in SHOWN["optimize"] if flag != "--out"]


def _help(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    assert done.value.code == 0
    return capsys.readouterr().out


def _listed(text: str) -> list[str]:
    """The options a help text lists: the first word of each option line."""
    return [line.split()[0].rstrip(",") for line in text.splitlines()
            if line.startswith("  -")]


def _options(command: str) -> set[str]:
    """Every option string of a subcommand's parser."""
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    return {s for a in sub._actions for s in a.option_strings}


@pytest.mark.parametrize("command", ["optimize", "tune"])
def test_help_lists_the_options_a_user_sets_and_help_all_lists_every_one(capsys, command):
    short = _help(capsys, command, "--help")
    listed = [flag for flag in _listed(short) if flag not in ("-h", "--help-all")]
    assert listed == SHOWN[command] and len(listed) <= 14
    for group in ("what to build:", "budget:", "output:"):
        assert group in short
    assert "model" in short and "--depth" not in short and "--columns" not in short
    full = _help(capsys, command, "--help-all")
    assert set(_listed(full)) | {"--help"} == _options(command)  # -h, --help: one line
    assert "--depth" in full and "search (advanced):" in full and "tuning (advanced):" in full
    # the advanced options are hidden again once --help-all has shown them
    assert _listed(_help(capsys, command, "--help")) == _listed(short)


@pytest.mark.parametrize("command", ["optimize", "tune"])
def test_help_texts_say_what_an_option_does_not_what_it_measured(capsys, command):
    full = _help(capsys, command, "--help-all")
    for word in ("benchmarks/", "results/", "docs/", ".md", " ms ", "x1."):
        assert word not in full, word


# --------------------------------------------------------------------- every flag still works

#: ``build_parser()``'s values of ``optimize`` with no option but ``--out``, and of ``tune``.
DEFAULTS = {"tune": {
    "command": "tune", "model": "m.onnx", "target": "llvm", "trials": 64, "budget": None,
    "charge": "beside", "mutant_share": 0.25, "promising": 4, "second_screen": None,
    "screen_trials": None, "seed": 0, "depth": 3, "rounds": 1, "topk": 4, "winograd": False,
    "im2col": False, "columns": False, "time_limit": None, "no_tvm_rewrites": False,
    "layout": "auto", "fast_math": False, "tvm_default": False, "input_shape": [],
    "progress": False, "quiet": False, "records": None, "rpc": None}}
DEFAULTS["optimize"] = {
    **DEFAULTS["tune"], "command": "optimize", "trials": None, "out": "o", "cost": "measured",
    "search": "algorithm2",
    "confirm": 3, "first_kept": False, "no_second_look": False, "second_look_kernels": 8,
    "no_replication": False, "timing_processes": 2, "dry_run": False, "arch": "sm_90"}

#: Each flag of both commands with a valid value, and the values it sets.
BOTH = [
    (["--target", "llvm -mcpu=haswell"], {"target": "llvm -mcpu=haswell"}),
    (["--trials", "8"], {"trials": 8}),
    (["--budget", "30m"], {"budget": "30m"}),
    (["--charge", "inside", "--budget", "2000"], {"charge": "inside", "budget": "2000"}),
    (["--mutant-share", "0.5"], {"mutant_share": 0.5}),
    (["--promising", "2"], {"promising": 2}),
    (["--second-screen", "2"], {"second_screen": 2}),
    (["--screen-trials", "16"], {"screen_trials": 16}),
    (["--seed", "3"], {"seed": 3}),
    (["--depth", "2"], {"depth": 2}),
    (["--rounds", "2"], {"rounds": 2}),
    (["--topk", "3"], {"topk": 3}),
    (["--winograd"], {"winograd": True}),
    (["--im2col"], {"im2col": True}),
    (["--columns"], {"columns": True}),
    (["--time-limit", "100"], {"time_limit": 100.0}),
    (["--no-tvm-rewrites"], {"no_tvm_rewrites": True}),
    (["--layout", "NHWC"], {"layout": "NHWC"}),
    (["--layout", "NCHW"], {"layout": "NCHW"}),
    (["--fast-math"], {"fast_math": True}),
    (["--tvm-default"], {"tvm_default": True}),
    (["--input-shape", "x:1,3,8,8", "--input-shape", "y:2"],
     {"input_shape": [("x", (1, 3, 8, 8)), ("y", (2,))]}),
    (["--progress"], {"progress": True}),
    (["--quiet"], {"quiet": True}),
    (["--records", "recs"], {"records": "recs"}),
    (["--rpc", "host:9190:key"], {"rpc": "host:9190:key"}),
]
OPTIMIZE_ONLY = [
    (["--cost", "analytic"], {"cost": "analytic"}),
    (["--search", "eqsat"], {"search": "eqsat"}),
    (["--confirm", "2"], {"confirm": 2}),
    (["--first-kept"], {"first_kept": True}),
    (["--no-second-look"], {"no_second_look": True}),
    (["--second-look-kernels", "4"], {"second_look_kernels": 4}),
    (["--no-replication"], {"no_replication": True}),
    (["--timing-processes", "1"], {"timing_processes": 1}),
    (["--dry-run"], {"dry_run": True}),
    (["--arch", "sm_80"], {"arch": "sm_80"}),
]
CASES = ([("optimize", words, values) for words, values in BOTH + OPTIMIZE_ONLY]
         + [("tune", words, values) for words, values in BOTH])


@pytest.mark.parametrize("command, words, values", CASES,
                         ids=[f"{c}{w[0]}" for c, w, _ in CASES])
def test_every_flag_parses_to_the_values_it_did(command, words, values):
    base = [command, "m.onnx"] + (["--out", "o"] if command == "optimize" else [])
    args = build_parser().parse_args(base + words)
    parsed = {k: v for k, v in vars(args).items() if k != "func"}
    assert parsed == {**DEFAULTS[command], **values, "verbose": False}
    # and the options built from them take it (with --budget, the time limit it implies)
    args.time_limit = args.time_limit or 240.0
    assert _search_config(args).depth == args.depth
    assert _driver_options(args).seed == args.seed
    assert _driver_options(args).prepack is not args.tvm_default


def test_every_flag_of_both_commands_is_listed_in_the_cases():
    for command, cases in (("optimize", BOTH + OPTIMIZE_ONLY), ("tune", BOTH)):
        covered = {words[0] for words, _ in cases} | {"--verbose", "--help", "--help-all", "-h"}
        covered |= {"--out"} if command == "optimize" else set()
        assert covered == _options(command), command


def test_columns_is_accepted_says_it_does_nothing_and_is_not_passed_on(tmp_path, capsys,
                                                                       monkeypatch):
    from tvm_pet.cli import commands
    ran = []
    monkeypatch.setattr(commands, "_cmd_tune", lambda args: ran.append(_search_config(args)) or 0)
    assert main(["tune", str(tmp_path / "m.onnx"), "--columns"]) == 0
    (config,) = ran
    assert not hasattr(config, "columns")
    err = capsys.readouterr().err.strip()
    assert err == "tvm-pet tune: --columns no longer has an effect; the search runs without it"


def test_the_second_screen_flags_are_accepted_say_they_do_nothing_and_are_not_passed_on(
        tmp_path, capsys, monkeypatch):
    from tvm_pet.cli import commands
    ran = []
    monkeypatch.setattr(commands, "_cmd_tune", lambda args: ran.append(_driver_options(args)) or 0)
    assert main(["tune", str(tmp_path / "m.onnx"), "--second-screen", "0",
                 "--screen-trials", "16"]) == 0
    (options,) = ran
    assert not hasattr(options, "second_screen") and not hasattr(options, "screen_trials")
    assert capsys.readouterr().err.splitlines() == [
        "tvm-pet tune: --second-screen no longer has an effect; the screen alone ranks the "
        "mutants",
        "tvm-pet tune: --screen-trials no longer has an effect; no mutant is short-tuned to "
        "rank it"]
    assert main(["tune", str(tmp_path / "m.onnx")]) == 0
    assert capsys.readouterr().err == ""  # neither given: nothing said


# ----------------------------------------------------------------- the summary and --verbose

@dataclasses.dataclass(frozen=True)
class Timing:
    """One side's samples, spread over two processes (``groups``, their medians ``layouts``)."""

    groups: tuple[tuple[float, ...], ...]

    @property
    def samples(self):
        return tuple(s for g in self.groups for s in g)

    @property
    def median(self):
        return float(np.median(self.samples))

    @property
    def layouts(self):
        return tuple(float(np.median(g)) for g in self.groups)


def _process(median: float) -> tuple[float, ...]:
    return tuple(median * (1 + d) for d in (-0.02, -0.01, -0.01, 0.0, 0.0, 0.01, 0.01, 0.02))


@dataclasses.dataclass(frozen=True)
class Executable:
    program: object


class PetWins(FakeToolchain):
    """The pipeline tests' fake toolchain (no TVM: a module is the program, an executable runs
    on the NumPy interpreter), with records for every kernel, and PET's program timed x1.2
    faster in one timing process and x1.3 in the other."""

    def kernel_records(self, module):
        return len(module.nodes), len(module.nodes)

    def records_plan(self, module):
        from tvm_pet.tune.records_plan import RecordsPlan
        n = len(module.nodes)
        return RecordsPlan("fake", "fake-records", ("other",), n, n - 1, 1)

    def build(self, module):
        return Executable(module)

    def time(self, executables, inputs, *, rounds, number, repeat):
        return {"baseline": Timing((_process(1.2e-3), _process(1.3e-3))),
                "optimized": Timing((_process(1e-3), _process(1e-3)))}


@pytest.fixture
def pet_wins(tmp_path, monkeypatch):
    """``tvm-pet optimize`` on a dilated conv, on :class:`PetWins`, with a cost that makes
    dilation slow: PET's program (the conv rewritten) is kept."""
    pytest.importorskip("tvm")
    pipeline = importlib.import_module("tvm_pet.pipeline.optimize")  # the module, not the function
    from tests.dilated import PenaliseDilation, dilated_model
    real = pipeline.optimize

    def on_fake(model, out, config, options):
        return real(model, out, config, options, toolchain=PetWins(), cost=PenaliseDilation())

    monkeypatch.setattr(pipeline, "optimize", on_fake)
    model = tmp_path / "m.onnx"
    onnx.save(dilated_model(), model)
    # the fake lowers every layout alike: the layout is asked (tests/test_layout.py tests auto)
    return [str(model), "--out", str(tmp_path / "out"), "--trials", "0", "--quiet",
            "--layout", "NCHW"]


def _optimize(capsys, argv) -> list[str]:
    assert main(["optimize", *argv]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_summary_is_a_few_lines_with_the_decision_speedup_and_report(pet_wins, capsys,
                                                                          tmp_path):
    lines = _optimize(capsys, pet_wins)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["kept"] == "optimized" and report["speedup"] == pytest.approx(1.249, abs=1e-3)
    assert len(lines) <= 8, lines
    assert lines[0] == (f"{pet_wins[0]}: kept PET's program, ×1.25 faster than TVM's build of "
                        "the original (×1.20–×1.30 over 2 processes)")
    assert lines[1] == (f"  target fake, NCHW, as asked; PET's outputs are within "
                        f"{report['max_abs_err']:.1e} of the original's")
    (applied,) = report["applied"]
    assert lines[2] == f"  applied 1 rewrite: {applied['mutant']}"
    kernels = report["kernels"]["total"]
    assert lines[3] == (f"  kernels: tuned, all {kernels} with records ({kernels - 1} own, 1 "
                        "borrowed from other); 0 new trials")
    assert lines[4].startswith("  coverage: 1 of 1 multi-linear subprograms searched; ")
    assert lines[-1].startswith(f"  wrote {tmp_path / 'out' / 'report.json'} ")


def test_report_json_holds_the_records_plans_counts_and_the_summary_prints_them(
        pet_wins, capsys, tmp_path, monkeypatch):
    """The counts are data: the summary prints them from ``records_counts``, whatever words
    the records plan's line uses."""
    from tvm_pet.tune.records_plan import RecordsPlan
    monkeypatch.setattr(RecordsPlan, "summary", lambda self, *args, **kwargs: "reworded")
    lines = _optimize(capsys, pet_wins)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    kernels = report["kernels"]["total"]
    assert report["records_plan"] == "reworded"
    assert report["records_counts"] == {"kernels": kernels, "own": kernels - 1, "borrowed": 1,
                                        "untuned": 0, "lenders": ["other"]}
    assert lines[3] == (f"  kernels: tuned, all {kernels} with records ({kernels - 1} own, 1 "
                        "borrowed from other); 0 new trials")


def test_verbose_prints_the_full_account(pet_wins, capsys, tmp_path):
    lines = _optimize(capsys, pet_wins + ["--verbose"])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    starts = [f"{pet_wins[0]} on fake: kept the optimized model", "  baseline ", "  candidate ",
              "  first look: x1.249 (rank test p = ", "  speedup   x1.249   rule: keep ",
              "  search ", "  applied ", "  imported with ", "  coverage: ",
              "  records for fake: ", "  decided on tuned kernels ", "  timing: one call ",
              "  total ", f"  wrote {tmp_path / 'out'}/report.json, optimized.so, baseline.so, "]
    for start in starts:
        assert any(line.startswith(start) for line in lines), (start, lines)
    assert len(lines) > 8
    assert f"{report['speedup']:.3f}" == "1.249"


def test_advanced_flags_run_end_to_end_and_the_summary_stays_short(tmp_path, capsys):
    """The real toolchain, records only: the hidden flags take effect (one candidate at most,
    timed in this process, once), --columns says it does nothing, and the summary is short."""
    pytest.importorskip("tvm")
    from tests.dilated import dilated_model
    model = tmp_path / "m.onnx"
    onnx.save(dilated_model(), model)
    assert main(["optimize", str(model), "--out", str(tmp_path / "out"), "--trials", "0",
                 "--records", str(tmp_path / "records"), "--quiet", "--columns", "--depth", "2",
                 "--topk", "2", "--cost", "analytic", "--confirm", "1", "--no-second-look",
                 "--no-replication", "--timing-processes", "1"]) == 0
    printed = capsys.readouterr()
    assert "--columns no longer has an effect" in printed.err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["cost_model"] == "analytic" and report["candidates_confirmed"] <= 1
    assert all(not look.get("process_ratios") for look in report["looks"])
    assert not any(look["what"].startswith(("second look", "replication"))
                   for look in report["looks"])
    lines = printed.out.splitlines()
    assert len(lines) <= 8, lines
    kept = "kept the original: " if report["kept"] == "original" else "kept PET's program, "
    assert lines[0].startswith(f"{model}: {kept}")
    assert any(line.startswith("  kernels: untuned, 0 of ") for line in lines)
    assert "--verbose" in lines[-1] and str(tmp_path / "out" / "report.json") in lines[-1]


# ---------------------------------------------------------------------------- explore --emit

def two_outputs_model() -> onnx.ModelProto:
    """x (named ``input.1``, which TVM renames) -> MatMul -> ``logits`` -> Relu -> MatMul ->
    ``score.0``: two multi-linear subprograms, each ending in an output of the model, the second
    starting at the Relu's output, which the model does not name as an output."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["input.1", "w"], ["logits"]),
             helper.make_node("Relu", ["logits"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["score.0"])]
    value = lambda name, shape: helper.make_tensor_value_info(  # noqa: E731
        name, TensorProto.FLOAT, shape)
    graph = helper.make_graph(nodes, "two_outputs", [value("input.1", [1, 8])],
                              [value("score.0", [1, 4]), value("logits", [1, 8])], [w, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _names(path) -> tuple[list[str], list[str]]:
    graph = onnx.load(path).graph
    inits = {i.name for i in graph.initializer}
    return [i.name for i in graph.input if i.name not in inits], [o.name for o in graph.output]


def test_explore_emit_names_inputs_and_outputs_as_the_model_does(tmp_path, capsys):
    pytest.importorskip("tvm")
    import onnxruntime as ort
    path = tmp_path / "m.onnx"
    model = two_outputs_model()
    onnx.save(model, path)
    assert main(["explore", str(path), "--emit", str(tmp_path / "out")]) == 0
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    files = {s["name"]: s for s in index["subprograms"]}
    assert set(files) == {"sub0", "sub1"}
    first, second = files["sub0"]["original"], files["sub1"]["original"]
    assert _names(first) == (["input.1"], ["logits"])
    (inner,), outputs = _names(second)
    assert outputs == ["score.0"] and inner not in ("r", "logits", "input.1")  # generated
    for sub in files.values():  # every mutant takes and gives what its subprogram does
        for m in sub["mutants"]:
            assert _names(m["file"]) == _names(sub["original"])
    # the emitted first subprogram computes the model's output of that name
    x = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    want = dict(zip(["score.0", "logits"],
                    ort.InferenceSession(model.SerializeToString()).run(None, {"input.1": x})))
    got = ort.InferenceSession(first).run(["logits"], {"input.1": x})[0]
    np.testing.assert_allclose(got, want["logits"], rtol=1e-5, atol=1e-5)


def test_explore_emit_of_a_one_subprogram_model_names_its_output(tmp_path, capsys):
    pytest.importorskip("tvm")
    from tvm_pet.models import build_model
    path = tmp_path / "conv5x5.onnx"
    model = build_model("conv5x5")
    onnx.save(model, path)
    assert main(["explore", str(path), "--emit", str(tmp_path / "out"), "--time-limit",
                 "60"]) == 0
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    (sub,) = index["subprograms"]
    given = ([i.name for i in model.graph.input], [o.name for o in model.graph.output])
    assert _names(sub["original"]) == given
    assert sub["mutants"] and all(_names(m["file"]) == given for m in sub["mutants"])
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith(f"{path}: 1 multi-linear subprograms") and len(out) <= 4


def test_the_summary_signs_fall_back_to_ascii_where_the_stream_cannot_write_them():
    import io

    from tvm_pet.cli import _Signs
    assert _Signs.for_stream(io.TextIOWrapper(io.BytesIO(), encoding="ascii")) == _Signs("x", "-")
    assert _Signs.for_stream(io.TextIOWrapper(io.BytesIO(), encoding="utf-8")) == _Signs()
    assert _Signs.for_stream(io.StringIO()) == _Signs()


def test_tune_prints_a_few_lines_and_its_json_with_verbose(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tvm")
    from tests.dilated import dilated_model
    from tvm_pet.pipeline import tune as tune_stage
    from tvm_pet.pipeline.plan import Pick, TuningPlan
    from tvm_pet.pipeline.tune import TuneSummary
    summary = TuneSummary("recs", tuning_time_s=12.4, new_trials=40, tasks=3, trials_per_task=8,
                          plan=TuningPlan((Pick("sub0", ("Pad", "Conv"), 0.9, 0, 0.05),)),
                          mutant_trials=8)
    monkeypatch.setattr(tune_stage, "tune_model", lambda *args, **kwargs: summary)
    model = tmp_path / "m.onnx"
    onnx.save(dilated_model(), model)
    # a layout asked: nothing tuned to choose one (tests/test_layout.py tests auto)
    argv = ["tune", str(model), "--trials", "8", "--quiet", "--layout", "NCHW"]
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{model} for llvm: tuned 8 trials per kernel, the original and 1 of PET's mutants",
        "  40 new trials (32 for the original's kernels, 8 for the mutants') in 12 s",
        "  records: recs; tvm-pet optimize reads them (--verbose: the full summary as JSON)"]
    assert main(argv + ["--verbose"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed.pop("layout") == {"layout": "NCHW", "asked": "NCHW", "reason": "asked",
                                     "times_ms": {}, "nchw_over_nhwc": None, "new_trials": 0,
                                     "tuning_s": 0.0}
    assert printed == summary.to_json()


def test_explore_counts_the_mutants_and_lists_them_with_verbose(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tvm")
    from tests.dilated import dilated_chain
    from tvm_pet.cli import commands
    from tvm_pet.onnx import export_model
    model = tmp_path / "chain.onnx"
    onnx.save(export_model(dilated_chain()), model)  # three convs, each a subprogram
    monkeypatch.setattr(commands, "EXPLORE_LISTED", 1)
    assert main(["explore", str(model), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["subprograms"]
    assert len(found) == 3 and all(s["mutants"] for s in found)
    assert main(["explore", str(model)]) == 0
    short = capsys.readouterr().out.splitlines()
    rest = sum(len(s["mutants"]) for s in found[1:])
    assert short[1].startswith(f"  {found[0]['name']} [")
    assert short[2:] == [f"  and 2 more subprograms, with {rest} verified mutants",
                         "  --verbose lists the mutants"]
    assert main(["explore", str(model), "--verbose", "--max-list", "2"]) == 0
    full = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("    ") for line in full) == sum(
        min(2, len(s["mutants"])) for s in found)


def test_tune_says_which_layout_auto_chose_and_the_trials_it_took():
    from types import SimpleNamespace

    from tvm_pet.cli import tune_lines
    tuning = {"records": "recs", "tasks": 3, "trials_per_task": 8, "budget": None,
              "new_trials": 8, "mutant_trials": 8, "tuning_time_s": 5.0, "tuned_mutants": [],
              "layout": {"layout": "NHWC", "asked": "auto", "new_trials": 40,
                         "reason": "timed x1.30 faster than NCHW on the tuned original"}}
    lines = tune_lines(tuning, SimpleNamespace(model="m.onnx", target="llvm"))
    assert lines[2] == ("  layout: NHWC (timed x1.30 faster than NCHW on the tuned original); "
                        "40 more trials tuned the original in both layouts")
    asked = dict(tuning, layout=dict(tuning["layout"], asked="NHWC"))
    assert not any("layout" in line for line in tune_lines(asked, SimpleNamespace(
        model="m.onnx", target="llvm")))
