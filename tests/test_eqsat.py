"""Equality saturation (``SearchConfig(search="eqsat")``): the e-graph, its rules, extraction by
cost, its budgets, and the command line and pass that reach it."""
import json

import numpy as np
import pytest

from tests.dilated import PenaliseDilation, dilated_chain, dilated_model
from tests.test_search import SpoiledTogether, small_model
from tvm_pet.cli import main
from tvm_pet.cost.analytic import AnalyticCost
from tvm_pet.ir import Op, ProgramBuilder, check_program
from tvm_pet.models import build_model
from tvm_pet.onnx import import_model, save_model
from tvm_pet.search.config import SearchConfig, StopReason
from tvm_pet.search.dispatch import run_search
from tvm_pet.search.eqsat import checked, eqsat
from tvm_pet.search.eqsat.extract import CyclicChoice, ENode, Snapshot, build
from tvm_pet.search.eqsat.rules import Facts, RULES, rules_named
from tvm_pet.search.eqsat.terms import ProgramEGraph
from tvm_pet.search.mutant_cache import MutantCache
from tvm_pet.search.optimizer import optimize
from tvm_pet.verify.interpreter import evaluate

LAYOUTS = (Op.RESHAPE, Op.TRANSPOSE, Op.RESHAPE_TRANSPOSE)


class LayoutsCostMore(PenaliseDilation):
    """Dilated convolutions are slow, and each layout node costs more than half of what undoing a
    dilation saves: rewriting one dilated conv alone (space-to-batch, a layout on each side)
    costs more than it saves; rewriting neighbours together pays once their layouts cancel."""

    name = "layouts-cost-more"

    def cost(self, program):
        layouts = sum(n.op in LAYOUTS for n in program.nodes)
        return super().cost(program) + 0.6 * layouts


def assert_same_function(program, other, seeds=2):
    check_program(other)
    assert other.outputs == program.outputs
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        x = {t.name: rng.standard_normal(t.shape) for t in program.inputs}
        want, got = evaluate(program, x, np.float64), evaluate(other, x, np.float64)
        for name in program.outputs:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-9, atol=1e-9)


def two_blocks(parallel: bool):
    """Two conv -> relu blocks with equal weights: both on ``x`` (then added), or one after the
    other."""
    w = np.random.default_rng(0).standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3
    b = ProgramBuilder("blocks")
    x = b.input("x", (1, 4, 8, 8))
    (a,) = b.opaque("Relu", [b.conv(x, b.weight("w0", w), pads=1)])
    (c,) = b.opaque("Relu", [b.conv(x if parallel else a, b.weight("w1", w.copy()), pads=1)])
    return b.build([b.add(a, c, out="y") if parallel else c])


def test_identical_subprograms_are_one_e_class():
    program = two_blocks(parallel=True)
    graph = ProgramEGraph()
    ids = graph.add_program(program)
    relu_a, relu_c = (n.output for n in program.nodes if n.op is Op.OPAQUE)
    assert ids[relu_a] == ids[relu_c]
    snap = Snapshot(graph)
    assert snap.class_of(ids[relu_a]) == snap.class_of(ids[relu_c])
    # x, the weights (equal values), conv, relu, add: five e-classes for the eight tensors
    assert len(snap.classes) == 5 and len(program.shapes) == 8


def test_a_long_rewrite_enters_the_e_graph_as_one_alternative():
    """A rewrite hundreds of operators deep (EfficientNet-B0's chains) is handed to egglog in
    let-bound pieces, not as one expression nested deeper than Python recurses."""
    b = ProgramBuilder("one")
    x = b.input("x", (2, 3))
    original = b.build([b.transpose(x, (1, 0), out="y")])
    b = ProgramBuilder("long")
    t = b.input("x", (2, 3))
    for k in range(401):  # an odd number of transposes: the same result
        t = b.transpose(t, (1, 0), out="y" if k == 400 else None)
    long = b.build([t])
    graph = ProgramEGraph()
    ids = graph.add_program(original)
    outputs, terms = graph.add_alternative(ids, ["y"], long)
    assert len(terms) == 401
    snap = Snapshot(graph)
    assert snap.class_of(outputs[0]) == snap.class_of(ids["y"])


