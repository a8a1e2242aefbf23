"""The application layer (``tvm_pet.pipeline``) without TVM: its stages run on a fake toolchain,
the tuning plan is pure, the tune stage and the search share one generator cache, and the
package layering holds (``cost/`` and ``search/`` import neither ``relax/`` nor ``tune/``; the
engine and the application's stages import without TVM)."""
import ast
import dataclasses
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tests.dilated import dilated_chain
from tvm_pet.cost.analytic import AnalyticCost
from tvm_pet.errors import KernelBuildError
from tvm_pet.ir import Op
from tvm_pet.pipeline import DriverOptions, TuneSummary, optimize, tune_model
from tvm_pet.pipeline.confirm import CPU_SHARED_ABOVE, confirm
from tvm_pet.cost.model import RewriteScreen
from tvm_pet.pipeline.plan import Screened, rank_mutants
from tvm_pet.pipeline.search import search
from tvm_pet.search.config import SearchConfig
from tvm_pet.search.mutant_cache import MutantCache
from tvm_pet.search.optimizer import Candidate
from tvm_pet.verify.interpreter import evaluate

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "tvm_pet"

#: The keys of ``report.json`` before the application layer (``relax/driver.py``); kept.
REPORT_KEYS = {"model", "target", "cost_model", "baseline_time_s", "optimized_time_s", "speedup",
               "measured_speedup_of_candidate", "timings", "decision_rule", "kept", "looks",
               "search_time_s", "tuning_time_s", "new_trials", "tuning", "max_abs_err",
               "max_abs_err_vs_onnxruntime", "applied", "candidates_confirmed", "search"}
#: The keys of each look of ``report.json`` (``new_trials`` and ``tuning_time_s`` when it tuned).
LOOK_KEYS = {"what", "candidate", "trials_per_task", "seed", "rounds", "ratio", "p_value",
             "noise", "close", "kept", "rule"}


# ------------------------------------------------------------------------------ a fake toolchain

@dataclasses.dataclass(frozen=True)
class FakeTiming:
    median: float
    samples: tuple[float, ...]
    others_share: float | None = None


def _timing(median, rel_iqr=0.04):
    lo, hi = median * (1 - rel_iqr / 2), median * (1 + rel_iqr / 2)
    return FakeTiming(median, (lo, lo, lo, median, median, hi, hi, hi))


@dataclasses.dataclass(frozen=True)
class FakeTuned:
    tasks: int
    new_trials: int
    wall_s: float
    per_task: tuple = ()
    records_per_task: float = 0.0


@dataclasses.dataclass(frozen=True)
class FakeExecutable:
    program: object


class DilationIsSlow:
    """The analytic cost plus one per dilated conv; the screen compares the two costs."""
    name = "dilation-is-slow"

    def cost(self, program):
        dilated = sum(1.0 for n in program.nodes
                      if n.op is Op.CONV and any(d > 1 for d in n.attrs["dilations"]))
        return AnalyticCost().cost(program) + dilated

    def screen(self, before, after, by_flops=False):
        return RewriteScreen(self.cost(before), self.cost(after) / self.cost(before))


@dataclasses.dataclass(frozen=True)
class FakePlan:
    """A records plan: ``untuned`` of ``tasks`` kernels have no record; its line shows what the
    run was told to say."""
    tasks: int
    untuned: int = 0
    borrowed: int = 0
    lenders: tuple = ()

    @property
    def own(self) -> int:
        return self.tasks - self.untuned - self.borrowed

    def summary(self, trials=0, budget=None, *, by_default=False, default_cap=None,
                inside_share=None):
        return (f"records for fake: {self.tasks} kernels, {self.untuned} untuned; trials "
                f"{trials}, budget {budget}, by default {by_default}, cap {default_cap}")


