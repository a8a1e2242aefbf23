"""The measurement layer (tvm_pet.tune): targets, prepare/build/run against NumPy, timing, tuning.

The default run is fast and never tunes. MetaSchedule tests are marked ``tuning`` and run only
when selected: ``python -m pytest tests/test_tune.py -m tuning``. No test asserts on speed.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.op import nn as rnn

from tvm_pet.errors import PetError
from tvm_pet.models import build_model
from tvm_pet.onnx import import_model
from tvm_pet.pipeline.options import WholeBudget
from tvm_pet.relax.adapter import program_to_module
from tvm_pet.tune import (
    UntunedTimes,
    apply_records,
    build_with_records,
    count_records,
    dbfile,
    extract_tasks,
    kernel_times,
    open_database,
    parse_rpc,
    prepare,
    resolve_target,
    target_dir,
    time_interleaved,
    tune,
)
from tvm_pet.tune.records import (
    db_dir,
    default_records_dir,
    record_sources,
)
from tvm_pet.tune.shipped import shipped_records_dir
from tests.records import embedding_module
from tvm_pet.tune.records_plan import records_plan
from tvm_pet.tune.targets import available_cores, compatible_dirs, detect_mcpu

F32 = "float32"
#: MetaSchedule runs are skipped unless selected with ``-m tuning`` (pytest evaluates the string).
only_when_selected = pytest.mark.skipif("'tuning' not in config.getoption('markexpr')",
                                        reason="runs MetaSchedule; select it with -m tuning")


def conv_module(rng):
    """conv2d 3x3 pad 1 + bias + relu on x[1,4,8,8]; returns (module, weight, bias)."""
    weight = rng.standard_normal((8, 4, 3, 3)).astype(F32)
    bias = rng.standard_normal((1, 8, 1, 1)).astype(F32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), F32))
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = bb.emit(rnn.conv2d(x, relax.const(weight), padding=(1, 1, 1, 1)))
            out = bb.emit_output(rnn.relu(relax.op.add(conv, relax.const(bias))))
        bb.emit_func_output(out)
    return bb.finalize(), weight, bias


def conv_oracle(x, weight, bias):
    """NumPy conv2d 3x3, stride 1, pad 1, + bias, relu."""
    n, _, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, weight.shape[0], h, w), np.float64)
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", padded[:, :, i:i + h, j:j + w], weight[:, :, i, j])
    return np.maximum(out + bias, 0)


def matmul_module(rng, m, k, n, copies=1):
    """``copies`` matmuls a[m,k] @ W_i[k,n] (constants); one output, or a tuple of them."""
    weights = [rng.standard_normal((k, n)).astype(F32) for _ in range(copies)]
    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((m, k), F32))
    with bb.function("main", [a]):
        with bb.dataflow():
            outs = [bb.emit(relax.op.matmul(a, relax.const(weight))) for weight in weights]
            out = bb.emit_output(outs[0] if copies == 1 else relax.Tuple(outs))
        bb.emit_func_output(out)
    return bb.finalize(), weights


def run(executable, *inputs):
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()


# ---------------------------------------------------------------------------------------- targets

def test_llvm_target_names_the_cpu_and_cores():
    target = resolve_target("llvm")
    assert target.kind.name == "llvm"
    assert int(target.attrs["num-cores"]) == available_cores()
    assert target.attrs.get("mcpu") == detect_mcpu()
    assert str(resolve_target(None)) == str(target)
    assert resolve_target(target) is target


@pytest.mark.parametrize("flags, mcpu", [("fpu sse avx2 avx512f avx512bw", "skylake-avx512"),
                                         ("fpu sse avx avx2 fma", "haswell"),
                                         ("fpu sse sse2", None)])
def test_mcpu_follows_cpuinfo_flags(flags, mcpu):
    assert detect_mcpu(f"processor\t: 0\nflags\t\t: {flags}\n") == mcpu


def test_llvm_target_dict_overrides_and_none_drops():
    target = resolve_target({"kind": "llvm", "mcpu": "emeraldrapids", "num-cores": 8})
    assert target.attrs["mcpu"] == "emeraldrapids" and int(target.attrs["num-cores"]) == 8
    assert "mcpu" not in resolve_target({"kind": "llvm", "mcpu": None}).attrs


def test_cuda_target_has_arch_and_thread_limits():
    target = resolve_target("cuda")
    assert target.kind.name == "cuda"
    assert re.fullmatch(r"sm_\d+", str(target.attrs["arch"]))
    assert int(target.attrs["max_threads_per_block"]) == 1024
    assert int(target.attrs["thread_warp_size"]) == 32


@pytest.mark.parametrize("spec", ["rocm", "llvm -mcpu=native", {"kind": "vulkan"}, {"mcpu": "x"}])
def test_unknown_target_is_a_pet_error(spec):
    with pytest.raises(PetError):
        resolve_target(spec)


AVX2_FLAGS = "flags\t: fpu sse sse2 pni ssse3 fma cx16 sse4_1 sse4_2 popcnt avx f16c avx2 bmi2\n"
AVX512_FLAGS = AVX2_FLAGS.rstrip() + " avx512f avx512dq avx512cd avx512bw avx512vl\n"


def test_missing_cpu_features_names_what_an_llvm_target_needs_and_this_cpu_lacks():
    """What keeps an AVX-512 target's code off an AVX2 CPU (where it dies of SIGILL): LLVM's
    features for the target against /proc/cpuinfo's flags, spelled either way."""
    from tvm_pet.tune.targets import missing_cpu_features
    skylake = resolve_target("llvm -mcpu=skylake-avx512 -num-cores=2")
    haswell = resolve_target("llvm -mcpu=haswell -num-cores=2")
    assert missing_cpu_features(skylake, AVX2_FLAGS) == [
        "avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl"]
    assert missing_cpu_features(skylake, AVX512_FLAGS) == []
    assert missing_cpu_features(haswell, AVX2_FLAGS) == []  # sse3 is cpuinfo's pni, sse4.1 sse4_1
    assert missing_cpu_features(resolve_target({"kind": "llvm", "mcpu": None}), "flags : fpu") == [
        "sse", "sse2"]
    extra = resolve_target({"kind": "llvm", "mcpu": "haswell", "mattr": ["+avx512f"]})
    assert missing_cpu_features(extra, AVX2_FLAGS) == ["avx512f"]
    # nothing to tell: no flags line (another OS or architecture), a GPU target, another triple
    assert missing_cpu_features(skylake, "processor : 0\n") == []
    assert missing_cpu_features(resolve_target("cuda"), AVX2_FLAGS) == []
    arm = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"})
    assert missing_cpu_features(arm, AVX2_FLAGS) == []
    # this host runs the target it resolves to, whatever it is
    assert missing_cpu_features(resolve_target("llvm")) == []


