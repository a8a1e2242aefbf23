"""The benchmark scripts' tables (no timing): how a rerun's rows join the run of record, and how
the budget sweep counts PET / TVM."""
from __future__ import annotations

import json
import re

import pytest

from benchmarks import decision_rule, draws, equal_total, kinds, run, sweep


def _row(model: str, kept: str, ratio: float, tvm_ms: float = 10.0) -> dict:
    times = {k: {"median": v, "min": v, "max": v, "samples": [v]}
             for k, v in (("tvm", tvm_ms), ("pet", tvm_ms / ratio), ("onnxruntime", 1.0))}
    return {"model": model, "batch": 1, "kept": kept, "speedup_pet_vs_tvm": ratio,
            "speedup_pet_vs_onnxruntime": 1.0 / (tvm_ms / ratio), "times_ms": times,
            "search_time_s": 1.0, "tuning_time_s": 1.0, "peak_rss_mb": 1.0, "max_abs_err": 0.0,
            "max_abs_err_vs_onnxruntime": 0.0, "decision_looks": [], "second_look": False}


RUN = {"target": "llvm", "quick": False, "trials": 32, "rounds": 3, "number": 1}


def test_a_rerun_replaces_its_rows_in_the_run_of_record_and_counts_kept_originals_as_x1(
        tmp_path, monkeypatch):
    monkeypatch.setattr(run, "plot", lambda rows, path: None)
    first = [_row(m, "original", 0.9) for m in run.WHOLE[:-1]]
    first.append({"model": run.WHOLE[-1], "batch": 1, "error": "not measured"})
    path = run.write_results(first, dict(RUN, note="first run."), tmp_path)
    assert json.loads(path.read_text())["models_geomean_pet_vs_tvm"] is None  # one row missing

    run.update(path, [_row(run.WHOLE[-1], "optimized", 1.6), _row("conv5x5", "optimized", 1.2)],
               "second run.")
    result = json.loads(path.read_text())
    assert [r["model"] for r in result["rows"]] == run.WHOLE + ["conv5x5"]
    assert result["run"]["note"] == "first run. second run."
    assert "Run notes: first run. second run." in path.with_suffix(".md").read_text()
    # the kept originals count x1 (not their measured x0.9); the new row its measured x1.6
    assert result["models_geomean_pet_vs_tvm"] == pytest.approx(1.6 ** (1 / len(run.WHOLE)))
    assert "second look" not in result["budget_held_equal"]


def test_the_sweep_table_follows_the_graphs_measured_at_every_budget(tmp_path):
    for trials, ratios in ((32, {"conv5x5": 1.3, "dilated_conv": 0.95}),
                           (128, {"conv5x5": 1.6})):
        rows = [_row(g, "optimized" if r > 1 else "original", r) for g, r in ratios.items()]
        folder = tmp_path / f"sweep-{trials}"
        folder.mkdir()
        (folder / "llvm-quick.json").write_text(json.dumps({"rows": rows}))
    text = sweep.render(sweep.collect(tmp_path), tmp_path)
    result = json.loads((tmp_path / "sweep.json").read_text())
    assert list(result["budgets"]) == ["32", "128"]
    assert result["common_graphs"] == ["conv5x5"]
    assert result["geomean"]["32"] == pytest.approx(1.3 ** 0.5)  # dilated_conv kept: x1
    assert result["common_geomean"]["128"] == pytest.approx(1.6)
    assert "| dilated_conv | 10.00 · ×1.000 (original kept) | not run |" in text


