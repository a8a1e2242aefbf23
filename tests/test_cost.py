"""The analytic (roofline) cost model: its FLOP table, sanity of its ranking, and free nodes."""
import math

import numpy as np
import pytest

from tvm_pet.cost.analytic import FLOPS, AnalyticCost, bytes_moved, constant_tensors
from tvm_pet.cost.model import CostModel
from tvm_pet.ir import Op, ProgramBuilder
from tvm_pet.search.postopt import precompute_weights

MODEL = AnalyticCost()


def _conv_program(channels: int, size: int):
    b = ProgramBuilder()
    x = b.input("x", (1, channels, size, size))
    w = b.weight("w", np.ones((2 * channels, channels, 3, 3)))
    return b.build([b.conv(x, w, pads=1)])


def test_flop_table_covers_every_operator():
    assert set(FLOPS) == set(Op)


def test_is_a_cost_model_and_rejects_bad_parameters():
    assert isinstance(MODEL, CostModel) and MODEL.name == "analytic"
    with pytest.raises(ValueError, match="peak_flops"):
        AnalyticCost(peak_flops=0)
    with pytest.raises(ValueError, match="bandwidth"):
        AnalyticCost(bandwidth=-1)
    with pytest.raises(ValueError, match="launch_overhead"):
        AnalyticCost(launch_overhead=-1e-6)


def test_bigger_conv_costs_more():
    small, wide, large = _conv_program(8, 16), _conv_program(16, 16), _conv_program(8, 32)
    assert MODEL.cost(small) < MODEL.cost(wide)
    assert MODEL.cost(small) < MODEL.cost(large)


def test_matmul_is_the_roofline_of_flops_and_bytes():
    b = ProgramBuilder()
    x = b.input("x", (256, 256))
    p = b.build([b.matmul(x, b.weight("w", np.ones((256, 256))))])
    flops, traffic = 2 * 256 ** 3, 3 * 256 * 256 * 4
    expected = max(flops / MODEL.peak_flops, traffic / MODEL.bandwidth) + MODEL.launch_overhead
    assert bytes_moved(p, p.nodes[0]) == traffic
    assert MODEL.cost(p) == pytest.approx(expected)
    assert MODEL.node_cost(p, p.nodes[0]) == pytest.approx(expected)


def test_reshape_is_free_and_transpose_costs_its_traffic():
    b = ProgramBuilder()
    x = b.input("x", (8, 16, 32))
    r = b.reshape(x, (128, 32))
    t = b.transpose(r, (1, 0))
    p = b.build([t])
    assert MODEL.node_cost(p, p.nodes[0]) == 0.0
    traffic = 2 * 8 * 16 * 32 * 4
    assert MODEL.node_cost(p, p.nodes[1]) == pytest.approx(traffic / MODEL.bandwidth
                                                           + MODEL.launch_overhead)
    assert MODEL.cost(p) == pytest.approx(MODEL.node_cost(p, p.nodes[1]))
    assert set(MODEL.breakdown(p)) == {r, t}


def test_opaque_costs_by_output_size():
    def relu_of(shape):
        b = ProgramBuilder()
        return b.build(list(b.opaque("Relu", [b.input("x", shape)])))
    assert 0 < MODEL.cost(relu_of((4, 64))) < MODEL.cost(relu_of((64, 64)))


def test_fill_and_weight_only_nodes_are_free():
    b = ProgramBuilder()
    x = b.input("x", (4, 6))
    w = b.weight("w", np.ones((6, 4)))
    c = b.add(b.transpose(w, (1, 0)), b.fill((4, 6), 2))      # all constant: precomputed
    y = b.add(x, c)
    p = b.build([y])
    assert constant_tensors(p) == {w} | {o for n in p.nodes[:-1] for o in n.outputs}
    assert [MODEL.node_cost(p, n) for n in p.nodes[:-1]] == [0.0, 0.0, 0.0]
    assert MODEL.cost(p) == pytest.approx(MODEL.node_cost(p, p.nodes[-1]))
    assert MODEL.cost(p) > 0


def test_precomputable_chain_costs_the_same_after_precompute_weights():
    b = ProgramBuilder()
    x = b.input("x", (1, 8, 16, 16))
    w = b.weight("w", np.random.default_rng(0).normal(size=(3, 3, 8, 16)))
    w = b.reshape(b.transpose(w, (3, 2, 0, 1)), (16, 8, 3, 3))
    scale = b.mul(b.weight("s", np.full((16, 1, 1, 1), 0.5)), b.fill((16, 1, 1, 1), 3))
    y = b.conv(x, b.mul(w, scale), pads=1)
    p = b.build([y])
    folded = precompute_weights(p)
    assert [n.op for n in folded.nodes] == [Op.CONV]
    assert MODEL.cost(folded) == pytest.approx(MODEL.cost(p))
    assert math.isclose(MODEL.cost(p), MODEL.node_cost(p, p.nodes[-1]))