def test_target_dir_is_stable_safe_and_distinct():
    key = target_dir(resolve_target("llvm"))
    assert key == target_dir(resolve_target("llvm"))
    assert re.fullmatch(r"[A-Za-z0-9._-]+", key)
    pinned = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}
    assert target_dir(resolve_target(pinned)) == "llvm-skylake-avx512-c2"
    assert target_dir(resolve_target({**pinned, "num-cores": 4})) == "llvm-skylake-avx512-c4"
    assert target_dir(resolve_target({"kind": "cuda", "arch": "sm_90"})) == "cuda-sm_90"
    with_mattr = target_dir(resolve_target({**pinned, "mattr": ["+avx2"]}))
    assert with_mattr.startswith("llvm-skylake-avx512-c2-") and with_mattr != key


def test_records_dir_may_be_the_root_or_the_target_directory(tmp_path):
    target = resolve_target("llvm")
    key = target_dir(target)
    assert db_dir(tmp_path, target) == db_dir(tmp_path / key, target) == tmp_path / key
    assert default_records_dir(target, tmp_path / "nothing_shipped") == f"tuning_logs/{key}"
    other = resolve_target({"kind": "cuda", "arch": "sm_90"})
    assert db_dir(tmp_path / key, other) == tmp_path / key / "cuda-sm_90"  # never shared


def test_a_copy_of_a_target_directory_under_another_name_is_refused_not_read_empty(tmp_path):
    """Read as a root, a renamed copy of a target's directory holds no records, and a run
    would tune every kernel again without a word; so it is refused with what to pass."""
    from tvm_pet.tune.dbfile import WORKLOAD_FILE
    target = resolve_target("llvm")
    copy = tmp_path / "my_records"
    copy.mkdir()
    (copy / (WORKLOAD_FILE + ".xz")).write_bytes(b"")
    with pytest.raises(PetError, match=f"name the folder {target_dir(target)}"):
        db_dir(copy, target)
    assert db_dir(tmp_path, target) == tmp_path / target_dir(target)  # a root is read as one


