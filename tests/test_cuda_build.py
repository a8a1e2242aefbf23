"""CUDA without a GPU: code generation, nvcc builds for sm_90, dlight's default schedule, and
``tvm-pet optimize --target cuda --dry-run``.

Tests that compile with nvcc skip when nvcc is not on PATH. Tests marked ``gpu`` run kernels and
skip unless TVM's CUDA runtime sees a GPU; the default run never needs one.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402
from tvm.relax.op import nn as rnn  # noqa: E402

from tests.dilated import dilated_model  # noqa: E402
from tvm_pet.cli import main  # noqa: E402
from tvm_pet.errors import PetError  # noqa: E402
from tvm_pet.tune import build_with_records, extract_tasks  # noqa: E402
from tvm_pet.tune.cuda import (DefaultScheduleFallback, build_untuned,  # noqa: E402
                               compile_device_code, cuda_target, default_schedule,
                               device_sources, gpu_present, kernel_names, measure_primfunc_cuda,
                               nvcc_arch_flags, nvcc_path, source_key)

needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
needs_gpu = pytest.mark.skipif(not gpu_present(), reason="needs a CUDA GPU")
#: Slow tests run only when selected: ``python -m pytest tests/test_cuda_build.py -m slow``.
only_when_selected = pytest.mark.skipif("'slow' not in config.getoption('markexpr')",
                                        reason="builds every mutant with nvcc; select with -m slow")
F32 = "float32"
#: The magic number that starts a CUDA fat binary (little endian 0xBA55ED50).
FATBIN_MAGIC = bytes.fromhex("50ed55ba")


def conv_matmul_module(seed: int = 0):
    """conv2d 3x3 + relu, then a matmul: two kinds of dlight rule (Matmul and Fallback)."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), F32))
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = bb.emit(rnn.relu(rnn.conv2d(
                x, relax.const(rng.standard_normal((8, 4, 3, 3)).astype(F32)), padding=1)))
            flat = bb.emit(relax.op.reshape(conv, (8, 64)))
            out = bb.emit_output(relax.op.matmul(
                flat, relax.const(rng.standard_normal((64, 16)).astype(F32))))
        bb.emit_func_output(out)
    return bb.finalize()


def test_cuda_target_names_the_arch():
    target = cuda_target("sm_90")
    assert target.kind.name == "cuda" and str(target.attrs["arch"]) == "sm_90"
    assert int(target.attrs["max_shared_memory_per_block"]) == 49152


@pytest.mark.parametrize("arch", ["sm90", "compute_90", "sm_x"])
def test_a_malformed_arch_is_a_pet_error(arch):
    with pytest.raises(PetError, match="sm_XY"):
        nvcc_arch_flags(arch)


def test_arch_flags_embed_sass_and_ptx():
    assert nvcc_arch_flags("sm_90") == ["-gencode", "arch=compute_90,code=sm_90",
                                        "-gencode", "arch=compute_90,code=compute_90"]


def test_every_kernel_of_a_build_is_scheduled_and_in_the_source():
    executable = build_with_records(conv_matmul_module(), cuda_target())
    sources = device_sources(executable)
    assert len(sources) == 1
    names = kernel_names(sources[0])
    # every fused kernel of the module became a CUDA kernel (the build fails on an unscheduled one)
    assert len(names) >= 2 and all(name.endswith("_kernel") for name in names)
    assert any("matmul" in name for name in names) and any("conv2d" in name for name in names)
    assert source_key(sources[0]) == source_key(device_sources(executable)[0])


def test_kernel_names_reads_global_functions():
    src = ('extern "C" __global__ void __launch_bounds__(128) f_kernel(float* a) {}\n'
           'extern "C" __global__ void g_kernel(float* b) {}')
    assert kernel_names(src) == ("f_kernel", "g_kernel")


class _Raises:
    """A dlight rule that raises, as gpu.Matmul does on some fused PET mutants."""

    def apply(self, func, target, tunable):
        raise AssertionError("There are some consumers of the cache-write stage that are not "
                             "properly inlined.")


def test_default_schedule_passes_over_a_rule_that_raises():
    from tvm_pet.tune.cuda import _pipeline_rules
    target = cuda_target()
    prepared = tvm.IRModule({"main": extract_tasks(conv_matmul_module(), target)[0].mod["main"]})
    rules = [_Raises(), *_pipeline_rules(target)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DefaultScheduleFallback)
        with target:
            scheduled = default_schedule(target, rules)(prepared)
    assert [w.category for w in caught] == [DefaultScheduleFallback] * 2
    assert "_Raises" in str(caught[0].message) and "next rule" in str(caught[0].message)
    assert "scheduled by dlight" in str(caught[1].message)
    assert bool(scheduled["main"].attrs["tirx.is_scheduled"])
    tvm.tirx.build(scheduled, target=target)  # scheduled well enough to build for CUDA


def test_untuned_task_builds_with_the_default_schedule():
    target = cuda_target()
    for task in extract_tasks(conv_matmul_module(), target):
        kinds = {m.kind for m in build_untuned(task.mod, target).imports}
        assert "cuda" in kinds


def test_measuring_an_untuned_cuda_kernel_without_a_gpu_says_so():
    if gpu_present():
        pytest.skip("this machine has a GPU")
    task = extract_tasks(conv_matmul_module(), cuda_target())[0]
    with pytest.raises(PetError, match="GPU"):
        measure_primfunc_cuda(task.mod, cuda_target())


