"""``relax.get_pipeline("pet_tuning", ...)`` (tvm_pet.relax.tuning_pipeline): PET inside TVM's
tuning pipeline, then ``tvm.compile(mod, target)``."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
ort = pytest.importorskip("onnxruntime")
from tvm import relax  # noqa: E402
from tvm.relax.frontend.onnx import from_onnx  # noqa: E402

import tvm_pet  # noqa: E402
import tvm_pet.relax  # noqa: E402,F401  (registers "pet_tuning", as a user imports it)
from tvm_pet.models import build_model  # noqa: E402
from tvm_pet.tune import dbfile  # noqa: E402
from tvm_pet.tune.shipped import shipped_records_dir  # noqa: E402
from tvm_pet.tune.targets import resolve_target, target_dir  # noqa: E402

#: This CPU's own level at 2 cores: the level the shipped records are for.
TARGET = "llvm -num-cores=2"
#: One timing process, one candidate, no second look or replication: the tests are about the
#: pipeline and the records, not the decision.
QUICK = {"timing_processes": 1, "confirm": 1, "second_look": False, "replicate": False}


@pytest.fixture
def records(tmp_path):
    """A copy of the shipped records of this CPU's level (the pipeline writes its run there)."""
    key = target_dir(resolve_target(TARGET))
    if not dbfile.has_database(shipped_records_dir() / key):
        pytest.skip(f"no shipped {key} records for this CPU's level")
    return shutil.copytree(shipped_records_dir() / key, tmp_path / key)


def test_the_tuned_pet_build_equals_onnxruntime_and_reuses_the_records(records):
    model = build_model("conv5x5")
    mod = from_onnx(model, keep_params_in_input=False)
    pipeline = relax.get_pipeline("pet_tuning", total_trials=0, target=TARGET,
                                  work_dir=str(records), max_trials_per_task=0, **QUICK)
    built = tvm.compile(pipeline(mod), resolve_target(TARGET))

    x = np.random.default_rng(0).standard_normal(
        [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype("float32")
    got = relax.VirtualMachine(built, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]
                                ).run(None, {model.graph.input[0].name: x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

    report = json.loads((records / "pet" / "report.json").read_text())
    assert report["new_trials"] == 0
    assert report["build"] == "TVM best: weights prepacked"
    kernels = report["kernels"]
    kept = (kernels["kept_total"], kernels["kept_tuned"]) if kernels["kept_total"] else (
        kernels["total"], kernels["tuned"])
    assert kept[0] >= 1 and kept[1] == kept[0]  # every kernel of the build scheduled


def test_tuning_pipeline_is_the_registered_pipeline_and_takes_tvms_arguments():
    assert relax.pipeline.PIPELINE_MAP["pet_tuning"] is tvm_pet.tuning_pipeline
    pipeline = tvm_pet.tuning_pipeline(total_trials=640, target=TARGET, work_dir="w",
                                       cpu_weight_prepack=False, max_trials_per_task=64)
    assert isinstance(pipeline, tvm.transform.Pass)