def test_a_sweep_budget_run_again_joins_the_rows_it_has(tmp_path, monkeypatch):
    """A budget with rows already gets the new graphs merged in (run.py --update), not written
    over; a budget without rows is written."""
    calls = []
    monkeypatch.setattr(sweep, "RESULTS", tmp_path)
    monkeypatch.setattr(sweep.subprocess, "call", lambda cmd, cwd: calls.append(cmd) or 0)
    assert sweep.run_budget(512, ["conv5x5"], tmp_path / "work", "llvm") == 0
    out = tmp_path / "sweep-512"
    assert calls[0][calls[0].index("--out") + 1] == str(out) and "--update" not in calls[0]
    out.mkdir()
    (out / "llvm-quick.json").write_text("{}")
    sweep.run_budget(512, ["csrnet_backend"], tmp_path / "work", "llvm")
    again = calls[1]
    assert again[again.index("--update") + 1] == str(out / "llvm-quick.json")
    assert "--out" not in again  # run.py --update writes its per-row files to a scratch folder


def test_an_update_run_keeps_the_rows_of_record_it_does_not_run_again(tmp_path, monkeypatch):
    """``run.py --models A --update llvm.json`` replaces A's row and keeps the others: the files
    written after each row go to a scratch folder, not over the run of record."""
    record = json.loads((run.ROOT / "benchmarks" / "results" / "llvm.json").read_text())
    earlier = tmp_path / "llvm.json"
    earlier.write_text(json.dumps(record))
    first = record["rows"][0]
    monkeypatch.setattr(run, "_run_child", lambda name, batch, args: dict(first, wall_s=-1.0))
    monkeypatch.setattr("sys.argv", ["run.py", "--models", first["model"], "--update",
                                     str(earlier), "--out", str(tmp_path), "--note", "again"])
    assert run.main() == 0
    merged = json.loads(earlier.read_text())
    assert [r["model"] for r in merged["rows"]] == [r["model"] for r in record["rows"]]
    assert merged["rows"][0]["wall_s"] == -1.0 and merged["rows"][1:] == record["rows"][1:]
    assert merged["run"]["note"].endswith("again")


def test_the_kept_cell_names_a_refused_candidate_and_the_ratios_of_the_timed_ones():
    row = _row("csrnet", "optimized", 1.2)
    row["decision_looks"] = [{"what": "first look", "ratio": None, "refused": "differs by 1.57"},
                             {"what": "runner-up 1", "ratio": 1.21},
                             {"what": "replication: the kept candidate timed again",
                              "ratio": 1.18}]
    assert run.kept(row) == "optimized (looks: refused, r1 ×1.21, rep ×1.18)"


def test_a_row_timed_in_several_processes_lists_each_process_ratio(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "plot", lambda rows, path: None)
    row = _row("csrnet_backend", "optimized", 1.05)
    row["speedup_pet_vs_tvm_by_process"] = [1.076, 0.966]
    path = run.write_results([row, _row("conv5x5", "optimized", 1.7)],
                             dict(RUN, timing_processes=2, decision_rounds=5), tmp_path)
    text = path.with_suffix(".md").read_text()
    assert "- csrnet_backend (batch 1): ×1.076, ×0.966" in text
    assert "conv5x5 (batch 1): ×" not in text  # a row timed in one process lists none
    result = json.loads(path.read_text())
    assert "spread over 2 fresh processes" in result["timing"]
    assert "spread over 2 fresh processes" in result["decision"]


def test_the_budget_names_the_tuning_seed_when_it_is_not_the_default():
    assert "seed" not in run.budget_words(RUN, [])
    assert "32 trials with seed 2 " in run.budget_words(dict(RUN, seed=2), [])


def test_a_fast_math_run_is_written_apart_and_its_budget_says_both_sides_had_it(tmp_path,
                                                                               monkeypatch):
    monkeypatch.setattr(run, "plot", lambda rows, path: None)
    path = run.write_results([_row("bert_encoder", "original", 1.0)],
                             dict(RUN, fast_math=True), tmp_path)
    assert path.name == "llvm-fastmath.json"
    assert "both sides lowered with TVM's FastMathTransform" in path.with_suffix(".md").read_text()
    assert "FastMath" not in run.budget_words(RUN, [])


