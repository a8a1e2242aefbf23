"""Tuning in one batch for a GPU reached a few minutes at a time
(``tvm_pet/contrib/cuda_offline/batch.py``, ``scripts/gpu/run_batch.py``), and the dry run with
the weights as inputs (``run_cuda.py``).

The flow is checked on llvm, where the candidates run here: sampled and built, timed by
``run_batch.py --device cpu`` in its own process, committed, and applied by a build. The CUDA
build of a batch needs nvcc and skips without it; nothing here needs a GPU.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402

from tests.dilated import dilated_chain, dilated_model  # noqa: E402
from tvm_pet.contrib.cuda_offline.batch import (FAILED_RUN_SECS, build_library,  # noqa: E402
                                                commit_batch, prepare_batch,
                                                traced_default_schedule)
from tvm_pet.contrib.cuda_offline.dry_run import (_mutants_in_place, cuda_module,  # noqa: E402
                                                  weights_as_inputs)
from tvm_pet.cost.analytic import AnalyticCost  # noqa: E402
from tvm_pet.relax.adapter import program_to_module  # noqa: E402
from tvm_pet.search.config import SearchConfig  # noqa: E402
from tvm_pet.tune import apply_records, build_with_records, extract_tasks  # noqa: E402
from tvm_pet.tune import records  # noqa: E402
from tvm_pet.tune.compile import reduces  # noqa: E402
from tvm_pet.tune.cuda import cuda_target, nvcc_arch_flags, nvcc_path  # noqa: E402
from tvm_pet.tune.shipped import shipped_records_dir  # noqa: E402
from tvm_pet.tune.targets import resolve_target  # noqa: E402

GPU_SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "gpu"
needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")


@functools.cache
def _script(name: str):
    """A script of ``scripts/gpu`` as a module, loaded once a process (``prepare_cuda``
    keeps what it listed of a model file, which the tests here share)."""
    spec = importlib.util.spec_from_file_location(name, GPU_SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(vm, args):
    out = vm["main"](*args)
    return out.numpy() if hasattr(out, "numpy") else [o.numpy() for o in out]


@pytest.mark.parametrize("name", ["dilated_chain", "three_matmuls"])
def test_weights_as_inputs_compute_what_the_embedded_weights_do(name):
    """The mutants in place, their weights as inputs and what they compute from the weights
    alone lifted into main_transform_params (three_matmuls' Concat of the weights), give the
    original's outputs; run_cuda.py's _arguments feeds them, here with the program's weights."""
    from tvm_pet.models.operators import three_matmuls
    from tvm_pet.onnx import import_model
    program = dilated_chain(layers=2) if name == "dilated_chain" else import_model(three_matmuls())
    run_cuda = _script("run_cuda")
    device = tvm.cpu()
    rng = np.random.default_rng(1)
    inputs = [tvm.runtime.tensor(rng.standard_normal(t.shape).astype(np.float32), device)
              for t in program.inputs]
    expected = _run(relax.VirtualMachine(build_with_records(program_to_module(program), "llvm"),
                                         device), inputs)
    mutants = _mutants_in_place(program, SearchConfig(time_limit=60), AnalyticCost())
    weights = [tvm.runtime.tensor(program.weights[n], device) for n in sorted(program.weights)]
    manifest = {"params": [[n, list(program.weights[n].shape)] for n in sorted(program.weights)],
                "transform": "main_transform_params"}
    lifted = []
    for _, mutant, whole in mutants[:5]:
        module = weights_as_inputs(whole)
        lifted += [mutant.ops for block in module["main_transform_params"].body.blocks
                   for b in block.bindings if isinstance(b.value, relax.Call)]
        vm = relax.VirtualMachine(build_with_records(module, "llvm"), device)
        got = _run(vm, run_cuda._arguments(vm, manifest, inputs, weights))
        for a, b in zip(expected if isinstance(expected, list) else [expected],
                        got if isinstance(got, list) else [got]):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)
    assert mutants and (name == "dilated_chain" or any("Concat" in ops for ops in lifted))


