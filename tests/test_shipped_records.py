"""The tuning records shipped in tvm_pet/tuning_logs/ are reused with zero new trials (no tuning
here).

Records ship for two 2-core x86 levels: ``llvm-skylake-avx512-c2`` (AVX-512) and
``llvm-haswell-c2`` (AVX2), with at least 32 trials per task; on another machine kind the target
key differs and these tests are skipped.
"""
import pytest

tvm = pytest.importorskip("tvm")

from tvm_pet.models import build_model  # noqa: E402
from tvm_pet.onnx import import_model  # noqa: E402
from tvm_pet.relax.adapter import program_to_module  # noqa: E402
from tvm_pet.tune import dbfile, extract_tasks, kernel_times, tune  # noqa: E402
from tvm_pet.tune.records import record_sources  # noqa: E402
from tvm_pet.tune.shipped import shipped_records_dir  # noqa: E402
from tvm_pet.tune.targets import resolve_target, target_dir  # noqa: E402

ROOT = shipped_records_dir()
TARGET = resolve_target("llvm")
SHIPPED = ROOT / target_dir(TARGET)
MODELS = ["dilated_conv", "conv5x5", "two_1x1_convs", "three_matmuls", "csrnet_backend"]
TRIALS = 32

pytestmark = pytest.mark.skipif(not dbfile.has_database(SHIPPED),
                                reason=f"no shipped records for target {target_dir(TARGET)}")


@pytest.mark.parametrize("name", MODELS)
def test_second_run_needs_zero_new_trials(name):
    module = program_to_module(import_model(build_model(name)))
    stats = tune(module, TARGET, TRIALS, ROOT)
    assert stats.tasks >= 1
    assert stats.new_trials == 0, f"{name}: records incomplete ({stats})"


@pytest.mark.parametrize("name", MODELS)
def test_measured_cost_reads_the_records(name):
    """Every kernel has a checked record of this target; it is costed with it, or with a
    compatible target's record where that one ran faster here (``kernels.chosen_record``)."""
    module = program_to_module(import_model(build_model(name)))
    opened = record_sources(ROOT, TARGET).open()
    tasks = extract_tasks(module, TARGET)
    own = [opened.checked_by_source(t.mod, t.shash, TARGET).get(None) for t in tasks]
    assert tasks and all(r is not None for r in own), [t.name for t, r in zip(tasks, own) if not r]
    times = kernel_times(module, TARGET, ROOT)
    assert {t.shash for t in times} == {t.shash for t in tasks}
    assert all(t.source in ("tuned", "borrowed") for t in times), [t.source for t in times]
    assert all(t.seconds > 0 for t in times)