@needs_nvcc
def test_nvcc_compiles_every_kernel_for_sm_90(tmp_path):
    executable = build_with_records(conv_matmul_module(), cuda_target("sm_90"))
    binaries = compile_device_code(executable, cuda_target("sm_90"), tmp_path)
    assert len(binaries) == 1 and not binaries[0].cached
    blob = (tmp_path / f"{binaries[0].sha256}.fatbin").read_bytes()
    assert blob[:4] == FATBIN_MAGIC and len(blob) == binaries[0].binary_bytes
    assert binaries[0].kernels == kernel_names(device_sources(executable)[0])
    again = compile_device_code(executable, cuda_target("sm_90"), tmp_path)
    assert again[0].cached and again[0].sha256 == binaries[0].sha256


@needs_nvcc
def test_nvcc_errors_surface_as_pet_errors(tmp_path):
    """A kernel asking for more static shared memory than the target allows fails in ptxas."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def too_much_shared(a: T.Buffer((65536,), "float32"), b: T.Buffer((65536,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        shared = T.sblock_alloc_buffer((65536,), "float32", scope="shared")
        for tx in T.thread_binding(1, thread="threadIdx.x"):
            for i in range(65536):
                with T.sblock("copy"):
                    vi = T.axis.spatial(65536, i)
                    shared[vi] = a[vi]
            for i in range(65536):
                with T.sblock("out"):
                    vi = T.axis.spatial(65536, i)
                    b[vi] = shared[vi]

    try:
        lib = tvm.tirx.build(tvm.IRModule({"main": too_much_shared}), target=cuda_target())
    except (RuntimeError, ValueError) as err:  # TVM's own checks may already refuse it
        pytest.skip(f"TVM refuses the kernel before nvcc: {str(err).splitlines()[0]}")
    with pytest.raises(PetError, match="nvcc failed"):
        compile_device_code(lib, cuda_target(), tmp_path)


def _check_dry_run_folder(out, report: dict) -> None:
    """Every build the report lists is written (library, nvcc binaries) or says why not."""
    manifest = json.loads((out / "manifest.json").read_text())
    assert report["arch"] == "sm_90"
    assert [v["kind"] for v in report["variants"]][0] == "original"
    for variant in report["variants"]:
        if variant["error"] is None:
            assert variant["kernels"] >= 1
            assert (out / variant["library"]).is_file() == (variant["kind"] != "mutant")
            for key in variant["binaries"]:
                assert (out / "kernels" / f"{key}.fatbin").read_bytes()[:4] == FATBIN_MAGIC
        else:
            assert "nvcc failed" in variant["error"]
    built = {v["name"] for v in report["variants"] if v["error"] is None and v["library"]}
    assert {v["name"] for v in manifest["variants"]} == built
    assert manifest["optimized"] in built
    inputs = np.load(out / "inputs.npz")
    assert list(inputs) == manifest["inputs"]


@needs_nvcc
def test_dry_run_builds_original_and_mutants_for_sm_90(tmp_path):
    from tvm_pet.contrib.cuda_offline.dry_run import dry_run
    from tvm_pet.search.config import SearchConfig
    model = tmp_path / "m.onnx"
    onnx.save(dilated_model(), model)
    out = tmp_path / "dry"
    report = dry_run(model, out, SearchConfig(time_limit=60), records_dir=str(tmp_path / "rec"),
                     max_mutants=2)
    assert report.records == 0 and report.mutants_listed >= report.mutants_built == 2
    assert [v.kind for v in report.variants][:3] == ["original", "mutant", "mutant"]
    assert report.variants[0].error is None and report.variants[0].kernels >= 1
    _check_dry_run_folder(out, json.loads((out / "dry_run.json").read_text()))


@pytest.mark.slow
@only_when_selected
@needs_nvcc
def test_dry_run_from_the_command_line_builds_every_mutant(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    onnx.save(dilated_model(), model)
    out = tmp_path / "dry"
    code = main(["optimize", str(model), "--target", "cuda", "--dry-run", "--out", str(out),
                 "--time-limit", "60", "--records", str(tmp_path / "records")])
    assert code == 0 and "stopped before the first kernel run" in capsys.readouterr().out
    report = json.loads((out / "dry_run.json").read_text())
    assert report["mutants_built"] == report["mutants_listed"]
    assert [v["kind"] for v in report["variants"]].count("mutant") == report["mutants_listed"]
    _check_dry_run_folder(out, report)


def test_dry_run_is_for_cuda_only(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    onnx.save(dilated_model(), model)
    assert main(["optimize", str(model), "--dry-run", "--out", str(tmp_path / "o")]) == 2
    assert "--target cuda" in capsys.readouterr().err


# ---------------------------------------------------------------------------- on a GPU only

@pytest.mark.gpu
@needs_gpu
def test_untuned_cuda_kernel_is_timed_on_the_gpu():
    task = extract_tasks(conv_matmul_module(), "cuda")[0]
    assert 0 < measure_primfunc_cuda(task.mod, "cuda") < 1.0


@pytest.mark.gpu
@needs_gpu
def test_cuda_build_matches_the_cpu_build():
    module = conv_matmul_module()
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(F32)
    results = []
    for target, device in (("llvm", tvm.cpu()), ("cuda", tvm.cuda(0))):
        vm = relax.VirtualMachine(build_with_records(module, target), device)
        results.append(vm["main"](tvm.runtime.tensor(x, device)).numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-4)
