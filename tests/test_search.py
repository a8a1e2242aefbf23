"""Partitioning, the optimizer (Algorithm 2) and exploration."""
import json

import numpy as np
import onnxruntime as ort
import pytest

from tests.dilated import PenaliseDilation, PenaliseDilationAndLayouts, dilated_chain
from tvm_pet.cli import main
from tvm_pet.cost.analytic import AnalyticCost
from tvm_pet.ir import Op, ProgramBuilder, check_program
from tvm_pet.onnx import export_model, import_model, save_model
from tvm_pet.search.config import SearchConfig, StopReason
from tvm_pet.search.explore import explore
from tvm_pet.search.optimizer import optimize
from tvm_pet.search.partition import partition, replace_subprogram
from tvm_pet.verify.interpreter import evaluate
from tvm_pet.verify.verifier import verify


def small_model(dilation=2):
    """conv -> relu -> [two parallel 1x1 convs on the same input] -> concat."""
    rng = np.random.default_rng(0)
    b = ProgramBuilder("small")
    x = b.input("x", (1, 8, 12, 12))
    c = b.conv(x, b.weight("w0", rng.standard_normal((8, 8, 3, 3)) * 0.2), pads=dilation,
               dilations=dilation)
    (r,) = b.opaque("Relu", [c])
    y1 = b.conv(r, b.weight("w1", rng.standard_normal((6, 8, 1, 1)) * 0.3))
    y2 = b.conv(r, b.weight("w2", rng.standard_normal((4, 8, 1, 1)) * 0.3))
    (s1,) = b.opaque("Sigmoid", [y1])
    (s2,) = b.opaque("Sigmoid", [y2])
    return b.build([b.concat([s1, s2], 1, out="out")])


def _inputs(program, seed=0):
    return {t.name: np.random.default_rng(seed).standard_normal(t.shape).astype(np.float32)
            for t in program.inputs}


def test_partition_splits_at_nonlinear_ops_and_offers_merges():
    program = small_model()
    subs = partition(program)
    names = [s.name for s in subs]
    assert names[:3] == ["sub0", "sub1", "sub2"] and "sub1+sub2" in names
    assert all(s.program.is_multilinear() for s in subs)
    merged = next(s for s in subs if s.is_merge)
    assert merged.program.input_names == (program.nodes[1].outputs[0],)
    assert len(merged.program.outputs) == 2
    for sub in subs:  # replacing a subprogram by itself changes nothing
        same = replace_subprogram(program, sub, sub.program)
        x = _inputs(program)
        np.testing.assert_array_equal(evaluate(same, x)["out"], evaluate(program, x)["out"])


def test_optimizer_applies_what_the_cost_prefers_and_stays_exact():
    program = small_model()
    result = optimize(program, SearchConfig(depth=3, rounds=2, time_limit=120),
                      cost=PenaliseDilation())
    assert result.cost < result.original_cost
    assert result.applied and result.applied[0].mutant_ops
    assert not any(n.op is Op.CONV and n.attrs["dilations"] != (1, 1)
                   for n in result.program.nodes)
    check_program(result.program)
    x = _inputs(program)
    want = evaluate(program, x, np.float64)["out"]
    np.testing.assert_allclose(evaluate(result.program, x, np.float64)["out"], want, rtol=1e-9,
                               atol=1e-9)
    session = ort.InferenceSession(export_model(result.program).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, x)[0], want, rtol=1e-4, atol=1e-5)
    report = result.to_json()
    assert report["stop"] in {s.value for s in StopReason} and report["applied"]
    json.dumps(report)


def test_optimizer_never_returns_a_costlier_program():
    program = small_model()
    result = optimize(program, SearchConfig(depth=2, rounds=2, time_limit=60))
    assert result.cost <= result.original_cost
    assert AnalyticCost().cost(result.program) == pytest.approx(result.cost)


def test_time_limit_stops_the_search():
    result = optimize(small_model(), SearchConfig(depth=3, rounds=3, time_limit=0.01))
    assert result.stop is StopReason.TIME_LIMIT
    assert result.cost <= result.original_cost


@pytest.mark.parametrize("field,value", [("depth", 0), ("rounds", 0), ("topk", 0),
                                         ("time_limit", -1.0)])
def test_config_rejects_bad_budgets(field, value):
    with pytest.raises(ValueError, match=field):
        SearchConfig(**{field: value})


def test_explore_lists_verified_mutants_and_emits_onnx(tmp_path, capsys):
    program = small_model()
    model = tmp_path / "small.onnx"
    save_model(program, model)
    assert main(["explore", str(model), "--depth", "3", "--emit", str(tmp_path / "out")]) == 0
    assert "multi-linear subprograms" in capsys.readouterr().out
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    subs = {s["name"]: s for s in index["subprograms"]}
    assert {"sub0", "sub1", "sub2", "sub1+sub2"} <= set(subs)
    assert any(m["ops"] == ["Concat", "Conv", "Split"] for m in subs["sub1+sub2"]["mutants"])
    checked = 0
    for sub in subs.values():
        original = import_model(sub["original"])
        for m in sub["mutants"][:4]:
            mutant = import_model(m["file"])
            assert mutant.input_names == original.input_names
            assert mutant.outputs == original.outputs
            assert verify(original, mutant).equivalent  # corrected mutants are exact
            checked += 1
    assert checked >= 5