def test_default_records_dir_finds_the_shipped_records_from_anywhere(tmp_path, monkeypatch):
    target = resolve_target("llvm")
    key = target_dir(target)
    checkout = tmp_path / "checkout" / "tuning_logs"
    work = tmp_path / "elsewhere"
    work.mkdir()
    monkeypatch.chdir(work)
    assert default_records_dir(target, checkout) == f"tuning_logs/{key}"  # nothing shipped: here
    shipped = checkout / key
    shipped.mkdir(parents=True)
    (shipped / "database_workload.json").write_text("")
    assert default_records_dir(target, checkout) == str(shipped)
    # a folder holding only the untuned-times cache does not hide the shipped records
    (work / "tuning_logs" / key).mkdir(parents=True)
    (work / "tuning_logs" / key / "untuned_times.json").write_text("{}")
    assert default_records_dir(target, checkout) == str(shipped)
    (work / "tuning_logs" / key / "database_workload.json").write_text("")
    assert default_records_dir(target, checkout) == f"tuning_logs/{key}"  # the project's own first


# ------------------------------------------------------------------------------ prepare and build

def test_prepare_fuses_and_is_idempotent():
    mod, _, _ = conv_module(np.random.default_rng(0))
    prepared = prepare(mod)
    names = sorted(gv.name_hint for gv in prepared.functions)
    assert names == ["fused_conv2d_add_relu", "main"]
    assert prepare(prepared) is prepared


def test_prepare_rejects_a_module_without_main():
    mod, _, _ = conv_module(np.random.default_rng(0))
    renamed = tvm.IRModule({"f": mod["main"]})
    with pytest.raises(PetError, match="main"):
        prepare(renamed)


def test_build_conv_matches_numpy():
    rng = np.random.default_rng(1)
    mod, weight, bias = conv_module(rng)
    x = rng.standard_normal((1, 4, 8, 8)).astype(F32)
    np.testing.assert_allclose(run(build_with_records(mod), x), conv_oracle(x, weight, bias),
                               rtol=1e-4, atol=1e-4)


def test_cuda_build_generates_code_without_a_gpu():
    mod, _, _ = conv_module(np.random.default_rng(0))
    # dlight schedules the untuned kernel; codegen only here
    executable = build_with_records(mod, "cuda")

    def kinds(module):
        yield module.kind
        for imported in module.imports:
            yield from kinds(imported)

    assert "cuda" in set(kinds(executable.mod))


def test_build_without_records_applies_nothing(tmp_path):
    mod, _, _ = conv_module(np.random.default_rng(0))
    _, applied = apply_records(mod, None, tmp_path)
    assert applied == 0 and count_records(tmp_path, resolve_target("llvm")) == 0


def test_extract_tasks_merges_identical_kernels():
    mod, _ = matmul_module(np.random.default_rng(0), 8, 16, 8, copies=3)
    tasks = extract_tasks(mod)
    assert [(task.name, task.weight) for task in tasks] == [("matmul", 3)]  # weights are params


# ------------------------------------------------------------------------------------------ timing

def test_time_interleaved_returns_sane_numbers():
    rng = np.random.default_rng(2)
    mod, _, _ = conv_module(rng)
    x = rng.standard_normal((1, 4, 8, 8)).astype(F32)
    fused, plain = build_with_records(mod), tvm.compile(mod, target=resolve_target("llvm"))
    timings = time_interleaved({"fused": fused, "plain": plain}, [x], rounds=2, number=2,
                               repeat=2)
    assert set(timings) == {"fused", "plain"}
    for timing in timings.values():
        assert len(timing.samples) == 4
        assert all(0 < s < 1 for s in timing.samples)
        assert timing.min <= timing.median <= timing.max and timing.spread >= 0


def test_time_interleaved_rejects_empty_budgets():
    with pytest.raises(PetError):
        time_interleaved({}, [], rounds=0)


