"""Which kinds of rewrites win once tuned on a target, kept beside its records, and the tuning
plan that ranks by them: kinds that won here are tuned first, and fewer places are kept for
aligning mutants where they seldom win."""
import json

import pytest

from tvm_pet.cost.model import RewriteScreen
from tvm_pet.pipeline.kinds import EVIDENCE_FILE, Evidence, kind_of
from tvm_pet.pipeline.plan import Screened, outcomes, rank_mutants

MERGED = ("Concat", "Conv", "Split")
SPACE_TO_BATCH = ("ReshapeTranspose", "Conv", "ReshapeTranspose")
ALIGNING = ("Pad", "Conv", "Slice")


def record(kind, won, lost):
    """Evidence of ``won`` wins and ``lost`` losses of ``kind``."""
    return Evidence({f"{kind}{k}": (kind, 0.8 if k < won else 1.2) for k in range(won + lost)})


def test_a_kind_that_lost_here_ranks_below_one_that_won():
    rows = [Screened("sub0", SPACE_TO_BATCH, RewriteScreen(4e-3, 0.5, None, frozenset("a")), 0),
            Screened("sub1", MERGED, RewriteScreen(3e-3, 0.5, None, frozenset("b")), 1)]
    # no record: the larger expected saving first (2.0 ms, then 1.5 ms), even odds said
    first = rank_mutants(rows, promising=1, screen_ratio=2.0)
    assert [p.index for p in first] == [0]
    assert first[0].reason.endswith("space-to-batch not tuned on this target yet (even odds)")
    # space-to-batch lost the 4 times it was tuned here, merged won 3 of 3: merged takes the place
    evidence = Evidence({**record("space-to-batch", 0, 4).outcomes,
                         **record("merged", 3, 0).outcomes})
    picks = rank_mutants(rows, promising=1, screen_ratio=2.0, evidence=evidence)
    assert [p.index for p in picks] == [1]
    assert "merged won 3 of 3 tuned on this target" in picks[0].reason
    assert picks[0].to_json()["kind"] == "merged"
    # with places for both, both are tuned, the winning kind first
    both = rank_mutants(rows, promising=2, screen_ratio=2.0, evidence=evidence)
    assert [p.index for p in both] == [1, 0]


def test_a_mutant_slower_untuned_ranks_lower_when_its_kind_seldom_wins():
    rows = [Screened("sub0", SPACE_TO_BATCH, RewriteScreen(4e-3, 1.1, None, frozenset("a")), 0),
            Screened("sub1", MERGED, RewriteScreen(4e-3, 1.2, None, frozenset("b")), 1)]
    assert [p.index for p in rank_mutants(rows, 1, 2.0)] == [0]  # -0.4 ms before -0.8 ms
    evidence = record("space-to-batch", 0, 6)  # odds 1/8: -0.4 ms weighs as -3.2 ms
    assert [p.index for p in rank_mutants(rows, 1, 2.0, evidence)] == [1]


def test_fewer_places_are_kept_for_aligning_mutants_where_they_seldom_win():
    def row(k, replaced, ratio, aligns):
        return Screened(f"sub{k}", ALIGNING if aligns else MERGED,
                        RewriteScreen(replaced, ratio, None, frozenset({f"k{k}"})), k, aligns)

    rows = [row(0, 3e-3, 0.5, False), row(1, 9e-3, 1.1, True), row(2, 4e-3, 1.2, True),
            row(3, 2e-3, 0.6, False)]
    assert kind_of(ALIGNING) == "extents"
    # even odds: half of 4 places for the aligning ones, then the best expected savings
    assert [p.index for p in rank_mutants(rows, 4, 2.0)] == [1, 2, 0, 3]
    # extents won 0 of 6 here: odds 1/8 keep round(4 / 8) = 0 places; the aligning mutants
    # compete by their (negative) expected saving, last: -0.8 ms before -0.9 ms
    picks = rank_mutants(rows, 4, 2.0, record("extents", 0, 6))
    assert [p.index for p in picks] == [0, 3, 2, 1] and not any(p.aligns for p in picks)
    # extents won 5 of 6: the half kept
    assert [p.index for p in rank_mutants(rows, 4, 2.0, record("extents", 5, 1))][:2] == [1, 2]