def test_explore_json_and_rounds(capsys, tmp_path):
    program = small_model()
    report = explore(program, SearchConfig(depth=2, rounds=2, time_limit=60))
    assert report.subprograms and report.stop in (StopReason.EXHAUSTED, StopReason.TIME_LIMIT)
    model = tmp_path / "m.onnx"
    save_model(program, model)
    assert main(["explore", str(model), "--depth", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"seconds", "stop", "subprograms"} <= set(out)
    assert all({"name", "ops", "stats", "mutants"} <= set(s) for s in out["subprograms"])


def test_report_has_a_row_per_subprogram_and_post_optimizations_keep_results():
    program = small_model()
    result = optimize(program, SearchConfig(depth=3, rounds=1, time_limit=60),
                      cost=PenaliseDilation())
    rows = {r["name"]: r for r in result.to_json()["subprograms"]}
    assert {"sub0", "sub1", "sub2", "sub1+sub2"} <= set(rows)
    chosen = [r for r in rows.values() if r["chosen"]]
    assert chosen and all(r["cost_after"] < r["cost_before"] for r in chosen)
    assert all(r["verified"] <= r["generated"] for r in rows.values())
    assert isinstance(result.post_optimizations, list)
    x = _inputs(program)
    np.testing.assert_allclose(evaluate(result.program, x, np.float64)["out"],
                               evaluate(program, x, np.float64)["out"], rtol=1e-9, atol=1e-9)


def test_one_round_rewrites_every_layer_of_a_chain_at_once():
    """Space-to-batch on each dilated conv, combined in one round: the layouts between layers
    cancel, leaving one space-to-batch at the start and one batch-to-space at the end."""
    program = dilated_chain()
    result = optimize(program, SearchConfig(depth=3, rounds=1, time_limit=120),
                      cost=PenaliseDilationAndLayouts())
    convs = [n for n in result.program.nodes if n.op is Op.CONV]
    assert len(convs) == 3 and all(n.attrs["dilations"] == (1, 1) for n in convs)
    layouts = [n for n in result.program.nodes
               if n.op in (Op.RESHAPE, Op.TRANSPOSE, Op.RESHAPE_TRANSPOSE)]
    assert len(layouts) <= 2 and len(result.applied) == 3
    check_program(result.program)
    (y,) = program.outputs
    assert result.program.outputs == (y,)
    for seed in range(3):
        x = _inputs(program, seed)
        np.testing.assert_allclose(evaluate(result.program, x, np.float64)[y],
                                   evaluate(program, x, np.float64)[y], rtol=1e-9, atol=1e-9)


class SpoiledTogether(PenaliseDilation):
    """Not additive, as the measured cost: each rewrite of a dilated conv pays alone, but the
    three together cost infinitely much (as a kernel with no records that only the whole
    combination makes)."""
    name = "spoiled-together"
    additive = False

    def cost(self, program):
        dilated = sum(n.op is Op.CONV and n.attrs["dilations"] != (1, 1) for n in program.nodes)
        return float("inf") if dilated == 0 else super().cost(program)


def test_a_combination_one_rewrite_spoils_is_built_one_rewrite_at_a_time():
    program = dilated_chain()
    result = optimize(program, SearchConfig(depth=3, rounds=1, time_limit=120),
                      cost=SpoiledTogether())
    # all three together cost inf, one alone leaves two dilated convs: the search keeps two
    dilated = [n for n in result.program.nodes
               if n.op is Op.CONV and n.attrs["dilations"] != (1, 1)]
    assert len(dilated) == 1 and len(result.applied) == 2
    assert result.cost < SpoiledTogether().cost(program)
    check_program(result.program)
    (y,) = program.outputs
    for seed in range(2):
        x = _inputs(program, seed)
        np.testing.assert_allclose(evaluate(result.program, x, np.float64)[y],
                                   evaluate(program, x, np.float64)[y], rtol=1e-9, atol=1e-9)


def test_without_combining_one_round_changes_at_most_one_layer(monkeypatch):
    from tvm_pet.search import optimizer
    monkeypatch.setattr(optimizer, "combine", lambda *a, **k: None)
    result = optimize(dilated_chain(), SearchConfig(depth=3, rounds=1, time_limit=120),
                      cost=PenaliseDilationAndLayouts())
    assert len(result.applied) <= 1


class _Spread(AnalyticCost):
    """The analytic cost, declared as measured once per kernel: near ties are runners-up."""

    spread = 1.5


def test_near_ties_of_a_cost_with_a_spread_are_runners_up_never_the_result():
    from tvm_pet.pipeline.search import search
    from tvm_pet.search.mutant_cache import MutantCache
    program = small_model()
    config = SearchConfig(depth=2, rounds=1, time_limit=120)
    plain = optimize(program, config)
    assert plain.near_ties == 0
    assert all(c.cost < plain.original_cost for c in plain.runners_up)
    found = search(program, config, _Spread(), MutantCache(), confirm=3)
    result = found.result
    assert result.cost == plain.cost <= result.original_cost  # the best is the cheapest one
    ties = [c for c in result.runners_up if c.cost >= result.original_cost]
    assert ties and result.near_ties == len(ties) and result.to_json()["near_ties"] == len(ties)
    assert all(result.original_cost < c.cost < 1.5 * result.original_cost for c in ties)
    assert found.near_ties == sum(c.cost >= result.original_cost for c in found.candidates) > 0
    assert f"({found.near_ties} costed as near ties of the original)" in found.line()
    x = _inputs(program)
    want = evaluate(program, x, np.float64)["out"]
    for tie in ties:  # verified rewrites: they compute what the original computes
        assert tie.applied
        np.testing.assert_allclose(evaluate(tie.program, x, np.float64)["out"], want,
                                   rtol=1e-9, atol=1e-9)


def silu_after_matmul():
    """``h = x @ w; y = h * sigmoid(h)``: the matmul and the product are one subset whose input
    (the sigmoid) is computed from its output ``h`` outside it, as in every SiLU (EfficientNet)."""
    rng = np.random.default_rng(0)
    b = ProgramBuilder()
    x = b.input("x", (1, 8))
    h = b.matmul(x, b.weight("w", rng.standard_normal((8, 8)).astype(np.float32)))
    (s,) = b.opaque("Sigmoid", [h])
    return b.build([b.mul(h, s)])


def test_no_mutant_reads_what_its_own_output_feeds_through_a_nonlinear_operator():
    # concatenating x with the sigmoid and multiplying once by w computes h and the product
    # for independent inputs (the verifier's view); in the model the sigmoid reads h: a cycle
    program = silu_after_matmul()
    sub = partition(program)[0]
    mutants = {tuple(n.op for n in m.nodes) for m in _verified_mutants(program, sub)}
    assert (Op.CONCAT, Op.MATMUL, Op.SPLIT) in {ops[:3] for ops in mutants}, mutants
    result = optimize(program, SearchConfig(depth=3, rounds=2, time_limit=60), AnalyticCost())
    check_program(result.program)
    xv = {"x": np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)}
    want = evaluate(program, xv, np.float64)
    got = evaluate(result.program, xv, np.float64)
    for o in program.outputs:
        np.testing.assert_allclose(got[o], want[o], rtol=1e-9)