def test_the_cuda_flow_gives_both_sides_tvms_rewrites():
    """CUDA builds start from TVM's graph rewrites by default, as on the CPU: three_matmuls'
    original is one combined matmul (its weights concatenated in main_transform_params), it
    computes what the three matmuls do, and the tuning tasks are the combined matmul's."""
    from tvm_pet.models.operators import three_matmuls
    from tvm_pet.onnx import import_model
    from tvm_pet.contrib.cuda_offline.dry_run import cuda_module
    program = import_model(three_matmuls())
    device = tvm.cpu()
    rng = np.random.default_rng(2)
    inputs = [tvm.runtime.tensor(rng.standard_normal(t.shape).astype(np.float32), device)
              for t in program.inputs]
    weights = [tvm.runtime.tensor(program.weights[n], device) for n in sorted(program.weights)]
    manifest = {"params": [[n, list(program.weights[n].shape)] for n in sorted(program.weights)],
                "transform": "main_transform_params"}
    expected = _run(relax.VirtualMachine(
        build_with_records(cuda_module(program, rewrites=False), "llvm"), device), inputs)
    module = cuda_module(program, "inputs")
    assert module["main"].script().count("R.matmul") == 1
    assert "R.concat" in module["main_transform_params"].script()
    vm = relax.VirtualMachine(build_with_records(module, "llvm"), device)
    got = _run(vm, _script("run_cuda")._arguments(vm, manifest, inputs, weights))
    for a, b in zip(expected, got):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)
    target = cuda_target("sm_90")
    calls = {r: [t.weight for t in extract_tasks(cuda_module(program, rewrites=r), target)
                 if "matmul" in t.name] for r in (True, False)}
    assert calls == {True: [1], False: [3]}  # one wide matmul, against three of one task


def test_weights_drawn_on_the_gpu_machine_are_seeded_and_scaled():
    run_cuda = _script("run_cuda")
    manifest = {"params": [["w", [16, 4, 3, 3]], ["b", [16]]], "param_seed": 3}
    first = [w.numpy() for w in run_cuda._weights(manifest, tvm.cpu())]
    again = [w.numpy() for w in run_cuda._weights(manifest, tvm.cpu())]
    assert [a.shape for a in first] == [(16, 4, 3, 3), (16,)]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert 0.1 < float(first[0].std() * np.sqrt(36)) < 10  # 1/sqrt(fan-in) scale


@pytest.mark.parametrize("later, kept", [(1.0, "m1"), (2.5, "original")])
def test_the_measured_choice_must_win_both_looks(later, kept):
    """run_cuda.py keeps the build that was fastest over the first rounds only when it beats
    the original over the later rounds too (the rank rule)."""
    run_cuda = _script("run_cuda")
    samples = {"original": [2.0] * 4, "m1": [1.0, 1.0, later, later], "m2": [1.5] * 4}
    choice, looks = run_cuda._decide(samples, 2)
    assert looks["best"] == "m1" and choice == kept


def test_arch_flags_can_leave_out_the_ptx():
    assert nvcc_arch_flags("sm_90", ptx=False) == ["-gencode", "arch=compute_90,code=sm_90"]


def test_a_batch_is_sampled_timed_committed_and_applied_on_llvm(tmp_path):
    """The whole flow on a CPU: candidates and the default schedule built into one library,
    timed by run_batch.py in its own process, committed as records with the measured seconds,
    and applied by the next build, whose outputs equal the untuned build's."""
    module = program_to_module(dilated_chain(layers=1))
    tasks = [t for t in extract_tasks(module, "llvm") if "conv" in t.name]
    batch = prepare_batch(tasks, "llvm", 3, tmp_path / "batch")
    assert [t.functions[-1] for t in batch] == ["dlight"] * len(tasks)  # measured, on llvm
    assert all(len(t.candidates) == len(t.record_lines) >= 2 for t in batch)  # not recorded
    times = tmp_path / "times.json"
    subprocess.run([sys.executable, str(GPU_SCRIPTS / "run_batch.py"), str(tmp_path / "batch"),
                    "--out", str(times), "--device", "cpu", "--min-ms", "1"], check=True)
    measured = json.loads(times.read_text())["tasks"]
    summary = commit_batch(tmp_path / "batch", times, tmp_path / "records", "llvm")
    for task in batch:
        assert summary[task.shash]["records"] == len(task.candidates)
        assert summary[task.shash]["failed"] == 0
        assert summary[task.shash]["best_s"] == min(measured[task.shash][c]
                                                    for c in task.candidates)
    db = records.open_database(tmp_path / "records", resolve_target("llvm"))
    for task in tasks:
        best = records.best_record(db, task.mod)
        assert records.mean_run_secs(best) == summary[str(task.shash)]["best_s"]
    _, applied = apply_records(module, "llvm", tmp_path / "records")
    assert applied == len(tasks)
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    outs = [_run(relax.VirtualMachine(build_with_records(module, "llvm", rec), tvm.cpu()),
                 [tvm.runtime.tensor(x, tvm.cpu())])
            for rec in (tmp_path / "records", tmp_path / "none")]
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)