def test_the_draws_table_counts_each_tuning_and_the_geo_mean_over_them(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "plot", lambda rows, path: None)
    for seed, kept, ratio in ((1, "optimized", 1.44), (2, "original", 0.9)):
        run.write_results([dict(_row("resnet18", kept, ratio), applied=["Pad -> Conv"] * 2)],
                          dict(RUN, seed=seed), tmp_path / "draws" / f"resnet18-s{seed}")
    # NHWC draws are counted apart; a folder of another PET variant is not a draw
    for folder, ratio in (("resnet18-nhwc-s1", 1.21), ("resnet18-nhwc-padsinplace-s1", 2.0)):
        run.write_results([dict(_row("resnet18", "optimized", ratio), applied=["Pad -> Conv"])],
                          dict(RUN, seed=1, layout="NHWC"), tmp_path / "draws" / folder)
    found = draws.collect(tmp_path)
    assert [(d["layout"], d["seed"], d["pet_vs_tvm"]) for d in found] == [
        ("NCHW", 1, 1.44), ("NCHW", 2, 1.0), ("NHWC", 1, 1.21)]
    table = draws.render(found, tmp_path)
    assert "| resnet18 | NCHW | 32 | 1 | 10.0 | ×1.440 | 2 rewrites (Pad -> Conv) |" in table
    assert "| resnet18 | NHWC | 32 | 1 | 10.0 | ×1.210 | 1 rewrite (Pad -> Conv) |" in table
    assert "original (measured ×0.900: noise)" in table
    # the kept original counts x1, not its measured x0.9: sqrt(1.44 * 1) = 1.2
    assert "**×1.200** (×1.00–×1.44)" in table
    summary = json.loads((tmp_path / "draws.json").read_text())["summary"]
    assert summary["resnet18@32"]["draws"] == 2
    assert summary["resnet18@32"]["geomean"] == pytest.approx(1.2)
    assert summary["resnet18-nhwc@32"]["draws"] == 1


def test_the_decision_rule_table_counts_a_keep_only_when_its_replication_keeps_it_too():
    def decision(first_level, full_level, ratio=1.2):
        return {"ratio": ratio, "p_value": 0.001, "noise": 0.05, "keep_rank_rule": full_level,
                "keep_rank_rule_3": first_level, "keep_iqr_rule": full_level}
    # pairs (0, 1), (2, 3), (4, 5): kept then kept again; kept then refused; kept only at the
    # full level, not the whole model's ALPHA / 3, then kept; a seventh decision has no pair
    runs = [decision(True, True), decision(True, True), decision(True, True),
            decision(False, False, 1.0), decision(False, True), decision(True, True),
            decision(True, True)]
    s = decision_rule.summarise({"ab": runs}, "ab")
    assert (s["decisions"], s["pairs"], s["kept_replicated"]) == (7, 3, 1)
    assert s["kept_rank_rule"] == 6 and s["kept_rank_rule_3"] == 5
    row = {"model": "g", "aa": [], "ab": runs}
    lines = decision_rule.markdown([row]).splitlines()
    assert "kept by its replication" in lines[0] and "| 1 of 3 |" in lines[-1]
    assert lines[2].count("|") == lines[0].count("|")  # the no-candidate row has every cell