def test_kernel_times_measures_untuned_once_then_caches(tmp_path):
    mod, _, _ = conv_module(np.random.default_rng(3))
    first = kernel_times(mod, None, tmp_path)
    assert [k.source for k in first] == ["untuned"] and first[0].seconds > 0
    assert (tmp_path / target_dir(resolve_target("llvm")) / "untuned_times.json").exists()

    def fail(*_args, **_kwargs):
        raise AssertionError("measured again instead of reading the cache")

    assert kernel_times(mod, None, tmp_path, measure_untuned=fail) == first
    memory = UntunedTimes()
    memory.put(resolve_target("llvm"), first[0].shash, 1.5)
    assert kernel_times(mod, None, None, cache=memory, measure_untuned=fail)[0].seconds == 1.5


def test_kernel_times_times_a_tuned_kernel_here_with_its_schedule(tmp_path):
    """A kernel with a record costs its schedule timed in this process (the record's own time
    was measured by the tuner's runner, maybe on another thread count), cached per schedule and
    thread count."""
    # the shipped records of this CPU's level, built for it: an AVX-512 target's kernels would
    # stop an AVX2 CPU with 'Illegal instruction' (they did, on a Zen 3 EPYC)
    target = resolve_target("llvm -num-cores=2")
    shipped = shipped_records_dir() / target_dir(target)
    if not dbfile.has_database(shipped):
        pytest.skip(f"no shipped {target_dir(target)} records in this checkout")
    mod = program_to_module(import_model(build_model("conv5x5")))
    tasks = extract_tasks(mod, target)
    own = tmp_path / target_dir(target)
    own.mkdir()
    dbfile.unpack(shipped)  # the shipped files are packed
    assert dbfile.seed(dbfile.read_tables(shipped), [str(t.shash) for t in tasks], own) > 0
    measured = []

    def measure(task_mod, _target, repeat):
        measured.append(task_mod)
        return 1.25e-3

    times = kernel_times(mod, target, tmp_path, measure_untuned=measure)
    assert [k.source for k in times] == ["tuned"] * len(tasks)
    assert [k.seconds for k in times] == [1.25e-3] * len(tasks)  # not the record's run_secs
    # what was timed is the record's schedule, not the task's naive loop nest
    assert not any(tvm_ffi.structural_equal(m, t.mod) for m, t in zip(measured, tasks))

    def fail(*_args, **_kwargs):
        raise AssertionError("measured again instead of reading the cache")

    assert kernel_times(mod, target, tmp_path, measure_untuned=fail) == times
    assert UntunedTimes.key(target, 7).endswith(f"/7@{os.environ['TVM_NUM_THREADS']}t")


def test_rpc_spec_is_checked():
    assert parse_rpc("127.0.0.1:9190:cpu") == ("127.0.0.1", 9190, "cpu")
    for bad in ["127.0.0.1:9190", "host:port:key", ":1:k"]:
        with pytest.raises(PetError, match="host:port:key"):
            parse_rpc(bad)


def test_missing_database_is_a_pet_error(tmp_path):
    with pytest.raises(PetError, match="no tuning records"):
        open_database(tmp_path, resolve_target("llvm"), create=False)
    with pytest.raises(PetError, match="at least 1"):
        tune(conv_module(np.random.default_rng(0))[0], None, 0, tmp_path)


# ------------------------------------------------------------------------- tuning (-m tuning only)

@pytest.mark.tuning
@only_when_selected
def test_tune_writes_records_reuses_them_and_builds_correctly(tmp_path):
    rng = np.random.default_rng(4)
    mod, (weight,) = matmul_module(rng, 64, 64, 64)
    target = resolve_target("llvm")

    stats = tune(mod, target, trials=8, records_dir=tmp_path, seed=0)
    assert stats.new_trials == 8 and count_records(tmp_path, target) == 8
    assert stats.per_task[0].error is None and stats.per_task[0].best_s is not None

    again = tune(mod, target, trials=8, records_dir=tmp_path, seed=0)
    assert again.new_trials == 0 and count_records(tmp_path, target) == 8
    by_target_dir = tune(mod, target, trials=8, records_dir=tmp_path / target_dir(target))
    assert by_target_dir.new_trials == 0 and by_target_dir.tasks == 1

    _, applied = apply_records(mod, target, tmp_path)
    assert applied == 1
    a = rng.standard_normal((64, 64)).astype(F32)
    np.testing.assert_allclose(run(build_with_records(mod, target, tmp_path), a), a @ weight,
                               rtol=1e-4, atol=1e-3)
    assert [k.source for k in kernel_times(mod, target, tmp_path)] == ["tuned"]