def test_mutants_with_records_already_count_as_evidence():
    rows = [Screened("sub0", MERGED, RewriteScreen(4e-3, 0.9, 3e-3, frozenset("a")), 0),
            Screened("sub1", SPACE_TO_BATCH, RewriteScreen(4e-3, 0.9, 5e-3, frozenset("b")), 1),
            Screened("sub2", MERGED, RewriteScreen(4e-3, 0.9, None, frozenset("c")), 2)]
    assert outcomes(rows) == [("a", "merged", 0.75), ("b", "space-to-batch", 1.25)]
    picks = rank_mutants(rows, 3, 2.0)
    assert picks[-1].index == 2 and "merged won 1 of 1 tuned on this target" in picks[-1].reason


def test_the_evidence_file_merges_by_kernels_so_a_rerun_counts_nothing_twice(tmp_path):
    assert Evidence.load(tmp_path).outcomes == {}  # no file
    Evidence({"a": ("merged", 0.8)}).save(tmp_path)
    Evidence({"a": ("merged", 0.8), "b": ("extents", 1.3)}).save(tmp_path)
    again = Evidence.load(tmp_path)
    assert again.counts("merged") == (1, 1) and again.counts("extents") == (0, 1)
    assert again.to_json() == {"extents": {"won": 0, "tuned": 1, "odds": 0.333},
                               "merged": {"won": 1, "tuned": 1, "odds": 0.667}}
    (tmp_path / EVIDENCE_FILE).write_text("not json")
    assert Evidence.load(tmp_path).outcomes == {}  # unreadable: no evidence, no failure
    assert Evidence.key({"k2", "k1"}) == "k1|k2"


def test_tuning_keeps_each_tuned_mutant_s_outcome_beside_the_records(tmp_path):
    pytest.importorskip("tvm")
    from tests.dilated import dilated_chain
    from tests.test_tune_model import StubCost, StubToolchain
    from tvm_pet.pipeline import DriverOptions, tune_model
    from tvm_pet.search.config import SearchConfig

    class Tuned(StubCost):
        """Every mutant's kernels hold records once a mutant has been tuned, and run at the
        stub cost's time: a rewrite of the dilated chain wins or loses as the cost says."""

        toolchain = None

        def screen(self, before, after, by_flops=False):
            done = len(self.toolchain.tuned) > 1
            return RewriteScreen(self.cost(before), 1.0, self.cost(after) if done else None,
                                 frozenset({repr([n.op for n in after.nodes])}))

    class Toolchain(StubToolchain):
        def cost_model(self):
            Tuned.toolchain = self
            return Tuned(self.target, self.records_dir)

    options = DriverOptions(trials=4, records_dir=str(tmp_path / "records"), promising=2)
    summary = tune_model(dilated_chain(), SearchConfig(rounds=1, time_limit=120), options,
                         Toolchain(options.records_dir)).to_json()
    kept = json.loads((tmp_path / "records" / EVIDENCE_FILE).read_text())
    picked = [m for m in summary["tuned_mutants"] if m["subprogram"] != "combined"]
    assert picked and {m["kind"] for m in picked} <= {v["kind"] for v in kept.values()}
    assert sum(e["tuned"] for e in summary["evidence"].values()) == len(kept)
    # a rerun tunes the same mutants and adds no outcome twice
    again = tune_model(dilated_chain(), SearchConfig(rounds=1, time_limit=120), options,
                       Toolchain(options.records_dir)).to_json()
    assert json.loads((tmp_path / "records" / EVIDENCE_FILE).read_text()) == kept
    assert again["evidence"] == summary["evidence"]


def test_the_evidence_file_ships_with_the_records():
    from tvm_pet.tune import dbfile
    from tvm_pet.tune.shipped import SHIPPED_FILES
    assert dbfile.EVIDENCE_FILE == EVIDENCE_FILE and EVIDENCE_FILE in SHIPPED_FILES