def _verified_mutants(program, sub):
    from tvm_pet.search.generator import generate
    mutants, _ = generate(sub.program, SearchConfig(depth=3))
    return [m.corrected for m in mutants]


def test_a_search_out_of_time_stops_between_the_mutants_of_one_subset(monkeypatch):
    # a measured cost may time a whole candidate (seconds on swin_t): the deadline was checked
    # once per subset, and swin_t's search ran minutes past its 148 s on one subset's mutants
    from tvm_pet.search import optimizer as opt_module
    program = dilated_chain(layers=1)
    opt = opt_module.Optimizer(SearchConfig(rounds=1), PenaliseDilationAndLayouts())
    seen: set = set()
    monkeypatch.setattr(opt_module.Optimizer, "out_of_time", lambda self: len(seen) >= 1)
    fresh, scored = opt_module._single_mutations(opt, (opt.cost(program), program, []), seen,
                                                 "search")
    assert len(fresh) == len(scored) == 1  # the first mutant costed, then the time is up
    monkeypatch.setattr(opt_module.Optimizer, "out_of_time", lambda self: False)
    everything, _ = opt_module._single_mutations(opt, (opt.cost(program), program, []), set(),
                                                 "search")
    assert len(everything) > 1  # there were more to cost


def test_no_post_optimization_once_the_time_limit_has_passed(monkeypatch):
    from tvm_pet.search import optimizer as opt_module
    program = dilated_chain(layers=1)
    opt = opt_module.Optimizer(SearchConfig(rounds=1), PenaliseDilationAndLayouts())
    called = []
    monkeypatch.setattr(opt_module, "post_optimize", lambda p: called.append(p) or (p, ["x"]))
    monkeypatch.setattr(opt_module.Optimizer, "out_of_time", lambda self: True)
    assert opt_module._polished(opt, program, 1.0) == (program, 1.0, []) and not called
    monkeypatch.setattr(opt_module.Optimizer, "out_of_time", lambda self: False)
    assert opt_module._polished(opt, program, 1e9)[2] == ["x"] and called == [program]