@pytest.mark.tuning
@only_when_selected
def test_tune_survives_candidates_that_time_out(tmp_path):
    mod, _, _ = conv_module(np.random.default_rng(6))
    stats = tune(mod, None, trials=2, records_dir=tmp_path, timeout_s=0.05)  # no build finishes
    task = stats.per_task[0]
    assert task.error is None and task.new_trials == task.failed_trials == 2
    assert task.best_s is None
    assert [k.source for k in kernel_times(mod, None, tmp_path)] == ["untuned"]


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def rpc_loopback(key: str):
    """Start an RPC tracker and one server on 127.0.0.1; yield ``"host:port:key"``; stop both."""
    tracker_port, server_port = free_port(), free_port()
    procs = []
    try:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1",
             "--port", str(tracker_port), "--port-end", str(tracker_port + 1), "--silent"],
            start_new_session=True))
        time.sleep(1.0)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tvm.exec.rpc_server", "--tracker",
             f"127.0.0.1:{tracker_port}", "--key", key, "--host", "127.0.0.1",
             "--port", str(server_port), "--port-end", str(server_port + 1), "--silent"],
            start_new_session=True))
        deadline = time.monotonic() + 60
        while True:
            try:
                summary = tvm.rpc.connect_tracker("127.0.0.1", tracker_port).summary()
                if key in str(summary.get("server_info", "")):
                    break
            except (OSError, RuntimeError, tvm.error.TVMError):
                pass
            assert all(p.poll() is None for p in procs), "the RPC tracker or server exited"
            assert time.monotonic() < deadline, "the RPC server did not register in 60 s"
            time.sleep(0.5)
        yield f"127.0.0.1:{tracker_port}:{key}"
    finally:  # each runs in its own process group: the server's popen workers go with it
        for proc in reversed(procs):
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.mark.tuning
@only_when_selected
def test_tune_through_rpc_loopback(tmp_path):
    mod, _ = matmul_module(np.random.default_rng(5), 32, 32, 32)
    target = resolve_target("llvm")
    with rpc_loopback("pet-cpu") as rpc:
        stats = tune(mod, target, trials=4, records_dir=tmp_path, rpc=rpc, timeout_s=60)
    assert stats.new_trials == 4
    assert stats.per_task[0].best_s is not None  # at least one candidate ran on the server


@pytest.mark.tuning
@only_when_selected
def test_an_embedding_take_gets_a_record_through_rpc(tmp_path):
    """The RPC runner fills integer arguments with zeros too (tuner.in_bounds_rpc_arguments):
    random indices made a gather read out of bounds on the server."""
    with rpc_loopback("pet-cpu-take") as rpc:
        stats = tune(embedding_module(), resolve_target("llvm"), trials=2, records_dir=tmp_path,
                     rpc=rpc, timeout_s=60)
    assert [s.best_s is not None for s in stats.per_task] == [True]


def test_compatible_records_rank_same_level_then_wider_then_nearest_cores():
    haswell = resolve_target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    keys = ["cuda-sm_90", "llvm-skylake-avx512-c4", "llvm-skylake-avx512-c2", "llvm-haswell-c2",
            "llvm-generic-c2", "llvm-haswell-c16", "llvm-skylake-avx512-c2-0a1b2c3d"]
    assert compatible_dirs(haswell, keys) == ["llvm-haswell-c16", "llvm-skylake-avx512-c2",
                                              "llvm-skylake-avx512-c4", "llvm-generic-c2"]
    assert compatible_dirs(resolve_target({"kind": "cuda", "arch": "sm_90"}), keys) == []


def test_record_sources_borrow_a_compatible_directory_beside_the_own(tmp_path):
    haswell = resolve_target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    for key in ("llvm-skylake-avx512-c2", "cuda-sm_90"):
        (tmp_path / key).mkdir()
        (tmp_path / key / "database_workload.json").write_text("")
    sources = record_sources(tmp_path, haswell)
    assert sources.own == tmp_path / "llvm-haswell-c2"
    # beside the own one first (its entry wins over the shipped folder of that name)
    assert sources.lenders == (tmp_path / "llvm-skylake-avx512-c2",)


