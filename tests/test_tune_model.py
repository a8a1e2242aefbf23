"""`tune_model`'s choice of what to tune, with the tuner and the measured cost stubbed by a
toolchain that overrides TVM's: the original, the screened mutants, then their combination across
layers (no MetaSchedule here)."""
import dataclasses
import types

import numpy as np
import pytest

pytest.importorskip("tvm")

from tests.dilated import PenaliseDilationAndLayouts, dilated_chain  # noqa: E402
from tests.records import TARGET, task_mods, write_records  # noqa: E402
from tvm_pet.cost.model import RewriteScreen  # noqa: E402
from tvm_pet.errors import PetError  # noqa: E402
from tvm_pet.ir import Op  # noqa: E402
from tvm_pet.pipeline import DriverOptions, tune_model  # noqa: E402
from tvm_pet.pipeline.plan import combination  # noqa: E402
from tvm_pet.pipeline.tvm_backend import TVMToolchain  # noqa: E402
from tvm_pet.search.config import SearchConfig  # noqa: E402
from tvm_pet.pipeline.options import WholeBudget  # noqa: E402
from tvm_pet.tune import TaskStats, TuneStats  # noqa: E402
from tvm_pet.tune.records import db_dir  # noqa: E402
from tvm_pet.verify.interpreter import evaluate  # noqa: E402


class StubCost(PenaliseDilationAndLayouts):
    """Stands in for MeasuredCost: same constructor, the test cost, a flat screen."""

    additive = False

    def __init__(self, target=None, records_dir=None, tuned=True):
        super().__init__()

    def screen(self, before, after, by_flops=False):
        return RewriteScreen(self.cost(before), 1.0)


class StubToolchain(TVMToolchain):
    """TVM's toolchain with the tuner noted, not run, and the stub cost for the measured one."""

    def __init__(self, records_dir):
        super().__init__("llvm", records_dir)
        self.tuned, self.trials, self.wholes = [], [], []

    def tune(self, module, trials, *, seed, progress=None, skip=frozenset()):
        self.tuned.append(module)
        self.trials.append(trials)
        return TuneStats("k", self.records_dir, (), 0.0)

    def tune_whole(self, module, budget, *, seed, progress=None):
        self.wholes.append((module, budget))
        # as if the scheduler had given the model's 3 tasks 10, 12 and 14 trials
        per_task = tuple(TaskStats(f"t{k}", 1, 0, n, 0, 0.0, 1e-3)
                         for k, n in enumerate((10, 12, 14)))
        return TuneStats("k", self.records_dir, per_task, 0.0)

    def cost_model(self):
        return StubCost(self.target, self.records_dir)


def test_the_combination_of_improving_mutants_is_tuned_too(tmp_path):
    program = dilated_chain()
    options = DriverOptions(trials=4, records_dir=str(tmp_path / "none"), promising=50)
    toolchain = StubToolchain(options.records_dir)
    summary = tune_model(program, SearchConfig(rounds=1, time_limit=120), options,
                         toolchain).to_json()
    tuned = toolchain.tuned
    # the original, the screened mutants (all of them here), then the layers rewritten together
    singles = summary["tuned_mutants"][:-1]
    assert len(tuned) == 1 + len(singles) + 1 and len({m["subprogram"] for m in singles}) == 3
    last = summary["tuned_mutants"][-1]
    assert last["subprogram"] == "combined"
    layouts = [op for op in last["mutant"] if op in ("Reshape", "Transpose", "ReshapeTranspose")]
    assert last["mutant"].count("Conv") == 3 and len(layouts) <= 2