def _equal_total_row(seed: int, kept: str, ms: dict) -> dict:
    """An equal-total row as ``equal_total.draw`` makes it, from each build's process medians."""
    times = {name: {"median_ms": sorted(v)[len(v) // 2], "by_process_ms": v,
                    "max_abs_err_vs_tvm": 0.0} for name, v in ms.items()}
    row = {"model": "csrnet_backend", "layout": "NHWC", "seed": seed, "trials_per_task": 32,
           "kept": kept, "applied": ["Pad -> Conv"] if kept == "optimized" else [],
           "total_trials": 320, "mutant_trials": 96, "times": times, "processes": 2}
    return row | equal_total.ratios(times)


def test_the_equal_total_table_compares_within_each_process_and_counts_a_kept_original_as_x1(
        tmp_path):
    # process ratios 12/8 and 18/8: geo-mean sqrt(1.5 * 2.25) = 1.837
    won = _equal_total_row(3, "optimized", {"tvm": [12.0, 18.0], "pet": [8.0, 8.0],
                                            "tvm_equal": [10.0, 10.0]})
    assert won["pet_vs_tvm"] == pytest.approx((1.5 * 2.25) ** 0.5)
    assert won["pet_vs_tvm_equal_by_process"] == pytest.approx([1.25, 1.25])
    # the original kept: PET runs TVM's 32-trial binary, slower than TVM given the trials
    lost = _equal_total_row(4, "original", {"tvm": [10.0, 10.2], "pet": [10.1, 10.0],
                                            "tvm_equal": [8.0, 8.0]})
    path = tmp_path / "equal_total.json"
    equal_total.save([lost], path)
    equal_total.save([won, dict(lost, total_trials=330)], path)  # seed 4 again replaces its row
    rows = json.loads(path.read_text())["rows"]
    assert [(r["seed"], r["total_trials"]) for r in rows] == [(3, 320), (4, 330)]
    table = path.with_suffix(".md").read_text()
    assert "| ×1 (same binary; measured ×1.005 (0.99, 1.02)) |" in table
    # counted: sqrt(1.837 * 1) for PET / TVM; measured for the equal-total column
    assert f"PET / TVM ×{(((1.5 * 2.25) ** 0.5) * 1.0) ** 0.5:.3f}" in table
    lost_equal = (8.0 / 10.1 * 8.0 / 10.0) ** 0.5  # PET's binary is TVM's: slower than equal's
    assert f"at equal total ×{(1.25 * lost_equal) ** 0.5:.3f}" in table


def test_a_torchvision_draw_loads_its_exported_file_and_checks_each_build_against_torch(tmp_path):
    """equal_total.py's ``torchvision:NAME`` models: the ``.pt2`` it writes loads as optimize
    loads it, and each build's error against the torch model is measured (and is not small for a
    torch model with other weights)."""
    pytest.importorskip("tvm")
    pytest.importorskip("torch")
    from tvm_pet.testing.real_models import build_torch_model, stub_torchvision_meta
    stub_torchvision_meta()
    pytest.importorskip("torchvision.models")
    from tvm_pet.pipeline.optimize import load_model, random_inputs
    from tvm_pet.pipeline.options import DriverOptions
    from tvm_pet.pipeline.toolchain import tvm_toolchain

    path, model = equal_total.torchvision_file("squeezenet1_1", tmp_path, 64)
    assert path.suffix == ".pt2"
    loaded = load_model(str(path), DriverOptions(target="llvm", layout="NCHW"))
    toolchain = tvm_toolchain("llvm", str(tmp_path / "records")).with_lowering(loaded.lower)
    library = tmp_path / "tvm.so"
    toolchain.export(toolchain.build(toolchain.lower(loaded.program)), str(library))
    inputs = list(random_inputs(loaded.program, 0).values())
    assert [x.shape for x in inputs] == [(1, 3, 64, 64)]
    times = {"tvm": {}, "other_weights": {}}
    equal_total.against_torch(times, {"tvm": library}, model, inputs)
    assert times["tvm"]["max_rel_err_vs_torch"] < 1e-4
    other, _ = build_torch_model("squeezenet1_1", size=64, seed=1)
    equal_total.against_torch(times, {"other_weights": library}, other, inputs)
    assert times["other_weights"]["max_rel_err_vs_torch"] > 1e-2


def _process(start_s: float, aslr: str, tvm_ms: float, pet_ms: float, wino_ms: float) -> dict:
    """A fresh process's result as ``process_speeds.worker`` returns it, with its start."""
    return {"start_s": start_s, "aslr": aslr, "ms": {"tvm": tvm_ms, "pet": pet_ms},
            "kernels": {"tvm": {"conv": tvm_ms - 0.1, "relu": 0.1},
                        "pet": {"products": pet_ms - wino_ms, "take": wino_ms}}}


def test_process_speeds_splits_the_modes_and_tells_a_lasting_state_from_a_draw():
    from types import SimpleNamespace

    from benchmarks import process_speeds

    # slow PET processes clustered in time (the first five), ASLR alternating
    procs = [_process(10.0 * i, "on" if i % 2 == 0 else "off", 13.0,
                      10.0 if i < 5 else 8.0, 0.8 if i < 5 else 0.3) for i in range(12)]
    result = process_speeds.analyse(procs, gap=0.05, top=3)
    assert result["threshold_ms"] == 9.0
    assert result["runs"]["runs"] == 2 and result["runs"]["z"] < -2
    assert result["aslr"] == {"on": {"slow": 3, "fast": 3}, "off": {"slow": 2, "fast": 4}}
    # ranked by the shift in ms: the products 7.7 -> 9.2, the gather 0.3 -> 0.8, TVM's unmoved
    shifted = [(b, k, round(f, 6), round(s, 6)) for b, k, f, s in result["kernels"]]
    assert shifted[:2] == [("pet", "products", 7.7, 9.2), ("pet", "take", 0.3, 0.8)]
    assert shifted[2][0] == "tvm" and shifted[2][2] == shifted[2][3]
    args = SimpleNamespace(rounds=3, number=2, gap=0.05)
    lines = process_speeds.markdown("m", procs, result, args)
    process_rows = [line for line in lines if re.match(r"\| \d+ \| \d+ \| (on|off) \|", line)]
    assert len(process_rows) == 12 and sum("| on |" in line for line in process_rows) == 6
    assert "| on | 3 | 3 |" in lines and "| off | 2 | 4 |" in lines
    assert any("2 runs, 6.8 expected" in line for line in lines), lines
    # one mode: no split, no runs test
    flat = [_process(float(i), "on", 13.0, 8.0 + 0.01 * i, 0.3) for i in range(6)]
    assert process_speeds.analyse(flat, gap=0.05, top=3) == {"threshold_ms": None}
    assert "one mode" in process_speeds.markdown("m", flat, {"threshold_ms": None}, args)[-2]


def test_process_speeds_worker_times_both_builds_and_their_kernels(tmp_path):
    tvm = pytest.importorskip("tvm")
    import numpy as np
    from tvm.script import ir as I, relax as R

    from benchmarks import process_speeds
    from tvm_pet.tune.targets import resolve_target

    @I.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((32, 32), "float32")):
            with R.dataflow():
                y = R.matmul(x, x)
                out = R.nn.relu(y)
                R.output(out)
            return out

    executable = tvm.compile(Module, target=resolve_target("llvm"))
    for _, name in process_speeds.BUILDS:
        executable.export_library(str(tmp_path / name))
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=np.random.default_rng(0).standard_normal((32, 32), np.float32))
    result = process_speeds.worker(tmp_path, feeds, rounds=2, number=2)
    for build in ("tvm", "pet"):
        assert result["ms"][build] > 0
        assert {"matmul", "relu"} <= set(result["kernels"][build]), result["kernels"][build]