def test_target_specs_as_on_tvms_command_line_or_json():
    assert target_dir(resolve_target("llvm -mcpu=haswell -num-cores=4")) == "llvm-haswell-c4"
    assert target_dir(resolve_target('{"kind": "llvm", "mcpu": "haswell"}')).startswith(
        "llvm-haswell-c")
    for bad, why in [("arm", "unknown target"), ("llvm mcpu", "-key=value"), ("{x", "JSON")]:
        with pytest.raises(PetError, match=why):
            resolve_target(bad)


def test_records_plan_counts_the_kernels_without_own_records_that_do_not_reduce(tmp_path):
    """A pad's kernel does not reduce (MetaSchedule exhausts its search space at one trial):
    ``--charge inside`` reserves it one trial, not the trials per kernel of a conv."""
    from tvm_pet.tune.compile import reduces
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 12, 12), F32))
    with bb.function("main", [x]):
        with bb.dataflow():
            padded = bb.emit(rnn.pad(x, [0, 0, 0, 0, 2, 2, 2, 2]))
            conv = bb.emit(rnn.conv2d(padded, relax.const(
                rng.standard_normal((8, 4, 3, 3)).astype(F32)), dilation=(2, 2)))
            out = bb.emit_output(rnn.relu(conv))
        bb.emit_func_output(out)
    mod = bb.finalize()
    target = "llvm -mcpu=haswell -num-cores=2"
    tasks = extract_tasks(mod, resolve_target(target))
    assert sorted(map(reduces, tasks)) == [False, True]  # the pad; the conv with its relu
    for records_dir in (None, tmp_path):  # no records anywhere, or an empty folder
        plan = records_plan(mod, target, records_dir)
        assert (plan.tasks, plan.own, plan.untuned, plan.unowned_spatial) == (2, 0, 2, 1)


def test_records_plan_counts_own_borrowed_and_untuned_kernels(tmp_path):
    shipped = shipped_records_dir() / "llvm-skylake-avx512-c2"
    if not dbfile.has_database(shipped):
        pytest.skip("no shipped llvm-skylake-avx512-c2 records in this checkout")
    mod = program_to_module(import_model(build_model("conv5x5")))
    own = records_plan(mod, "llvm -mcpu=skylake-avx512 -num-cores=2", shipped)
    assert own.tasks >= 1 and (own.own, own.borrowed, own.untuned) == (own.tasks, 0, 0)
    # the shipped Haswell records hold conv5x5's kernels too: each is built with the faster
    assert own.borrowed_from == "llvm-haswell-c2" and own.both == own.tasks
    assert (f"0 untuned ({own.tasks} with records of more than one target: each built with "
            "the one that runs fastest here)") in own.summary()
    lent = records_plan(mod, "llvm -mcpu=haswell -num-cores=2", tmp_path)  # none of its own
    assert (lent.own, lent.borrowed, lent.untuned) == (0, lent.tasks, 0)
    assert lent.borrowed_from == "llvm-skylake-avx512-c2"
    assert f"{lent.tasks} borrowed from llvm-skylake-avx512-c2, 0 untuned" in lent.summary()
    # a target with no folder of its own borrows from every compatible one, the one with the
    # most records first: the Skylake ones, then the few Haswell kernels that rank first by match
    # for a 4-core Haswell target; conv5x5's kernels are in both, each built with the faster
    four = records_plan(mod, "llvm -mcpu=haswell -num-cores=4", tmp_path)
    assert four.borrowed_from == "llvm-skylake-avx512-c2 and llvm-haswell-c2"
    assert (four.own, four.borrowed, four.both) == (0, four.tasks, four.tasks)
    bare = records_plan(mod, "llvm -mcpu=haswell -num-cores=2", None)
    assert bare.untuned == bare.tasks and "--trials N" in bare.summary()
    assert "tuning 8 trials" in bare.summary(8)
    assert f"by default since {bare.tasks} have no record anywhere" in bare.summary(
        32, by_default=True)
    assert "more than the 8 tuned by default" in bare.summary(default_cap=8)
    whole = bare.summary(budget=WholeBudget(minutes=10), by_default=True, default_cap=8)
    assert (f"within 10 minutes for this target first, by default since {bare.tasks} have no "
            "record anywhere (more than the 8 tuned kernel by kernel by default") in whole
    assert "by default" not in bare.summary(budget=WholeBudget(minutes=10))