def test_identical_subprograms_are_searched_once():
    result = eqsat(two_blocks(parallel=False), SearchConfig(depth=2, rounds=1, time_limit=60))
    convs = [s for s in result.subsets if s.ops == ("Conv",)]
    assert len(convs) == 2 and [s.cached for s in convs] == [False, True]
    assert result.search == "eqsat" and result.cost <= result.original_cost


@pytest.mark.parametrize("name", ["conv5x5", "two_1x1_convs", "three_matmuls", "dilated_conv"])
def test_table3_graphs_cost_no_more_than_algorithm2_and_compute_the_same(name):
    program = import_model(build_model(name))
    config = SearchConfig(depth=3, rounds=1, time_limit=60)
    mutants = MutantCache()  # the mutants are generated once, for both searches
    plain = optimize(program, config, mutants=mutants)
    found = eqsat(program, config, mutants=mutants)
    assert found.cost <= plain.cost <= found.original_cost
    assert AnalyticCost().cost(found.program) == pytest.approx(found.cost)
    assert_same_function(program, found.program, seeds=1)
    assert found.egraph.alternatives > 0 and found.egraph.nodes >= found.egraph.classes


def test_report_says_why_saturation_stopped_and_how_large_the_e_graph_grew():
    result = eqsat(dilated_chain(), SearchConfig(depth=3, rounds=1, time_limit=60),
                   PenaliseDilation())
    report = result.to_json()
    assert report["search"] == "eqsat"
    assert report["egraph"]["stop"] == "saturated" == result.stop.value
    assert 0 < report["egraph"]["classes"] <= report["egraph"]["nodes"]
    assert report["egraph"]["iterations"] >= 1 and report["egraph"]["alternatives"] > 0
    assert set(report["egraph"]["facts"]) == set(RULES)
    json.dumps(report)
    assert result.cost < result.original_cost and result.applied
    assert_same_function(dilated_chain(), result.program)


def test_a_post_optimization_that_pays_only_together_is_found():
    program = dilated_chain()
    config = SearchConfig(depth=3, rounds=1, time_limit=60)
    plain = optimize(program, config, LayoutsCostMore())
    assert plain.cost == plain.original_cost  # no rewrite pays alone
    found = eqsat(program, config, LayoutsCostMore())
    assert found.cost < found.original_cost
    convs = [n for n in found.program.nodes if n.op is Op.CONV]
    assert len(convs) == 3 and all(n.attrs["dilations"] == (1, 1) for n in convs)
    assert sum(n.op in LAYOUTS for n in found.program.nodes) <= 2  # the middle ones cancelled
    assert {"move_layout_across_constant", "move_layout_across_elementwise"} <= set(
        found.post_optimizations)
    assert_same_function(program, found.program)


def test_a_combination_that_costs_more_together_is_not_extracted():
    program = dilated_chain()
    found = eqsat(program, SearchConfig(depth=3, rounds=1, time_limit=60), SpoiledTogether())
    assert found.cost < SpoiledTogether().cost(program) < float("inf")
    assert_same_function(program, found.program)


def test_a_tiny_node_limit_stops_and_says_so():
    program = small_model()
    result = eqsat(program, SearchConfig(depth=2, rounds=1, time_limit=60, eqsat_nodes=10))
    assert result.stop is StopReason.NODE_LIMIT and result.egraph.stop is StopReason.NODE_LIMIT
    assert result.egraph.alternatives == 0 and result.cost <= result.original_cost
    assert_same_function(program, result.program)


def test_the_iteration_limit_stops_and_says_so():
    result = eqsat(dilated_chain(), SearchConfig(depth=3, rounds=1, time_limit=60,
                                                 eqsat_iterations=1), PenaliseDilation())
    assert result.stop is StopReason.ITERATIONS and result.egraph.iterations == 1


def test_the_time_limit_stops_and_says_so():
    result = eqsat(small_model(), SearchConfig(depth=3, rounds=1, time_limit=0.01))
    assert result.stop is StopReason.TIME_LIMIT and result.cost <= result.original_cost


def test_inverse_layouts_across_an_elementwise_operator_are_one_e_class():
    b = ProgramBuilder()
    x = b.input("x", (2, 3))
    (r,) = b.opaque("Relu", [b.transpose(x, (1, 0))])
    program = b.build([b.transpose(r, (1, 0), out="y")])
    graph = ProgramEGraph()
    ids = graph.add_program(program)
    facts = Facts(graph)
    facts.classify()
    rules = rules_named(RULES)
    for _ in range(4):
        graph.egraph.run(rules.saturate())
        facts.answer()
    relu_of_x = graph.term("op", graph.registry.key(_relu_spec((2, 3))), [ids["x"]])
    snap = Snapshot(graph)
    assert snap.class_of(ids["y"]) == snap.class_of(relu_of_x)