def test_process_speeds_feeds_each_model_input_seeded_standard_normal_values():
    import numpy as np

    from benchmarks import process_speeds
    from tvm_pet.models import build_model
    model = build_model("conv5x5")
    feeds, again = process_speeds.seeded_inputs("conv5x5"), process_speeds.seeded_inputs("conv5x5")
    assert list(feeds) == [i.name for i in model.graph.input]
    for i in model.graph.input:
        x = feeds[i.name]
        assert x.dtype == np.float32
        assert list(x.shape) == [d.dim_value for d in i.type.tensor_type.shape.dim]
        assert np.array_equal(x, again[i.name]) and x.std() > 0.5


def test_the_table_has_tvms_default_and_best_builds_and_each_ones_share_of_the_peak(
        tmp_path, monkeypatch):
    monkeypatch.setattr(run, "plot", lambda rows, path: None)
    monkeypatch.setattr(run, "_peak", lambda target: run_peak(100.0))
    row = _row("conv5x5", "optimized", 1.25, tvm_ms=4.0)
    row["times_ms"]["tvm_default"] = {"median": 5.0, "min": 5.0, "max": 5.0, "samples": [5.0]}
    row["speedup_tvm_best_vs_default"] = 1.25
    row["peak_share"] = {"tvm_default": 0.2, "tvm": 0.25, "pet": 0.3125, "onnxruntime": 1.0}
    old = _row("dilated_conv", "original", 1.0)  # a row of a run before the default column
    text = run.write_results([row, old], RUN, tmp_path).with_suffix(".md").read_text()
    assert ("| conv5x5 | 1 | optimized | NCHW | 5.00 [5.00–5.00] | 4.00 [4.00–4.00] "
            "| 3.20 [3.20–3.20] | 1.00 [1.00–1.00] | ×1.250 | ×1.250 |") in text
    assert "| 20, 25, 31, 100 |" in text
    assert "| dilated_conv | 1 | original | NCHW | – | 10.00 [10.00–10.00] |" in text
    assert "Peak: 100 GFLOP/s" in text