def test_a_whole_model_budget_tunes_the_original_then_mutants_at_its_trials_per_task(tmp_path):
    program = dilated_chain()
    options = DriverOptions(budget=WholeBudget(trials=36), records_dir=str(tmp_path / "none"),
                            promising=1)
    toolchain = StubToolchain(options.records_dir)
    summary = tune_model(program, SearchConfig(rounds=1, time_limit=120), options,
                         toolchain).to_json()
    assert [b for _, b in toolchain.wholes] == [WholeBudget(trials=36)]
    import tvm
    tvm.ir.assert_structural_equal(toolchain.wholes[0][0], toolchain.lower(program))
    assert toolchain.trials and set(toolchain.trials) == {12}  # (10 + 12 + 14) / 3 per task
    assert summary["budget"] == "36 trials" and summary["trials_per_task"] == 12
    assert summary["new_trials"] == 36 and summary["mutant_trials"] == 0


def test_the_summary_splits_the_stage_s_seconds_between_tuning_and_screening(tmp_path,
                                                                            monkeypatch):
    import tvm_pet.pipeline.tune as tune_stage
    clock = [0.0]  # the stage's clock: the original's budget takes 30 s, a mutant's tuning 5 s,
    monkeypatch.setattr(tune_stage, "time",  # and screening a mutant 1 s
                        types.SimpleNamespace(perf_counter=lambda: clock[0]))

    def taking(seconds, stats):
        clock[0] += seconds
        return dataclasses.replace(stats, wall_s=seconds)

    screens = []  # each screen: the mutants ranked, then the tuned ones again on their records

    class Screening(StubCost):
        def screen(self, before, after, by_flops=False):
            clock[0] += 1.0
            screens.append(after)
            return super().screen(before, after)

    class Timed(StubToolchain):
        def tune(self, module, trials, *, seed, progress=None, skip=frozenset()):
            return taking(5.0, super().tune(module, trials, seed=seed))

        def tune_whole(self, module, budget, *, seed, progress=None):
            return taking(30.0, super().tune_whole(module, budget, seed=seed))

        def cost_model(self):
            return Screening(self.target, self.records_dir)

    from tvm_pet.cli import _split_seconds
    options = DriverOptions(budget=WholeBudget(trials=36), records_dir=str(tmp_path / "none"),
                            promising=2)
    toolchain = Timed(options.records_dir)
    summary = tune_model(dilated_chain(), SearchConfig(rounds=1, time_limit=120), options,
                         toolchain).to_json()
    mutants, screened = len(toolchain.tuned), summary["screened_mutants"]  # the picks, and
    assert mutants >= 2 and screened >= mutants  # their combination
    assert len(screens) >= screened + mutants - 1  # the picks again, tuned
    assert (summary["original_s"], summary["mutants_s"]) == (30.0, 5.0 * mutants)
    assert summary["screen_s"] == 1.0 * len(screens)
    assert summary["tuning_time_s"] == 30.0 + 5.0 * mutants + len(screens)
    assert _split_seconds(summary) == (
        f"{30 + 5 * mutants + len(screens)} s: 30 s tuning the original, {len(screens)} s "
        f"screening {screened} mutants, {5 * mutants} s tuning mutants")


def test_the_screen_costs_window_mutants_by_their_flops_and_times_the_others(tmp_path):
    """A window mutant's untuned time ranks nothing (its product is a naive loop nest; it has
    places of its own), so the screen does not time it untuned: it asks for the FLOP ratio."""
    from tvm_pet.ir import im2col
    asked = []

    class Noting(StubCost):
        def screen(self, before, after, by_flops=False):
            asked.append((im2col.uses(after), by_flops))
            return super().screen(before, after)

    class Toolchain(StubToolchain):
        def cost_model(self):
            return Noting(self.target, self.records_dir)

    options = DriverOptions(trials=4, records_dir=str(tmp_path / "none"), promising=2)
    tune_model(dilated_chain(), SearchConfig(rounds=1, time_limit=120, im2col=True), options,
               Toolchain(options.records_dir))
    assert {windows for windows, _ in asked} == {True, False}  # both kinds were screened
    assert all(by_flops == windows for windows, by_flops in asked)


def test_combination_of_fewer_than_two_improving_subsets_is_none():
    program = dilated_chain(layers=1)
    assert combination(program, [], StubCost()) is None


