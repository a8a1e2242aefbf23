"""A matrix product in pieces of its reduction (tvm_pet.ir.splitk): offered by the generator for
a long reduction only, when asked (``SearchConfig(split_k=True)``), verified as the MATMUL it
is, lowered to the sum of the pieces' products (checked against NumPy in float64), and given
places of its own by the tuning plan."""
from __future__ import annotations

import numpy as np
import pytest

from tests.first_node import linear, lowers_to_the_same, run_module as _run
from tvm_pet.ir import splitk
from tvm_pet.relax.adapter import program_to_module
from tvm_pet.verify.interpreter import evaluate


def _linear(x_shape, n, *, weight_input=False, pieces=0, seed=0):
    """``x @ w + b`` with ``w`` of [k, n] (a weight, or a runtime input), the MATMUL in
    ``pieces`` (0: as it is); the program and its inputs."""
    return linear(x_shape, n, weight_input=weight_input, seed=seed,
                  **({"pieces": pieces} if pieces else {}))


@pytest.mark.parametrize("weight_input", [False, True])
@pytest.mark.parametrize("pieces", [2, 4])
@pytest.mark.parametrize("x_shape, n", [((1, 16, 256), 64), ((24, 512), 128)])
def test_the_pieces_compute_the_product(x_shape, n, pieces, weight_input):
    program, inputs = _linear(x_shape, n, weight_input=weight_input, pieces=pieces)
    plain, _ = _linear(x_shape, n, weight_input=weight_input)
    text = lowers_to_the_same(program, plain, inputs)
    # and it is the sum of the pieces' products, not the product under another name
    assert text.count("R.matmul(") == pieces and text.count("R.add(") == pieces
    assert program.nodes[0].label == "SplitKMatMul"
    assert splitk.uses(program) and not splitk.uses(plain)


def test_each_sum_fuses_into_a_product_s_kernel_one_workload_for_the_middle_pieces():
    """TVM's fusion of the lowered pieces: one product bare, the first sum in the first
    product's kernel, each later sum in its own product's (the same kernel for both middle
    pieces: tuned once), and the bias in the last."""
    from tvm_pet.tune.compile import prepare
    program, _ = _linear((1, 8, 256), 64, pieces=4)
    main = prepare(program_to_module(program), "llvm")["main"].script()
    calls = [line.split("R.call_tir(")[1].split(",")[0] for line in main.splitlines()
             if "R.call_tir(" in line]
    assert calls == ["split", "matmul", "fused_matmul_add", "fused_matmul_add",
                     "fused_matmul_add_add1"]


@pytest.mark.parametrize("a, b, want", [
    ((1, 128, 3072), (3072, 768), (4,)),     # BERT's second feed-forward product
    ((1, 128, 768), (768, 3072), ()),        # its first: a short reduction
    ((1, 128, 768), (768, 768), ()),         # square
    ((128, 1536), (1536, 768), (2,)),        # square blocks of the weight
    ((128, 3000), (3000, 1000), (3,)),
    ((128, 3000), (3000, 700), ()),          # not a multiple of the output's width
    ((128, 9 * 64), (9 * 64, 64), ()),       # too many pieces
    ((2, 8, 64, 256), (2, 256, 64), ()),     # a batched right side
])
def test_which_products_are_offered_in_pieces(a, b, want):
    assert splitk.offers(a, b) == want


def test_the_generator_offers_a_verified_mutant_for_a_long_reduction_only_when_asked():
    from tvm_pet.search.config import SearchConfig
    from tvm_pet.search.generator import generate

    def split_mutants(x_shape, n, asked=True):
        sub, inputs = _linear(x_shape, n)
        mutants, _ = generate(sub, SearchConfig(depth=2, time_limit=60, split_k=asked))
        return sub, inputs, [m for m in mutants if splitk.uses(m.corrected)]

    assert split_mutants((1, 16, 64), 64)[2] == []  # a square product: none
    assert split_mutants((1, 16, 256), 64, asked=False)[2] == []  # off by default
    sub, inputs, found = split_mutants((1, 16, 256), 64)
    pieces = {n.attrs["pieces"] for m in found for n in m.corrected.nodes if n.attrs.get("pieces")}
    assert found and pieces == {4}
    want = evaluate(sub, inputs, dtype=np.float64)[sub.outputs[0]]
    for m in found:  # fully equivalent: verified without a correction, and it lowers right
        assert m.result.equivalent and "SplitKMatMul" in m.ops
        got = _run(program_to_module(m.corrected), inputs["x"])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_split_mutants_take_the_places_kept_for_what_the_untuned_screen_cannot_rank():
    """Untuned, the pieces only add kernels (the screen expects no saving); they share the
    places of the mutants that align an awkward side, and say why they were tuned."""
    from tvm_pet.cost.model import RewriteScreen
    from tvm_pet.pipeline.plan import Screened, rank_mutants

    def screen(saving_s, keys, ratio=1.0):
        return RewriteScreen(saving_s, ratio, new_kernels=frozenset(keys))

    screened = [Screened(f"sub{k}", ("Transpose", "MatMul"), screen(0.004, {f"t{k}"}, 0.5), k)
                for k in range(4)]
    screened += [Screened("ffn2", ("SplitKMatMul",), screen(0.005, {"p", "q"}), 4, splits=True),
                 Screened("ffn2", ("SplitKMatMul", "Add"), screen(0.005, {"p", "r"}), 5,
                          splits=True)]
    picks = rank_mutants(screened, promising=4, screen_ratio=2.0)
    assert picks[0].index == 4 and picks[0].splits and not picks[0].aligns
    assert "pieces (of its long reduction" in picks[0].reason
    assert picks[0].to_json()["splits"] is True
    # one place per subprogram; the others go to the screen's best expected savings
    assert 5 not in [p.index for p in picks] and len(picks) == 4
    assert not any(p.splits for p in picks[1:])
    # without them, the same four places go to the others
    plain = rank_mutants(screened[:4], promising=4, screen_ratio=2.0)
    assert sorted(p.index for p in plain) == [0, 1, 2, 3]