def test_a_candidate_that_fails_to_run_is_a_failed_trial(tmp_path):
    module = program_to_module(dilated_chain(layers=1))
    tasks = [t for t in extract_tasks(module, "llvm") if "conv" in t.name][:1]
    (task,) = prepare_batch(tasks, "llvm", 2, tmp_path / "batch")
    assert task.shash == str(tasks[0].shash)
    times = {name: 1e-3 for name in task.functions}
    times[task.candidates[0]] = None
    (tmp_path / "times.json").write_text(json.dumps({"tasks": {task.shash: times}}))
    summary = commit_batch(tmp_path / "batch", tmp_path / "times.json", tmp_path / "rec", "llvm")
    assert summary[task.shash]["failed"] == 1
    db = records.open_database(tmp_path / "rec", resolve_target("llvm"))
    secs = sorted(records.mean_run_secs(r) or FAILED_RUN_SECS
                  for r in records.workload_records(db, tasks[0].mod))
    assert secs[-1] >= FAILED_RUN_SECS and secs[0] == 1e-3


def test_a_function_that_does_not_build_is_left_out(tmp_path):
    """One library per task: a function TVM cannot build is left out and named, the rest
    build."""
    module = program_to_module(dilated_chain(layers=1))
    task = [t for t in extract_tasks(module, "llvm") if "conv" in t.name][0]
    good = traced_default_schedule(task, tvm.target.Target("llvm")).mod["main"]
    broken = good.with_body(tvm.tirx.Evaluate(  # an allreduce outside any thread: no codegen
        tvm.tirx.call_intrin("int32", "tirx.tvm_thread_allreduce")))
    runtime, _, unbuilt = build_library({"ok": good, "bad": broken},
                                        tvm.target.Target("llvm"), tmp_path)
    assert list(unbuilt) == ["bad"] and unbuilt["bad"]
    assert runtime.get_function("ok", query_imports=True) is not None