def _single_candidates(program):
    """``program``'s cost and ``(cost, subprogram, corrected mutant)`` for each verified mutant
    of each single-operator subset, applied alone, as a search round scores them for
    :func:`~tvm_pet.search.optimizer.combine`."""
    from tvm_pet.search.optimizer import Optimizer, operator_subsets
    from tvm_pet.search.partition import partition, replace_subprogram
    cost = PenaliseDilationAndLayouts()
    opt = Optimizer(SearchConfig(rounds=1, time_limit=120), cost)
    base, scored = cost.cost(program), []
    for sub in partition(program):
        for subset in operator_subsets(program, sub, 1):
            part, mutants = opt.mutants_of(program, subset, sub.name)
            scored += [(cost.cost(replace_subprogram(program, part, c)), part, c)
                       for _, c in mutants]
    return base, scored


def test_combination_is_exact():
    from tvm_pet.search.optimizer import combine
    program = dilated_chain()
    base, scored = _single_candidates(program)
    combined, chosen = combine(program, scored, base)
    # one candidate per layer, each the cheapest of its layer's, each an improvement
    assert len(chosen) == 3 and len({scored[k][1].nodes for k in chosen}) == 3
    for k in chosen:
        same = [s[0] for s in scored if s[1].nodes == scored[k][1].nodes]
        assert scored[k][0] == min(same) < base
    assert not any(n.op is Op.CONV and n.attrs["dilations"] != (1, 1) for n in combined.nodes)
    (y,) = program.outputs
    x = {"x": np.random.default_rng(0).standard_normal((1, 4, 8, 8))}
    np.testing.assert_allclose(evaluate(combined, x, np.float64)[y],
                               evaluate(program, x, np.float64)[y], rtol=1e-9, atol=1e-9)


def test_combination_starts_no_costing_past_the_time_limit():
    """Where all together do not pay, candidates are added one at a time, each a whole
    program's costing (seconds on swin_t): none starts once the search's time is up."""
    from tvm_pet.search.optimizer import combine
    program = dilated_chain()
    base, scored = _single_candidates(program)
    costed = []

    def never_pays(candidate):  # all together cost more than the best alone
        costed.append(candidate)
        return base * 2

    assert combine(program, scored, base, never_pays) is not None
    assert len(costed) == 3  # all together, then the two others one at a time
    costed.clear()
    assert combine(program, scored, base, never_pays, out_of_time=lambda: bool(costed))
    assert len(costed) == 1  # all together only


def test_the_toolchain_opens_the_records_once_until_tuning_adds_some(tmp_path, monkeypatch):
    import tvm_pet.pipeline.tvm_backend as tvm_backend
    opened, real = [], tvm_backend.costing_sources
    monkeypatch.setattr(tvm_backend, "costing_sources",
                        lambda *args: opened.append(args) or real(*args))
    trials, databases = [3, 0], []

    def tune(*args, database=None, **kwargs):  # measures 3 new trials, then none
        databases.append(database)
        return types.SimpleNamespace(new_trials=trials.pop())

    monkeypatch.setattr(tvm_backend, "tune", tune)
    write_records(db_dir(tmp_path / "records", TARGET), task_mods(1))  # records to open
    toolchain = TVMToolchain("llvm", str(tmp_path / "records"))
    module = toolchain.lower(dilated_chain(layers=1))
    toolchain.build(module)
    toolchain.kernel_records(module)
    toolchain.records_plan(module)
    cost = toolchain.cost_model()
    assert len(opened) == 1 and cost._open() is toolchain._records()
    own = toolchain._records()[0].own
    assert own is not None
    assert toolchain.tune(module, 4, seed=0).new_trials == 0  # counted in the open records
    toolchain.build(module)  # nothing added: still open
    assert len(opened) == 1 and databases == [own]
    assert toolchain.tune(module, 4, seed=0).new_trials == 3
    toolchain.build(module)  # records added: opened again
    assert len(opened) == 2