class FakeToolchain:
    """Every toolchain operation without TVM: a module is the Program itself, an executable runs
    on the NumPy interpreter, and timings (one scripted ratio per call) and tuning are noted.
    It lowers every layout alike: the stages' tests of an imported model ask for NCHW, so that
    no timing goes to choosing a layout (``tests/test_layout.py`` tests that choice)."""

    target_name = "fake"
    build_name = "fake build"

    def __init__(self, ratios=(), records_dir="fake-records", untuned=0):
        self.records_dir, self.untuned = records_dir, untuned
        self.ratios, self.timed, self.tuned = list(ratios), [], []

    def with_lowering(self, lower):
        return self

    def lower(self, program):
        return program

    def kernel_records(self, module):
        return len(module.nodes), 0

    def records_plan(self, module):
        return FakePlan(len(module.nodes), self.untuned)

    def coverage(self, program, searched):
        return {}

    def build(self, module):
        return FakeExecutable(module)

    def tune(self, module, trials, *, seed, progress=None, skip=frozenset()):
        self.tuned.append((trials, seed))
        return FakeTuned(tasks=1, new_trials=trials, wall_s=0.5)

    def tune_whole(self, module, budget, *, seed, progress=None):
        self.tuned.append((str(budget), seed))
        return FakeTuned(tasks=1, new_trials=12, wall_s=0.5, records_per_task=12.0)

    def time(self, executables, inputs, *, rounds, number, repeat):
        ratio = self.ratios[len(self.timed)]
        self.timed.append(rounds)
        return {"baseline": _timing(1e-3 * ratio), "optimized": _timing(1e-3)}

    def run(self, executable, inputs):
        program = executable.program
        outputs = evaluate(program, {t.name: x for t, x in zip(program.inputs, inputs)})
        return [outputs[name] for name in program.outputs]

    def export(self, executable, path):
        pathlib.Path(path).write_text("a fake executable\n")

    def script(self, module):
        return f"# {len(module.nodes)} nodes\n"

    def onnx_prelude(self, program, opset):
        return None  # the fake lowers each program on its own: its inputs are the model's

    def cost_model(self):
        return DilationIsSlow()




def dilated_onnx(path: pathlib.Path) -> pathlib.Path:
    from tvm_pet.onnx import export_model
    path.write_bytes(export_model(dilated_chain(layers=1)).SerializeToString())
    return path


def _inputs(program):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(t.shape).astype(np.float32) for t in program.inputs]


# ------------------------------------------------------------------------------ the stages

def test_optimize_on_a_fake_toolchain_writes_every_report_key_and_artifact(tmp_path):
    pytest.importorskip("onnx")
    toolchain = FakeToolchain(ratios=[1.3, 1.2])  # kept at x1.3, then its replication
    report = optimize(dilated_onnx(tmp_path / "m.onnx"), tmp_path / "out",
                      SearchConfig(rounds=1),
                      DriverOptions(layout="NCHW", cost="analytic", timing_rounds=2),
                      toolchain=toolchain, cost=DilationIsSlow())
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert REPORT_KEYS <= set(written) and written == json.loads(json.dumps(report.to_json()))
    assert all(LOOK_KEYS <= set(look) for look in written["looks"])
    assert written["kept"] == "optimized" and written["applied"] and toolchain.timed == [2, 2]
    assert [look["what"].split(":")[0] for look in written["looks"]] == ["first look",
                                                                         "replication"]
    assert written["measured_speedup_of_candidate"] == pytest.approx(1.2)  # the replication's
    # each look names its candidate's rewrites and their kinds: the kept ones, here
    applied = [a["mutant"] for a in written["applied"]]
    assert all(look["mutants"] == applied and look["kinds"] for look in written["looks"])
    assert written["max_abs_err"] < 1e-4 and written["target"] == "fake"
    # the fake schedules no kernel from records: the kept module's kernels are said untuned too
    kernels = written["kernels"]
    assert kernels["kept_total"] == len(report.confirmation.chosen.program.nodes)
    assert kernels["kept_tuned"] == 0 and kernels["untuned_decision"]
    assert f"the kept module's: 0 of {kernels['kept_total']} had a record" in kernels["summary"]
    for name in ("optimized.so", "baseline.so", "optimized.onnx", "optimized.py"):
        assert (tmp_path / "out" / name).exists()


class BusyMachine(FakeToolchain):
    """The fake toolchain on a machine where other processes used ``share`` of the CPU while
    each look was timed."""

    def __init__(self, share, **kwargs):
        super().__init__(**kwargs)
        self.share = share

    def time(self, executables, inputs, *, rounds, number, repeat):
        timings = super().time(executables, inputs, rounds=rounds, number=number, repeat=repeat)
        return {n: dataclasses.replace(t, others_share=self.share) for n, t in timings.items()}