def _relu_spec(shape):
    from tvm_pet.ir.node import Attrs
    from tvm_pet.search.eqsat.terms import NodeSpec
    return NodeSpec(Op.OPAQUE, Attrs({"kind": "Relu", "shapes": (shape,), "params": Attrs()}),
                    (shape,), (shape,))


def test_a_cyclic_choice_is_never_built():
    b = ProgramBuilder()
    x = b.input("x", (2, 3))
    t = b.transpose(x, (1, 0))
    (r,) = b.opaque("Relu", [b.transpose(t, (1, 0))])
    program = b.build([r])
    graph = ProgramEGraph()
    ids = graph.add_program(program)
    facts = Facts(graph)
    facts.classify()
    for _ in range(3):
        graph.egraph.run(rules_named(RULES).saturate())
        facts.answer()
    snap = Snapshot(graph)
    cx, ct = snap.class_of(ids["x"]), snap.class_of(ids[t])
    back = next(n for n in snap.classes[cx] if n.kind == "op")  # transpose(t), now in x's class
    choice = {c: nodes[0] for c, nodes in enumerate(snap.classes)}
    choice[cx], choice[ct] = back, snap.enode_of(ids[t])
    choice[snap.class_of(ids[r])] = snap.enode_of(ids[r])
    with pytest.raises(CyclicChoice):
        build(snap, choice, program, [snap.class_of(ids[r])])
    choice[cx] = ENode("input", "x", ())
    rebuilt = build(snap, choice, program, [snap.class_of(ids[r])])
    assert_same_function(program, rebuilt)


def test_checked_rejects_a_program_that_computes_something_else():
    program = small_model()
    assert checked(program, program, SearchConfig())
    w0 = np.array(program.weights["w0"])
    w0[0, 0, 0, 0] += 1.0
    wrong = program.replace(weights={**program.weights, "w0": w0})
    assert not checked(program, wrong, SearchConfig())
    linear = import_model(build_model("conv5x5"))
    (w,) = linear.weights
    off = np.array(linear.weights[w])
    off[3, 2, 1, 0] *= 2.0
    assert not checked(linear, linear.replace(weights={w: off}), SearchConfig())


def test_config_names_the_search_and_its_budgets():
    with pytest.raises(ValueError, match="search"):
        SearchConfig(search="annealing")
    for field in ("eqsat_iterations", "eqsat_nodes"):
        with pytest.raises(ValueError, match=field):
            SearchConfig(**{field: 0})


def test_the_pipeline_search_stage_runs_the_configured_search():
    from tvm_pet.pipeline.search import search
    found = search(dilated_chain(), SearchConfig(depth=3, rounds=1, time_limit=60,
                                                 search="eqsat"),
                   PenaliseDilation(), MutantCache(), confirm=3)
    assert found.result.search == "eqsat" and found.candidates
    assert found.candidates[0].program is found.result.program
    assert run_search(dilated_chain(), SearchConfig(depth=2, rounds=1)).search == "algorithm2"


def test_explore_runs_eqsat_from_the_command_line(tmp_path, capsys):
    model = tmp_path / "small.onnx"
    save_model(small_model(), model)
    assert main(["explore", str(model), "--depth", "2", "--search", "eqsat"]) == 0
    out = capsys.readouterr().out
    assert "search eqsat: analytic cost" in out and "e-classes" in out
    assert main(["explore", str(model), "--depth", "2", "--search", "eqsat", "--json"]) == 0
    searched = json.loads(capsys.readouterr().out)["search"]
    assert searched["search"] == "eqsat" and searched["egraph"]["stop"] in {
        s.value for s in StopReason}
    assert searched["cost"] <= searched["original_cost"]


def test_optimize_takes_search_among_its_advanced_options():
    from tvm_pet.cli.options import _search_config
    from tvm_pet.cli.parser import build_parser
    args = build_parser().parse_args(["optimize", "m.onnx", "--out", "o", "--search", "eqsat",
                                      "--time-limit", "30"])
    assert _search_config(args).search == "eqsat"
    args = build_parser().parse_args(["optimize", "m.onnx", "--out", "o", "--time-limit", "30"])
    assert _search_config(args).search == "algorithm2"