def test_mutants_tuned_before_are_topped_up_to_a_larger_budget(tmp_path):
    """A rerun at a larger budget tunes the picks an earlier run tuned up to it, as it does the
    original's kernels: both sides of the comparison at the same trials per task."""
    program = dilated_chain(layers=1)

    class TunedBefore(StubCost):
        def screen(self, before, after, by_flops=False):  # every mutant's kernels have records
            return RewriteScreen(self.cost(before), 0.5, tuned_s=0.5 * self.cost(before))

    class Toolchain(StubToolchain):
        def cost_model(self):
            return TunedBefore()

    options = DriverOptions(trials=512, records_dir=str(tmp_path / "none"), promising=2)
    toolchain = Toolchain(options.records_dir)
    summary = tune_model(program, SearchConfig(rounds=1, time_limit=120), options, toolchain)
    picks = [p for p in summary.plan.picks if p.subprogram != "combined"]
    assert picks and all(p.tuned_before for p in picks)
    # the original, then every pick, each asked for the run's trials per task
    assert len(toolchain.tuned) >= 1 + len(picks) and set(toolchain.trials) == {512}


def test_a_rerun_whose_picks_differ_combines_the_same_mutants(tmp_path):
    """The combination is made of every mutant whose kernels hold records and that saves time
    on them, not of this run's picks alone: a rerun, whose picks are all tuned before and may be
    others, then combines the same mutants, and the combination's fused kernels, tuned by the
    first run, are not new (CSRNet's rerun with --winograd tuned a new combination for 710 s)."""
    from tvm_pet.ir.keys import canonical

    class TunedBefore(StubCost):
        def screen(self, before, after, by_flops=False):  # tuned before; more ops save more
            c = self.cost(before)
            return RewriteScreen(c, 1.0, c * (1 - 0.01 * len(after.nodes)),
                                 frozenset({canonical(after)[0]}))

    class Toolchain(StubToolchain):
        def cost_model(self):
            return TunedBefore()

    combined = []
    for promising in (1, 3):  # one pick, then three: the picks differ
        options = DriverOptions(trials=4, records_dir=str(tmp_path / "none"),
                                promising=promising)
        toolchain = Toolchain(options.records_dir)
        summary = tune_model(dilated_chain(), SearchConfig(rounds=1, time_limit=120), options,
                             toolchain)
        picks = summary.plan.picks
        assert len([p for p in picks if p.subprogram != "combined"]) == promising
        assert picks[-1].subprogram == "combined" and picks[-1].mutant.count("Conv") == 3
        combined.append(toolchain.tuned[-1])  # the combination's module, tuned last
    import tvm
    tvm.ir.assert_structural_equal(combined[0], combined[1])


def test_the_report_counts_a_built_module_from_its_build(tmp_path, monkeypatch):
    # kernel_records of a module the toolchain built gives the build's own counts, without
    # applying the records again; after tuning adds records it counts again
    import tvm_pet.pipeline.tvm_backend as tvm_backend
    applied, real = [], tvm_backend.apply_records
    monkeypatch.setattr(tvm_backend, "apply_records",
                        lambda *a, **k: applied.append(a[0]) or real(*a, **k))
    monkeypatch.setattr(tvm_backend, "tune",
                        lambda *args, **kwargs: types.SimpleNamespace(new_trials=2))
    write_records(db_dir(tmp_path / "records", TARGET), task_mods(1))
    toolchain = TVMToolchain("llvm", str(tmp_path / "records"))
    module = toolchain.lower(dilated_chain(layers=1))
    toolchain.build(module)
    counted = toolchain.kernel_records(module)
    assert len(applied) == 1
    fresh = TVMToolchain("llvm", str(tmp_path / "records"))  # built nothing: counts now
    assert fresh.kernel_records(module) == counted and len(applied) == 2
    other = toolchain.lower(dilated_chain(layers=1))  # not built by toolchain: counted now
    assert toolchain.kernel_records(other) == counted and len(applied) == 3
    toolchain.tune(module, 4, seed=0)  # new records: the build's counts are stale
    toolchain.kernel_records(module)
    assert len(applied) == 4