@pytest.mark.parametrize("share", [0.45, 0.05])
def test_a_look_timed_while_other_processes_used_the_cpu_says_so(tmp_path, capsys, share):
    pytest.importorskip("onnx")
    from tvm_pet.cli import _print_cpu_shared
    report = optimize(dilated_onnx(tmp_path / "m.onnx"), tmp_path / "out",
                      SearchConfig(rounds=1),
                      DriverOptions(layout="NCHW", cost="analytic", timing_rounds=2),
                      toolchain=BusyMachine(share, ratios=[1.3, 1.2]), cost=DilationIsSlow())
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [look["cpu_others_share"] for look in written["looks"]] == [share, share]
    look = report.confirmation.look
    assert look.cpu_shared is (share > CPU_SHARED_ABOVE)
    _print_cpu_shared(look)
    out = capsys.readouterr().out
    assert ("other processes used 45% of the CPU" in out) is look.cpu_shared
    assert out == "" or look.cpu_shared


class NearTies(AnalyticCost):
    """The analytic cost, as a cost measured once per kernel: rewrites costed up to 50 % above
    the original are near ties, for the timing to decide."""
    spread = 1.5


def test_a_near_tie_is_timed_and_kept_when_it_runs_faster(tmp_path):
    pytest.importorskip("onnx")
    toolchain = FakeToolchain(ratios=[1.3, 1.0, 1.0])
    report = optimize(dilated_onnx(tmp_path / "m.onnx"), tmp_path / "out",
                      SearchConfig(rounds=1),
                      DriverOptions(layout="NCHW", cost="analytic", timing_rounds=2,
                                    replicate=False),
                      toolchain=toolchain, cost=NearTies())
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    search_json = written["search"]
    assert not search_json["applied"] and search_json["speedup"] == 1.0  # nothing cheaper
    assert search_json["near_ties"] >= search_json["near_ties_confirmed"] >= 1
    assert all(c >= search_json["original_cost"] for c in search_json["runner_up_costs"])
    assert written["kept"] == "optimized" and written["kept_candidate"] == 0
    assert written["applied"] and written["max_abs_err"] < 1e-4
    assert len(toolchain.timed) == search_json["near_ties_confirmed"] == report.found.near_ties
    assert "costed as near ties of the original" in report.found.line()


@pytest.mark.parametrize("untuned, asked, minutes, tuned, said", [
    # a few untuned kernels: tuned at the default trials each
    (2, 0, 10, 32, "trials 32, budget None, by default True, cap None"),
    # more than the cap: the whole model within the default minutes
    (9, 0, 10, "10 minutes", "trials 0, budget 10 minutes, by default True, cap 8"),
    # more than the cap and no default minutes: said, not tuned
    (9, 0, 0, None, "trials 0, budget None, by default False, cap 8"),
    # all have records: nothing to tune
    (0, 0, 10, None, "trials 0, budget None, by default False, cap None"),
    # --trials asked: that, as asked
    (2, 8, 10, 8, "trials 8, budget None, by default False, cap None"),
    (9, 8, 10, 8, "trials 8, budget None, by default False, cap None"),
])
def test_kernels_without_records_are_tuned_by_default_up_to_a_cap(tmp_path, untuned, asked,
                                                                   minutes, tuned, said):
    pytest.importorskip("onnx")
    toolchain = FakeToolchain(ratios=[1.3, 1.3], untuned=untuned)
    options = DriverOptions(layout="NCHW", cost="analytic", timing_rounds=2, trials=asked,
                            untuned_trials=32, untuned_cap=8, untuned_minutes=minutes, promising=0,
                            second_look=False)
    report = optimize(dilated_onnx(tmp_path / "m.onnx"), tmp_path / "out", SearchConfig(rounds=1),
                      options, toolchain=toolchain, cost=DilationIsSlow())
    assert said in report.records_plan
    assert [t for t, _ in toolchain.tuned] == ([] if tuned is None else [tuned])
    tuning = report.to_json()["tuning"]
    if isinstance(tuned, str):
        assert tuning["budget"] == tuned and tuning["new_trials"] == 12
    else:
        assert tuning.get("trials_per_task") == tuned