def test_pet_pass_runs_eqsat():
    tvm = pytest.importorskip("tvm")
    from tvm.relax.frontend.onnx import from_onnx

    from tvm_pet.relax import PETPass
    mod = from_onnx(dilated_model())
    pet = PETPass(config=SearchConfig(depth=3, rounds=1, time_limit=60), cost=PenaliseDilation(),
                  search="eqsat")
    tvm.transform.Sequential([pet])(mod)
    report = pet.report["main"]
    assert report["search"] == "eqsat" and report["changed"] is True
    assert report["numeric_check_max_rel_diff"] < 1e-6


# ------------------------------------------------------------------------- costing by region
class RegionCosted(PenaliseDilation):
    """Not additive, with a ``difference`` of two regions (as the measured cost): the
    descent prices each move by its regions, and counts them."""

    name = "region-costed"
    additive = False

    def __init__(self):
        super().__init__()
        self.regions = 0

    def difference(self, before, after):
        self.regions += 1
        return PenaliseDilation.cost(self, after) - PenaliseDilation.cost(self, before)


def test_a_region_cost_prices_each_move_by_its_regions_and_finds_what_the_whole_cost_finds():
    program = dilated_chain()
    config = SearchConfig(depth=3, rounds=1, time_limit=60)
    cost = RegionCosted()
    by_region = eqsat(program, config, cost)
    whole = eqsat(program, config, PenaliseDilation())
    assert cost.regions > 0
    assert by_region.cost == pytest.approx(whole.cost) and by_region.cost < by_region.original_cost
    assert PenaliseDilation().cost(by_region.program) == pytest.approx(by_region.cost)
    assert_same_function(program, by_region.program)


def test_a_move_priced_by_its_regions_costs_what_the_whole_programs_differ_by(monkeypatch):
    """With TVM's fused kernels timed by a deterministic fake timer, each move's regional
    difference equals the whole programs' difference exactly."""
    pytest.importorskip("tvm")
    from tests.test_region_cost import _fake_timer
    from tvm_pet.search.eqsat import price
    from tvm_pet.tune.measured_cost import MeasuredCost
    priced = []
    delta = price.RegionPrice.delta

    def recorded(self, before, after):
        priced.append((before, after, delta(self, before, after)))
        return priced[-1][2]
    monkeypatch.setattr(price.RegionPrice, "delta", recorded)
    cost = MeasuredCost("llvm", tuned=False, measure_untuned=_fake_timer)
    program = dilated_chain(layers=2)
    result = eqsat(program, SearchConfig(depth=2, rounds=1, time_limit=120), cost)
    assert len(priced) >= 3 and cost.regions_refused == 0
    assert any(d != 0 for _, _, d in priced[:12])
    for before, after, d in priced[:12]:
        assert d == pytest.approx(cost.cost(after) - cost.cost(before), rel=1e-9, abs=1e-12)
    assert result.cost <= result.original_cost
    assert_same_function(program, result.program)


@pytest.mark.slow
def test_on_resnet18_eqsat_costs_no_more_than_algorithm2_and_its_program_is_checked():
    program = import_model(build_model("resnet18"))
    config = SearchConfig(depth=3, rounds=1, time_limit=600)
    plain = optimize(program, config, mutants=MutantCache())
    found = eqsat(program, config, mutants=MutantCache())
    assert found.cost <= plain.cost * (1 + 1e-12) and found.cost <= found.original_cost
    assert AnalyticCost().cost(found.program) == pytest.approx(found.cost)
    assert checked(program, found.program, config)
    assert found.egraph.stop in (StopReason.SATURATED, StopReason.ITERATIONS)


def test_a_model_deeper_than_pythons_recursion_is_searched():
    b = ProgramBuilder("deep")
    y = b.input("x", (2, 3))
    for _ in range(1500):
        (y,) = b.opaque("Relu", [y])
    program = b.build([y])
    result = eqsat(program, SearchConfig(depth=2, rounds=1, time_limit=60))
    assert result.cost == result.original_cost and len(result.program.nodes) == 1500
    assert result.egraph.classes >= 1501