def test_the_table_names_the_layout_chosen_and_states_the_aims_as_measured(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(run, "plot", lambda rows, path: None)
    rows = []
    for i, model in enumerate(run.WHOLE):  # TVM best x1.2 over default; PET kept on two
        row = _row(model, "optimized" if i < 2 else "original", 1.1 if i < 2 else 0.99,
                   tvm_ms=2.0)
        row["speedup_tvm_best_vs_default"] = 1.2
        row["layout"] = "NHWC" if i == 0 else "NCHW"
        row["layout_choice"] = {"layout": row["layout"], "nchw_over_nhwc": 1.4 if i == 0 else 0.9}
        rows.append(row)
    text = run.write_results(rows, RUN, tmp_path).with_suffix(".md").read_text()
    assert f"| {run.WHOLE[0]} | 1 | optimized | NHWC (NCHW/NHWC ×1.40) |" in text
    assert f"| {run.WHOLE[2]} | 1 | original | NCHW (NCHW/NHWC ×0.90) |" in text
    assert "- TVM best / TVM default, geo-mean ×1.200 (aim ≥ ×1.3: missed)" in text
    pet = (1.1 ** 2) ** (1 / len(run.WHOLE))  # x1 where the original was kept
    assert f"- PET + TVM best / TVM best, geo-mean ×{pet:.3f} (aim ≥ ×1.05: missed" in text
    assert f"{run.WHOLE[0]} ×{1.1 / 2.0:.3f}" in text  # PET + TVM best over onnxruntime
    # every model ran at 0.55 or 0.505 of onnxruntime's speed: not within x1.3, ahead on none
    assert "(aim: each ≥ ×0.769: missed; at least one > ×1: missed)" in text


def test_the_aims_say_met_where_the_measured_figures_reach_them():
    rows = []
    for i, model in enumerate(run.WHOLE):  # PET x1.1 over TVM best; ahead of onnxruntime on one
        row = _row(model, "optimized", 1.1)
        row["speedup_tvm_best_vs_default"] = 1.5
        row["speedup_pet_vs_onnxruntime"] = 1.2 if i == 0 else 0.8
        rows.append(row)
    text = "\n".join(run.aims_lines(rows))
    assert "geo-mean ×1.500 (aim ≥ ×1.3: met)" in text
    assert "(aim: each ≥ ×0.769: met; at least one > ×1: met)" in text
    assert "geo-mean ×1.100 (aim ≥ ×1.05: met;" in text
    assert "only" not in text  # all five measured


def test_a_run_of_record_rendered_or_updated_elsewhere_keeps_naming_its_own_machine(
        tmp_path, monkeypatch):
    monkeypatch.setattr(run, "plot", lambda rows, path: None)
    monkeypatch.setattr(run, "_peak", lambda target: run_peak(100.0))
    monkeypatch.setattr(run, "_machine", lambda target: "the machine of record")
    path = run.write_results([_row("conv5x5", "optimized", 1.2)], RUN, tmp_path)
    monkeypatch.setattr(run, "_peak", lambda target: run_peak(300.0))  # another machine now
    monkeypatch.setattr(run, "_machine", lambda target: "another machine")
    earlier = json.loads(path.read_text())
    run.write_results(earlier["rows"], earlier["run"], tmp_path, machine=earlier)  # --render
    run.update(path, [_row("dilated_conv", "original", 1.0)], "a row added.")
    result = json.loads(path.read_text())
    assert result["machine"] == "the machine of record"
    assert result["peak"].startswith("100 GFLOP/s")
    assert "Peak: 100 GFLOP/s" in path.with_suffix(".md").read_text()


def test_onnxruntime_is_timed_alone_in_a_fresh_process_after_each_of_tvms(monkeypatch):
    calls = []

    def fresh(folder, args, rounds, which="all"):
        calls.append((which, rounds))
        if which == "tvm":
            return {"tvm": [0.01] * rounds, "pet": [0.009] * rounds}
        return {"onnxruntime": [0.02 + len(calls)] * rounds}

    monkeypatch.setattr(run, "_time_in_fresh_process", fresh)
    args = type("Args", (), {"rounds": 9, "number": 1, "target": "llvm"})()
    groups, _ = run._time_row("folder", args, 3)
    assert calls == [("tvm", 3), ("onnxruntime", 3)] * 3
    assert [sorted(g) for g in groups] == [["onnxruntime", "pet", "tvm"]] * 3
    assert [g["onnxruntime"][0] for g in groups] == [2.02, 4.02, 6.02]  # each its own process
    apart = run.timing_words(dict(RUN, timing_processes=3, onnxruntime_apart=True))
    assert "TVM best, PET + TVM best, the order" in apart
    assert "onnxruntime timed as many rounds alone, in a fresh process" in apart
    assert "PET + TVM best and onnxruntime, the order" in run.timing_words(RUN)


def run_peak(gflops: float):
    from tvm_pet.tune.peak import Peak
    return Peak(1, gflops / 64, 64, "a test CPU")


def test_kinds_count_each_row_once_per_kind_tuned_timed_and_kept():
    rows = [dict(_row("conv5x5", "optimized", 1.3),
                 tuned_mutants=[{"mutant": "Conv -> Slice", "subprogram": "sub0"},
                                {"mutant": "Pad -> Conv -> Slice", "subprogram": "sub0"},
                                {"mutant": "Conv -> Slice", "subprogram": "combined"}],
                 decision_looks=[{"ratio": 1.3, "kinds": ["extents"]},
                                 {"ratio": 0.9, "kinds": ["space-to-batch"]}],
                 applied=["Conv -> Slice"]),
            dict(_row("dilated_conv", "original", 1.0),
                 tuned_mutants=[{"mutant": "ReshapeTranspose -> Conv -> ReshapeTranspose",
                                 "subprogram": "sub0"}],
                 decision_looks=[{"ratio": 0.8, "kinds": ["space-to-batch"]}], applied=[]),
            {"model": "bert_encoder", "batch": 1, "error": "not measured"}]
    table = kinds.tally(rows)
    assert table["extents"]["tuned"] == ["conv5x5 (batch 1)"]
    assert table["extents"]["kept"] == ["conv5x5 (batch 1)"]
    assert table["space-to-batch"]["timed"] == ["conv5x5 (batch 1)", "dilated_conv (batch 1)"]
    assert table["space-to-batch"]["kept"] == []
    assert table["space-to-batch"]["look_ratio_geomean"] == pytest.approx((0.9 * 0.8) ** 0.5)
    text = kinds.markdown(table, ["r.json"])
    assert "| space-to-batch | a dilated convolution" in text and "| 1 | 2 | – | ×0.849 |" in text