def test_a_candidate_that_computes_something_else_is_refused_and_the_next_one_timed():
    program = dilated_chain(layers=1)
    wrong = Candidate(dilated_chain(layers=2), 0.0, [])  # as a faulty build would compute
    toolchain = FakeToolchain(ratios=[1.3])
    confirmation = confirm(program, [wrong, Candidate(program, 0.0, [])], toolchain,
                           DriverOptions(timing_rounds=2, second_look=False, replicate=False),
                           _inputs(program))
    refused, timed = confirmation.looks
    assert refused.refused.startswith("candidate 0's compiled module differs from the original's")
    assert refused.rounds == 0 and not refused.decision.keep and refused.to_json()["ratio"] is None
    assert timed.what == "runner-up 1" and timed.candidate == 1 and toolchain.timed == [2]
    assert confirmation.keep and confirmation.chosen is not wrong
    assert any("candidate 0 refused" in note for note in confirmation.notes)


def test_when_every_candidate_is_refused_the_original_is_kept_and_timed_alone():
    program = dilated_chain(layers=1)
    toolchain = FakeToolchain(ratios=[1.0])
    confirmation = confirm(program, [Candidate(dilated_chain(layers=2), 0.0, [])], toolchain,
                           DriverOptions(timing_rounds=2, second_look=False), _inputs(program))
    refused, alone = confirmation.looks
    assert refused.refused is not None and alone.candidate is None and not confirmation.keep
    assert "every candidate was refused" in confirmation.rule
    assert confirmation.final is confirmation.baseline.executable
    assert set(confirmation.timings) == {"baseline", "optimized"}


class CannotCompile(FakeToolchain):
    """TVM's code generation fails on every module but ``program`` (a faulty kernel)."""

    def __init__(self, program, **kwargs):
        super().__init__(**kwargs)
        self.program = program

    def build(self, module):
        if module is not self.program:
            raise KernelBuildError("TVM cannot compile it for fake (InternalError: Check failed)")
        return super().build(module)


def test_a_candidate_tvm_cannot_compile_is_refused_and_the_next_one_timed():
    program = dilated_chain(layers=1)
    toolchain = CannotCompile(program, ratios=[1.3])
    cannot = Candidate(dilated_chain(layers=1), 0.0, [])  # another object: it fails to build
    confirmation = confirm(program, [cannot, Candidate(program, 0.0, [])], toolchain,
                           DriverOptions(timing_rounds=2, second_look=False, replicate=False),
                           _inputs(program))
    refused, timed = confirmation.looks
    assert refused.refused.startswith("TVM cannot compile it") and refused.rounds == 0
    assert timed.candidate == 1 and toolchain.timed == [2] and confirmation.keep


def test_an_original_tvm_cannot_compile_is_an_error_that_says_so():
    program = dilated_chain(layers=1)
    with pytest.raises(KernelBuildError, match="TVM cannot build the model as imported, before "
                                               "any PET rewrite: TVM cannot compile it"):
        confirm(program, [Candidate(program, 0.0, [])], CannotCompile(dilated_chain(layers=1)),
                DriverOptions(timing_rounds=2), _inputs(program))


def test_a_close_call_with_a_budget_is_tuned_again_on_both_sides():
    program = dilated_chain(layers=1)
    toolchain = FakeToolchain(ratios=[1.03, 1.3])
    candidate = Candidate(program, 0.0, [])  # the same program: its outputs match
    confirmation = confirm(program, [candidate], toolchain,
                           DriverOptions(trials=8, seed=3, timing_rounds=2, replicate=False),
                           _inputs(program))
    first, second = confirmation.looks
    assert first.decision.close and not first.decision.keep and first.new_trials is None
    assert second.budget.trials_per_task == 16 and second.budget.seed == 4
    assert toolchain.tuned == [(16, 4), (16, 4)] and toolchain.timed == [2, 4]
    assert second.new_trials == 32 and second.tuning_time_s == pytest.approx(1.0)
    assert confirmation.keep and confirmation.chosen is candidate
    assert LOOK_KEYS | {"new_trials", "tuning_time_s"} <= set(second.to_json())