@needs_nvcc
def test_a_cuda_batch_holds_sm_90_binaries_and_the_default_schedule(tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(dilated_model(), model)
    from tvm_pet.onnx import import_model
    tasks = extract_tasks(program_to_module(import_model(model)), cuda_target())[:1]
    (task,) = prepare_batch(tasks, cuda_target(), 2, tmp_path / "batch")
    assert task.functions[-1] == "dlight" and task.binaries
    for key in task.binaries:
        assert (tmp_path / "batch" / "kernels" / f"{key}.fatbin").read_bytes()[:4] == \
            bytes.fromhex("50ed55ba")
    assert task.candidates[-1] == "dlight"  # recorded on CUDA: records never lose to it
    staged = (tmp_path / "batch" / "staging" / records.RECORD_FILE).read_text().splitlines()
    assert len(staged) == len(task.candidates)
    assert all(json.loads(line)[1][1] is None for line in staged)  # not measured yet
    times = {name: 2e-3 for name in task.candidates}
    times["dlight"] = 1e-3
    (tmp_path / "times.json").write_text(json.dumps({"tasks": {task.shash: times}}))
    commit_batch(tmp_path / "batch", tmp_path / "times.json", tmp_path / "rec", cuda_target())
    db = records.open_database(tmp_path / "rec", cuda_target())
    assert records.mean_run_secs(records.best_record(db, tasks[0].mod)) == 1e-3


def test_run_cuda_checks_and_times_a_folder_of_builds(tmp_path):
    """run_cuda.py's run_folder on a CPU folder laid out as the dry run writes it (weights as
    inputs, drawn by the script): every build is checked against the original, timed in
    interleaved rounds, and PET's build chosen by the two looks; a build that computes
    something else, or that cannot take the drawn weights (it reads others), is refused, not
    timed, and the others still are."""
    run_cuda = _script("run_cuda")
    program = dilated_chain(layers=2)
    mutants = _mutants_in_place(program, SearchConfig(time_limit=60), AnalyticCost())[:2]
    builds = [("original", program)] + [(f"mutant{i}", w) for i, (_, _, w) in enumerate(mutants)]
    wrong = dilated_chain(layers=1)  # same input and output shapes, another function
    builds.append(("wrong", type(program)(wrong.inputs, program.weights, wrong.nodes,
                                          wrong.outputs)))
    builds.append(("foreign", dilated_chain(layers=3)))  # six weights, not the original's four
    (tmp_path / "builds").mkdir()
    for name, prog in builds:
        build_with_records(weights_as_inputs(prog), "llvm").export_library(
            str(tmp_path / "builds" / f"{name}.so"))
    np.savez(tmp_path / "inputs.npz", x=np.ones((1, 4, 8, 8), np.float32))
    manifest = {"model": "chain", "arch": "", "target": "llvm", "inputs": ["x"],
                "optimized": "original",
                "params": [[n, list(program.weights[n].shape)] for n in sorted(program.weights)],
                "param_seed": 0, "transform": "main_transform_params",
                "variants": [{"name": n, "kind": "original" if n == "original" else "mutant",
                              "library": f"builds/{n}.so", "mutant": [], "binaries": []}
                             for n, _ in builds]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    row = run_cuda.run_folder(tmp_path, tvm.cpu(), rounds=4, number=2)
    by_name = {v["name"]: v for v in row["variants"]}
    assert by_name["wrong"]["refused"] and by_name["wrong"]["median_ms"] is None
    assert by_name["foreign"]["refused"].startswith("raised")
    assert by_name["foreign"]["median_ms"] is None
    assert all(by_name[n]["refused"] is None and by_name[n]["median_ms"] > 0
               for n, _ in builds[:-2])
    assert all(by_name[n]["max_abs_err_vs_original"] < 1e-3 for n, _ in builds[:-2])
    chosen = row["measured_choice"]
    assert chosen["kept"] in {n for n, _ in builds[:-2]}
    assert chosen["speedup_pet_vs_tvm"] == pytest.approx(chosen["tvm_ms"] / chosen["pet_ms"])
    assert len(row["times_ms"]["original"]["samples"]) == 4


@pytest.mark.parametrize("name", ["conv5x5", "three_matmuls", "csrnet_backend", "csrnet",
                                  "bert_encoder", "resnet18", "inception_v3", "resnet3d_18"])
def test_torch_eager_computes_what_onnxruntime_does(name):
    """torch_eager.py's interpreter of the models' ONNX graphs (PyTorch's column on the GPU),
    here on the CPU against onnxruntime. Two libraries' float32 results differ by rounding,
    which grows with the outputs' magnitude and depends on the CPU's kernels (up to 1.9e-4 on
    BERT's layer, outputs up to 5, on one CPU; 3e-6 on another), so the absolute tolerance is
    scaled by the largest output; a wrong rule differs by far more."""
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    from tvm_pet.models import build_model
    torch_eager = _script("torch_eager")
    model = build_model(name)
    x = np.random.default_rng(0).standard_normal(
        [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    got = torch_eager.torch_function(model, "cpu")(torch.from_numpy(x))
    want = ort.InferenceSession(model.SerializeToString()).run(
        None, {model.graph.input[0].name: x})
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-4,
                                   atol=1e-4 * max(1.0, float(np.abs(w).max())))


def test_the_cuda_table_pairs_default_and_tuned_builds_of_a_model():
    import benchmarks.cuda_table as cuda_table

    def run(folder, tvm_ms, pet_ms, kept):
        return {"folder": folder, "measured_choice": {
            "tvm_ms": tvm_ms, "pet_ms": pet_ms, "speedup_pet_vs_tvm": tvm_ms / pet_ms,
            "kept": kept, "best_first_look": "m1"},
            "variants": [{"name": "original", "mutant": [], "median_ms": tvm_ms},
                         {"name": "m1", "mutant": ["Pad", "Conv"], "median_ms": pet_ms},
                         {"name": "m2", "mutant": ["Conv"], "median_ms": None}]}
    results = {"device": "NVIDIA H100 80GB HBM3", "compute_version": "9.0", "timing": "t",
               "rows": [run("conv5x5", 2.0, 1.0, "m1"), run("conv5x5-tuned", 1.0, 1.0,
                                                             "original")]}
    again = dict(results, rows=[run("conv5x5", 2.0, 0.5, "m1"), run("conv5x5-tuned", 1.0, 1.0,
                                                                   "original")])
    data = cuda_table.table([results, again], [{"rows": {"conv5x5": {"median_ms": 0.5}}}], None)
    (row,) = data["rows"]
    assert row["default"]["ratios_by_process"] == [2.0, 4.0]
    assert row["default"]["ratio"] == pytest.approx(8 ** 0.5)  # geo-mean over the processes
    assert row["default"]["kept_mutant"] == "Pad → Conv"
    assert row["tuned"]["ratio"] == 1.0 and row["tuned"]["builds_refused"] == 1
    assert data["geo_mean_pet_over_tvm"] == pytest.approx({"default": 8 ** 0.5, "tuned": 1.0})
    text = cuda_table.markdown(data)
    assert "| conv5x5 | 2.000 | 1.000 | ×2.828 |" in text and "0.500" in text
    # a whole model's default-schedule folder with the original alone: PET was not tried there,
    # so no ratio is shown and none enters the geo-mean
    alone = run("csrnet", 5.0, 5.0, "original")
    alone["variants"] = alone["variants"][:1]
    data = cuda_table.table([dict(results, rows=[alone, run("csrnet-tuned", 3.0, 2.5, "m1")])],
                            [], None)
    assert data["geo_mean_pet_over_tvm"]["default"] is None
    assert data["geo_mean_pet_over_tvm"]["tuned"] == pytest.approx(1.2)
    text = cuda_table.markdown(data)
    assert "| csrnet | 5.000 | - | not tried | 3.000 | 2.500 | ×1.200 |" in text
    assert "default schedules not tried, tuned ×1.200" in text
    # tuned builds alone (a longer tuning's second call): no default row at all
    data = cuda_table.table([dict(results, rows=[run("csrnet-tuned", 3.0, 2.5, "m1")])], [],
                            None)
    assert "| csrnet | - | - | not tried | 3.000 | 2.500 | ×1.200 |" in \
        cuda_table.markdown(data)


@pytest.mark.parametrize("name", ["conv5x5", "dilated_conv", "two_1x1_convs", "three_matmuls",
                                  "csrnet_backend"])
def test_shipped_cuda_records_schedule_every_tuned_kernel_of_the_originals(name):
    """The shipped cuda-sm_90 records hold the measured records of the GPU batch (H100): every
    kernel of the original that reduces (a conv, a matmul) has one, and building with them needs
    no GPU."""
    from tvm_pet.models import build_model
    from tvm_pet.onnx import import_model
    module = program_to_module(import_model(build_model(name)))
    tasks = extract_tasks(module, cuda_target())
    tuned = [t for t in tasks if reduces(t)]
    _, applied = apply_records(module, cuda_target(), shipped_records_dir())
    assert tuned and applied == len(tuned)


@pytest.fixture(scope="module")
def backend_file(tmp_path_factory):
    """A small CSRNet back end's ONNX file, one for the tests of a module (prepare_cuda.py
    lists its mutants' kernels once for them)."""
    from tvm_pet.models import build_model
    model = tmp_path_factory.mktemp("backend") / "backend.onnx"
    onnx.save(build_model("csrnet_backend", h=6, w=6, seed=1), model)
    return model


def _backend_and_times(model, prepare, target, rewrites=True):
    """A small CSRNet back end (``backend_file``), kernel times as the GPU's batch gives them
    (each task of the original 1 ms, each kernel that reduces of every mutant in place 0.5 ms;
    with TVM's rewrites or not, as they will be costed), and every task."""
    from tvm_pet.onnx import import_model
    original = extract_tasks(program_to_module(import_model(model)), target)
    times = {str(t.shash): 1e-3 for t in original}
    every = prepare.tasks_of(model, target, lambda line: None, rewrites)
    for task in every:
        if reduces(task):
            times.setdefault(str(task.shash), 0.5e-3)
    return model, times, every


def test_kernel_times_propose_singles_and_a_combination_that_compute_the_original(
        backend_file):
    """prepare_cuda.py's proposals for a whole model after the GPU's batch: per subprogram the
    mutant whose kernels cost least by the measured times (here the mutants' convs are timed
    faster), the largest gain first; each alone in place, and all of them together, compute
    what the original does. A combination leaves out a pick that would bring a kernel that
    reduces and has no time."""
    from tvm_pet.onnx import import_model
    from tvm_pet.search.partition import replace_subprogram
    from tvm_pet.verify.interpreter import evaluate
    prepare = _script("prepare_cuda")
    target = cuda_target()
    model, times, _ = _backend_and_times(backend_file, prepare, target)
    original = import_model(model)
    program, base, picks = prepare.gains_by_subprogram(model, target, times)
    gains = [p[0] for p in picks]
    assert len(picks) >= 2 and gains == sorted(gains, reverse=True) and gains[-1] > 0
    assert base == pytest.approx(sum(t.weight * 1e-3 for t in extract_tasks(
        program_to_module(original), target)), rel=0.5)
    feeds = {t.name: np.random.default_rng(3).standard_normal(t.shape).astype(np.float32)
             for t in original.inputs}
    want = evaluate(original, feeds)
    for _, part, _, corrected in picks[:2]:
        got = evaluate(replace_subprogram(program, part, corrected), feeds)
        for name in original.outputs:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-3, atol=1e-3)
    said = []
    whole, ops = prepare.combined("backend", program, base, picks, said.append)
    assert len(ops) == len(picks) and "estimated" in said[-1]
    got = evaluate(whole, feeds)
    for name in original.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-3, atol=1e-3)
    # the kernels only the first pick brings lose their times: the combination is of the picks
    # without them
    def shashes(prog):
        return {str(t.shash) for t in extract_tasks(cuda_module(prog), target)}
    first = replace_subprogram(program, picks[0][1], picks[0][3])
    brought = shashes(first) - shashes(program)
    fewer = {k: v for k, v in times.items() if k not in brought}
    said = []
    whole, ops = prepare.combined("backend", program, base, picks, said.append, lambda w: (
        prepare.estimated_cost(w, target, fewer)[1] <= prepare.estimated_cost(
            program, target, fewer)[1]))
    assert 2 <= len(ops) < len(picks) and "left out of the combination" in said[0]
    assert not prepare.estimated_cost(whole, target, fewer)[1]


@pytest.mark.parametrize("name,rewrites", [("csrnet_backend", True), ("three_matmuls", True),
                                           ("two_1x1_convs", False)])
def test_a_mutants_kernels_from_its_fusion_region_are_those_of_the_whole_model_in_place(
        name, rewrites, request):
    """prepare_cuda.py lists what each mutant changes from its fusion region lowered alone
    (Inception-v3's hundreds of whole-model compiles took more than 25 minutes): the kernels it
    takes out and brings, with their calls, are those of the whole model with the mutant in
    place against the original, with TVM's rewrites (CombineParallelMatmul included) or
    without; and regions did the listing (the whole model only where a matmul outside a region
    reads what it reads, which TVM's CombineParallelMatmul may join with it). The first mutant
    of each subprogram and sequence of rewrites is compared with the whole model (the back
    end's 95 mutants are 20 such; the slow test compares all of them). The back end's are
    those the other tests here share (``backend_file``)."""
    model = request.getfixturevalue("backend_file") if name == "csrnet_backend" else name
    _check_region_listing(model, rewrites, every=False)


@pytest.mark.slow
def test_every_mutants_kernels_from_its_fusion_region_are_those_of_the_whole_model_in_place(
        backend_file):
    """As above, every mutant of the back end compared with the whole model (about a minute)."""
    _check_region_listing(backend_file, True, every=True)


def _check_region_listing(model, rewrites: bool, every: bool) -> None:
    """The check above for a Table-3 graph by name, or a model file (its mutants listed by
    ``prepare_cuda.model_changes``, once a process)."""
    from tvm_pet.models import build_model
    from tvm_pet.onnx import import_model
    from tvm_pet.relax.adapter import region_to_module
    from tvm_pet.search.partition import replace_subprogram
    from tvm_pet.search.region import fusion_region
    from tvm_pet.tune.measured_cost import kernel_change
    prepare = _script("prepare_cuda")
    target = cuda_target()
    if isinstance(model, str):
        program = import_model(build_model(model))
        changes = prepare.mutant_changes(program, target, rewrites)
    else:
        program, changes = prepare.model_changes(model, target, rewrites)
    whole = prepare._RegionTasks(target, rewrites)
    listed = lambda kernels: sorted((str(t.shash), n) for t, n in kernels)  # noqa: E731
    assert changes and any(lost or gained for *_, lost, gained in changes)
    compared = set()
    for _, part, mutant, corrected, lost, gained in changes:
        kind = (part.nodes, tuple(mutant.ops))
        if not every and kind in compared:
            continue
        compared.add(kind)
        want = kernel_change(whole(program, whole=True), whole(
            replace_subprogram(program, part, corrected), whole=True))
        assert (listed(lost), listed(gained)) == tuple(map(listed, want)), mutant.ops
    regions = [fusion_region(program, part) for _, part, *_ in changes]
    assert all(r is not None and region_to_module(r.before) is not None for r in regions)
    assert any(not (rewrites and prepare._matmul_beside(program, r)) for r in regions)


def test_a_mutant_with_a_kernel_that_reduces_and_was_not_timed_is_never_proposed(
        backend_file):
    """With only the original's kernels timed, every mutant of the back end brings a conv of
    another shape that would run on a schedule the GPU never measured: none is proposed
    (counting it as 0 ms chose, on the H200, a CSRNet build that did not compile)."""
    from tvm_pet.onnx import import_model
    prepare = _script("prepare_cuda")
    target = cuda_target()
    times = {str(t.shash): 1e-3 for t in extract_tasks(
        program_to_module(import_model(backend_file)), target)}
    program, base, picks = prepare.gains_by_subprogram(backend_file, target, times)
    assert base > 0 and picks == []


def test_a_longer_tuning_takes_the_kernels_of_the_originals_and_of_the_choices(
        backend_file, tmp_path):
    """prepare_cuda.py --batch-trials with --combine (a longer tuning of what an earlier round
    chose): the tasks of the original and of the builds the earlier times propose, which are
    fewer than those of every verified mutant and hold every task of the original."""
    import argparse
    import json

    from tvm_pet.onnx import import_model
    prepare = _script("prepare_cuda")
    target = cuda_target()
    model, times, every = _backend_and_times(backend_file, prepare, target, rewrites=False)
    original = extract_tasks(program_to_module(import_model(model)), target)
    path = tmp_path / "times.json"
    path.write_text(json.dumps({"tasks": {k: {"default": v} for k, v in times.items()}}))
    args = argparse.Namespace(combine=[path], singles=1, no_tvm_rewrites=True)
    program, builds = prepare.choices(model, target, args, lambda line: None)
    assert [b[0] for b in builds] == ["combined", "single0"]
    chosen = prepare.tasks_of(model, target, lambda line: None, False,
                              [program] + [b[1] for b in builds])
    assert {t.shash for t in original} <= {t.shash for t in chosen} < {t.shash for t in every}


def test_with_weights_as_inputs_a_build_reading_other_weights_is_left_out():
    """The GPU machine feeds every build the original's weights, so the dry run leaves out a
    program whose weights differ (the search's post-optimizations fold a bias's reshape into a
    new weight) and says why, instead of writing a library that cannot run."""
    from tvm_pet.contrib.cuda_offline.dry_run import _not_built, _same_weights
    program = dilated_chain(layers=2)
    mutants = _mutants_in_place(program, SearchConfig(time_limit=60), AnalyticCost())
    assert mutants and all(_same_weights(program, whole) for _, _, whole in mutants)
    other = dilated_chain(layers=3)
    assert not _same_weights(program, other)
    said = []
    variant = _not_built(("search_best", "search", None, ("Pad -> Conv",), True, other),
                         said.append)
    assert variant.library == "" and "weights" in variant.error and said


def test_the_cuda_sweep_lines_up_each_models_tuned_rows_by_budget():
    """benchmarks/cuda_sweep.py: one row per model, one column per budget, each cell from the
    table of that budget; a model missing from a table is '-'."""
    import benchmarks.cuda_sweep as cuda_sweep

    def table(*rows):
        return {"rows": [{"model": m, "tuned": {"tvm_ms": t, "pet_ms": p, "ratio": t / p,
                                                "kept": "combined"}} for m, t, p in rows]}
    rows = cuda_sweep.sweep({8: table(("resnet18", 2.6, 0.9), ("csrnet", 3.2, 2.9)),
                             40: table(("resnet18", 1.2, 0.8))})
    assert rows["resnet18"][40]["ratio"] == pytest.approx(1.5) and 40 not in rows["csrnet"]
    text = cuda_sweep.markdown(rows, [8, 40])
    assert "| resnet18 | 2.600, 0.900, ×2.889 | 1.200, 0.800, ×1.500 |" in text
    assert "| csrnet | 3.200, 2.900, ×1.103 | - |" in text