def test_the_cli_tunes_with_the_seed_asked_for():
    from tvm_pet.cli import _driver_options, build_parser
    for command in ("optimize", "tune"):
        base = [command, "m.onnx", "--trials", "32"] + (
            ["--out", "o"] if command == "optimize" else [])
        assert _driver_options(build_parser().parse_args(base)).first_look_budget().seed == 0
        seeded = _driver_options(build_parser().parse_args(base + ["--seed", "2"]))
        assert seeded.first_look_budget() == type(seeded.first_look_budget())(32, 2)


def test_optimize_replicates_a_keep_unless_told_not_to():
    from tvm_pet.cli import _driver_options, build_parser
    base = ["optimize", "m.onnx", "--out", "o"]
    assert _driver_options(build_parser().parse_args(base)).replicate
    assert not _driver_options(build_parser().parse_args(base + ["--no-replication"])).replicate


class LedgerToolchain(StubToolchain):
    """The stub toolchain with a ledger of records per workload, as MetaSchedule keeps them:
    ``tune`` tops every task up to its trials, ``tune_whole`` spreads a whole-model budget
    evenly over the tasks (counting what they hold), and the records plan reads the ledger."""

    def __init__(self, records_dir):
        super().__init__(records_dir)
        self.ledger, self.measured = {}, 0

    def _tasks(self, module):
        from tvm_pet.tune.compile import extract_tasks
        return extract_tasks(module, self.target)

    def _call(self, module, goal):
        from tvm_pet.tune.compile import reduces
        per_task = []
        for task in self._tasks(module):
            key = str(task.shash)
            before = self.ledger.get(key, 0)
            # a pad's search space is exhausted at one trial
            new = max(0, (goal(key) if reduces(task) else min(1, goal(key))) - before)
            self.ledger[key] = before + new
            self.measured += new
            per_task.append(TaskStats(task.name, 1, before, new, 0, 0.0, 1e-3, workload=key))
        return TuneStats("k", self.records_dir, tuple(per_task), 0.0)

    def tune(self, module, trials, *, seed, progress=None, skip=frozenset()):
        self.tuned.append(module)
        self.trials.append(trials)
        return self._call(module, lambda key: 0 if key in skip else trials)

    def tune_whole(self, module, budget, *, seed, progress=None):
        self.wholes.append((module, budget))
        keys = [str(t.shash) for t in self._tasks(module)]
        left = budget.trials - sum(self.ledger.get(k, 0) for k in keys)
        extra = {k: left // len(keys) + (i < left % len(keys)) for i, k in enumerate(keys)}
        return self._call(module, lambda key: self.ledger.get(key, 0) + max(0, extra[key]))

    def records_plan(self, module):
        from tvm_pet.tune.compile import reduces
        tasks = self._tasks(module)
        unowned = [t for t in tasks if self.ledger.get(str(t.shash), 0) == 0]
        return types.SimpleNamespace(tasks=len(tasks), own=len(tasks) - len(unowned),
                                     borrowed=0, untuned=len(unowned),
                                     unowned_spatial=sum(not reduces(t) for t in unowned))


def two_kernel_chain():
    """Two dilated 3x3 convs (pad 2) of different widths, a bias and a ReLU each: two kernels."""
    from tvm_pet.ir import ProgramBuilder
    rng = np.random.default_rng(3)
    b = ProgramBuilder("two")
    h = b.input("x", (1, 4, 8, 8))
    for k, (cin, cout) in enumerate(((4, 4), (4, 8))):
        h = b.conv(h, b.weight(f"w{k}", rng.standard_normal((cout, cin, 3, 3)) * 0.3),
                   pads=2, dilations=2)
        h = b.add(h, b.weight(f"b{k}", rng.standard_normal((1, cout, 1, 1))))
        (h,) = b.opaque("Relu", [h])
    return b.build([h])


class SkewedLedger(LedgerToolchain):
    """The ledger toolchain whose whole-model budget goes 10 to the model's first kernel and
    the rest to the others, as a gradient scheduler may give a cheap kernel less."""

    def tune_whole(self, module, budget, *, seed, progress=None):
        self.wholes.append((module, budget))
        keys = [str(t.shash) for t in self._tasks(module)]
        rest = (budget.trials - 10) // (len(keys) - 1)
        return self._call(module, lambda key: 10 if key == keys[0] else rest)


def test_a_mutants_tuning_leaves_the_originals_kernels_as_the_budget_left_them(tmp_path):
    # 27 trials over the original's 2 kernels: 10 and 17, so 14 per task for the mutants; their
    # tuning used to top the first kernel (which the mutants leave alone) up to 14, and count
    # the 4 trials as PET's
    options = DriverOptions(budget=WholeBudget(trials=27), records_dir=str(tmp_path / "none"),
                            promising=4)
    toolchain = SkewedLedger(options.records_dir)
    original = [str(t.shash) for t in toolchain._tasks(toolchain.lower(two_kernel_chain()))]
    summary = tune_model(two_kernel_chain(), SearchConfig(rounds=1, time_limit=120), options,
                         toolchain).to_json()
    assert len(original) == 2 and toolchain.trials and set(toolchain.trials) == {14}
    assert [toolchain.ledger[k] for k in original] == [10, 17]
    new = sum(n for k, n in toolchain.ledger.items() if k not in original)
    assert new > 0 and summary["mutant_trials"] == new
    assert summary["new_trials"] == 27 + new


def _inside(tmp_path, budget, share, toolchain=None):
    options = DriverOptions(budget=WholeBudget(trials=budget), charge="inside",
                            mutant_share=share, records_dir=str(tmp_path / "none"), promising=4)
    toolchain = toolchain or LedgerToolchain(options.records_dir)
    summary = tune_model(dilated_chain(), SearchConfig(rounds=1, time_limit=120), options,
                         toolchain)
    return summary.to_json(), toolchain


def test_charged_inside_the_budget_the_run_measures_the_budget_in_all_and_a_rerun_nothing(
        tmp_path):
    summary, toolchain = _inside(tmp_path, budget=300, share=0.75)
    inside = summary["inside_budget"]
    originals = len(toolchain._tasks(toolchain.lower(dilated_chain())))
    # the original first at the same trials per task, what a quarter of the budget pays for
    assert inside["reserve"] == 225 and inside["trials_per_task"] == 75 // originals
    assert toolchain.trials[0] == inside["trials_per_task"]
    picks = [m for m in summary["tuned_mutants"] if m["subprogram"] != "combined"]
    assert picks and summary["mutant_trials"] > 0
    # the mutants' new kernels hold what they were charged, within the reserve
    assert summary["mutant_trials"] == inside["charged_to_mutants"] <= inside["reserve"]
    # the original's tasks then get the rest: the run measured the budget, no more
    assert summary["new_trials"] == toolchain.measured == 300
    assert summary["charge"] == "inside" and summary["budget"] == "300 trials"
    again, _ = _inside(tmp_path, budget=300, share=0.75, toolchain=toolchain)
    assert again["new_trials"] == 0 and toolchain.measured == 300
    assert again["inside_budget"]["charged_to_mutants"] == inside["charged_to_mutants"]


def test_a_mutant_the_reserve_cannot_hold_is_not_tuned_and_the_original_gets_the_budget(
        tmp_path):
    summary, toolchain = _inside(tmp_path, budget=300, share=0.01)  # 3 trials: no new kernel
    inside = summary["inside_budget"]
    assert inside["mutants_not_tuned"] >= 1 and summary["mutant_trials"] == 0
    assert summary["tuned_mutants"] == [] and len(toolchain.tuned) == 1  # the original alone
    assert summary["new_trials"] == toolchain.measured == 300


def test_a_pad_is_reserved_one_trial_so_pad_then_conv_fits_where_two_full_kernels_would_not(
        tmp_path):
    summary, toolchain = _inside(tmp_path, budget=300, share=0.6)
    inside = summary["inside_budget"]
    per_task = inside["trials_per_task"]
    assert inside["reserve"] < 2 * per_task  # a new pad and conv at full trials would not fit
    assert ["Pad", "Conv"] in [m["mutant"] for m in summary["tuned_mutants"]]
    # the new conv holds the trials per task, the new pad one (its search space is exhausted)
    assert inside["charged_to_mutants"] == summary["mutant_trials"] == per_task + 1
    assert summary["new_trials"] == toolchain.measured == 300


def test_charging_inside_takes_a_budget_in_trials():
    for kwargs in ({}, {"budget": WholeBudget(minutes=5)}, {"trials": 32}):
        with pytest.raises(PetError, match="--charge inside"):
            DriverOptions(charge="inside", **kwargs)
    with pytest.raises(PetError, match="--mutant-share"):
        DriverOptions(budget=WholeBudget(trials=100), charge="inside", mutant_share=1.0)
    from tvm_pet.pipeline.tune import Allowance

    class TenKernels(LedgerToolchain):
        def records_plan(self, module):
            return types.SimpleNamespace(tasks=10, own=0, borrowed=0, untuned=10,
                                         unowned_spatial=0)

    options = DriverOptions(budget=WholeBudget(trials=8), charge="inside", mutant_share=0.5)
    with pytest.raises(PetError, match="its 10 kernels one each; give at least 20"):
        Allowance.of(TenKernels(None), dilated_chain(), options)


def test_the_cli_charges_the_mutants_inside_the_budget_only_when_asked(tmp_path):
    from tvm_pet.cli import _driver_options, _tuned_line, build_parser
    for command in ("optimize", "tune"):
        base = [command, "m.onnx", "--budget", "300"] + (
            ["--out", "o"] if command == "optimize" else [])
        assert _driver_options(build_parser().parse_args(base)).charge == "beside"
        asked = _driver_options(build_parser().parse_args(
            base + ["--charge", "inside", "--mutant-share", "0.75"]))
        assert (asked.charge, asked.mutant_share) == ("inside", 0.75)
    summary, _ = _inside(tmp_path, budget=300, share=0.6)
    line, inside = _tuned_line(summary), summary["inside_budget"]
    original = summary["new_trials"] - summary["mutant_trials"]
    assert inside["mutants_not_tuned"] >= 2  # "mutants", plural
    assert line.startswith(f"tuned the whole model within 300 trials, PET's mutants inside it: "
                           f"{original} new trials for the original's kernels (120 per kernel")
    assert (f"{summary['mutant_trials']} for PET's mutants (their new kernels hold "
            f"{inside['charged_to_mutants']} of the 180 reserved; "
            f"{inside['mutants_not_tuned']} mutants not tuned" in line)


def test_the_records_plan_says_the_mutants_are_charged_inside_the_budget(tmp_path):
    from tvm_pet.pipeline.optimize import records_plan
    options = DriverOptions(budget=WholeBudget(trials=300), charge="inside", mutant_share=0.75,
                            records_dir=str(tmp_path / "none"))
    _, line, _ = records_plan(StubToolchain(options.records_dir), dilated_chain(), options)
    assert "tuning the whole model within 300 trials (PET's mutants inside it: 75% kept for " \
           "them) for this target first" in line
    toolchain = StubToolchain(options.records_dir)
    _, line, counts = records_plan(toolchain, dilated_chain(),
                           DriverOptions(budget=WholeBudget(trials=300),
                                         records_dir=options.records_dir))
    assert "within 300 trials for this target first" in line
    kernels = toolchain.records_plan(toolchain.lower(dilated_chain())).tasks
    assert kernels == counts.kernels == 1
    # the scheduler's first batch: half the budget over the kernels, at most MetaSchedule's 64
    assert ("after a first round that it does not cut short: one batch per kernel, 64 trials "
            "for its one kernel)" in line)