def test_rank_mutants_ranks_the_whole_model_by_expected_saving():
    def screened(*rows):
        return [Screened(f"sub{k}", (f"M{k}",), RewriteScreen(*row), k)
                for k, row in enumerate(rows)]

    # (tuned time replaced, untuned ratio, tuned time of the new kernels when tuned before):
    # expected savings 1.5, 2.0, -, 0.9 ms, and 1.0 ms measured tuned
    rows = screened((3e-3, 0.5), (10e-3, 0.8), (5e-3, 3.0), (3e-3, 0.7), (1e-3, 0.1, 0.0))
    picks = rank_mutants(rows, promising=3, screen_ratio=2.0)
    # the one tuned before keeps its place; then the best expected savings, across subsets
    assert [p.index for p in picks] == [4, 1, 0]
    assert picks[0].tuned_before and picks[0].reason.startswith("has records already")
    assert [round(p.expected_saving_ms, 6) for p in picks] == [1.0, 2.0, 1.5]
    assert "expected to save 2.00 ms" in picks[1].reason
    # a mutant whose new kernels are slower untuned than the threshold is never picked
    assert 2 not in [p.index for p in rank_mutants(rows, promising=5, screen_ratio=2.0)]
    assert [p.index for p in rank_mutants(rows, promising=5, screen_ratio=0.4)] == [4]
    # a rerun, once the picks are tuned: the same ones, ranked by what they save tuned, and
    # nothing is tuned again
    rerun = screened((3e-3, 0.5, 2.5e-3), (10e-3, 0.8, 11e-3), (5e-3, 3.0), (3e-3, 0.7),
                     (1e-3, 0.1, 0.0))
    again = rank_mutants(rerun, promising=3, screen_ratio=2.0)
    assert [p.index for p in again] == [4, 0, 1] and all(p.tuned_before for p in again)
    assert [round(p.expected_saving_ms, 6) for p in again] == [1.0, 0.5, -1.0]
    # a mutant adding only kernels that a better-ranked one adds takes no place
    same = screened((3e-3, 0.5, None, frozenset({1, 2})), (3e-3, 0.5, None, frozenset({1})),
                    (2e-3, 0.5, None, frozenset({3})))
    assert [p.index for p in rank_mutants(same, promising=2, screen_ratio=2.0)] == [0, 2]


def test_mutants_that_align_an_awkward_side_take_half_the_places_until_tuned():
    def row(sub, replaced, ratio, keys, tuned=None, aligns=False):
        return (sub, RewriteScreen(replaced, ratio, tuned, frozenset(keys)), aligns)

    def screened(rows):
        return [Screened(sub, ("M",), screen, k, aligns)
                for k, (sub, screen, aligns) in enumerate(rows)]

    # Inception-v3's 38 x 38 convs: Pad -> Conv -> Slice to 40 is slower untuned (x1.2), so its
    # expected saving is negative; the 3 x 3 one shared by three layers reaches furthest
    rows = [row("sub0", 3e-3, 0.5, {"a"}),                      # saves 1.5 ms, expected
            row("sub1", 4e-3, 1.2, {"p"}, aligns=True),         # 3 layers, 12 ms reached
            row("sub2", 4e-3, 1.2, {"p"}, aligns=True),
            row("sub3", 4e-3, 1.2, {"p"}, aligns=True),
            row("sub4", 9e-3, 1.1, {"q"}, aligns=True),         # 9 ms reached
            row("sub5", 2e-3, 1.1, {"r"}, aligns=True),
            row("sub6", 5e-3, 2.5, {"s"}, aligns=True),         # beyond the screen's ratio
            row("sub7", 1e-3, 0.1, {"t"}, tuned=0.0)]           # tuned before: 1 ms
    picks = rank_mutants(screened(rows), promising=4, screen_ratio=2.0)
    # half the places: the aligning ones reaching furthest, one per kernel; then the rest
    assert [p.index for p in picks] == [1, 4, 7, 0]
    assert picks[0].aligns and picks[0].reason.startswith("pads an awkward side")
    assert not picks[2].aligns and picks[2].tuned_before
    # the rerun, once they are tuned (one slower than the original, tuned): their places are
    # spent, so no other aligning mutant is tuned; they rank by what they save tuned
    rows[1:5] = [row(f"sub{k}", 4e-3, 1.2, {"p"}, tuned=3e-3, aligns=True) for k in (1, 2, 3)] \
        + [row("sub4", 9e-3, 1.1, {"q"}, tuned=10e-3, aligns=True)]
    again = rank_mutants(screened(rows), promising=4, screen_ratio=2.0)
    assert [p.index for p in again] == [1, 7, 4, 0]
    assert all(p.tuned_before for p in again[:3]) and not any(p.aligns for p in again)
    # one place for one promising mutant: none kept for aligning
    assert [p.index for p in rank_mutants(screened(rows[:1]), 1, 2.0)] == [0]
    # two ways to align one conv: the padding in the conv (Conv -> Slice) before a PAD that
    # fuses into the kernel before it (Pad -> Conv -> Slice); one place per subprogram
    ways = [Screened("sub1", ("Pad", "Conv", "Slice"), RewriteScreen(4e-3, 1.2, None,
                                                                     frozenset("p")), 0, True),
            Screened("sub1", ("Conv", "Slice"), RewriteScreen(4e-3, 1.3, None, frozenset("c")),
                     1, True),
            Screened("sub4", ("Conv", "Slice"), RewriteScreen(3e-3, 1.1, None, frozenset("d")),
                     2, True)]
    picks = rank_mutants(ways, promising=4, screen_ratio=2.0)
    assert [p.index for p in picks] == [1, 2, 0]
    # the third is ranked by its expected saving, not for its alignment: its reason says so
    assert [p.aligns for p in picks] == [True, True, False]
    assert picks[2].reason.startswith("screened: expected to save -0.80 ms")


def test_the_tune_stage_and_the_search_share_one_generator_cache():
    program = dilated_chain(layers=2)
    config = SearchConfig(rounds=1, time_limit=120)
    toolchain = FakeToolchain()
    mutants = MutantCache()
    summary = tune_model(program, config, DriverOptions(trials=4, promising=50), toolchain,
                         mutants)
    assert isinstance(summary, TuneSummary) and summary.ran and len(mutants) > 0
    listed = {key: mutants.get(key) for key in mutants}
    found = search(program, config, DilationIsSlow(), mutants, confirm=3)
    # the search generated nothing again: every subset's entry is the one the tune stage made
    assert {key: mutants.get(key) for key in mutants} == listed
    assert all(mutants.get(key) is generated for key, generated in listed.items())
    assert found.result.applied and found.candidates
    # the original, each tuned mutant, and the two layers rewritten together
    assert len(toolchain.tuned) == 1 + len(summary.plan.picks)
    assert summary.plan.picks[-1].subprogram == "combined"


# ------------------------------------------------------------------------------ the layering

def _imports(path: pathlib.Path) -> set[str]:
    """Every module a file imports, at the top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


@pytest.mark.parametrize("package", ["cost", "search"])
def test_cost_and_search_import_neither_relax_nor_tune(package):
    for path in sorted((PACKAGE / package).rglob("*.py")):
        bad = {m for m in _imports(path)
               if _under(m, "tvm", "tvm_pet.relax", "tvm_pet.tune", "tvm_pet.pipeline")}
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


def test_the_application_reaches_tvm_only_through_its_toolchain():
    for path in sorted((PACKAGE / "pipeline").glob("*.py")):
        if path.name == "tvm_backend.py":
            continue
        bad = {m for m in _imports(path)
               if _under(m, "tvm", "tvm_ffi", "tvm_pet.relax", "tvm_pet.tune")}
        assert not bad, f"pipeline/{path.name} imports {sorted(bad)}"


def test_the_toolchain_function_stays_the_function_once_tvm_is_made():
    # the module of TVM's toolchain was named tvm_toolchain, as the function: importing it on
    # the function's first call replaced the package's function by the module, so that a later
    # `from tvm_pet.pipeline import tvm_toolchain` got a module (a benchmark's second model)
    script = """
from tvm_pet.pipeline import tvm_toolchain
tvm_toolchain("llvm")
from tvm_pet.pipeline import tvm_toolchain as again
import tvm_pet.pipeline.tvm_backend
print(again is tvm_toolchain, callable(again))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=PACKAGE.parent, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


def test_the_engine_and_the_stages_import_without_tvm():
    script = """
import importlib, pkgutil, sys
sys.modules["tvm"] = sys.modules["tvm_ffi"] = None  # any import of TVM raises ImportError
import tvm_pet
skip = {"tvm_pet.pipeline.tvm_backend"}
for package in ("ir", "ops", "verify", "search", "cost", "onnx", "pipeline"):
    root = importlib.import_module("tvm_pet." + package)
    for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
        if info.name not in skip:
            importlib.import_module(info.name)
print("imported without tvm")
"""
    pytest.importorskip("onnx")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=PACKAGE.parent, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "imported without tvm" in done.stdout


def test_no_function_in_the_package_is_much_longer_than_60_lines():
    """A function reads as one idea. Docstrings count, so allow a little."""
    root = pathlib.Path(__file__).resolve().parents[1] / "tvm_pet"
    long = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 65:
                    long.append(f"{path.relative_to(root.parent)}::{node.name} ({lines} lines)")
    assert not long, long
