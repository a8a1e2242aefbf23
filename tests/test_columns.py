"""A matrix product in pieces of its columns (tvm_pet.ir.columns): offered by the generator for a
wide product when asked (``SearchConfig(columns=True)``, ``--columns``), verified as the MATMUL
it is, lowered to the pieces' products concatenated (checked against NumPy in float64, and equal
bit for bit to the plain product), and given places of its own by the tuning plan."""
from __future__ import annotations

import numpy as np
import pytest

from tests.first_node import linear, lowers_to_the_same, run_module as _run
from tvm_pet.ir import columns
from tvm_pet.relax.adapter import program_to_module
from tvm_pet.verify.interpreter import evaluate


def _outputs(mod, x) -> list[np.ndarray]:
    """Every output of a Relax module's ``main`` run on this CPU."""
    import tvm
    from tvm import relax
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x))
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]


def _linear(x_shape, n, *, weight_input=False, pieces=0, split=0, seed=0):
    """``x @ w + b`` with ``w`` of [k, n] (a weight, or a runtime input), the MATMUL in
    ``pieces`` of its columns (0: as it is), its output split in ``split`` equal parts (0: not
    split, as Q, K and V are split after TVM merges their products); the program and its
    inputs."""
    return linear(x_shape, n, weight_input=weight_input, split=split, seed=seed,
                  **({"columns": pieces} if pieces else {}))


@pytest.mark.parametrize("weight_input", [False, True])
@pytest.mark.parametrize("pieces", [2, 4])
@pytest.mark.parametrize("x_shape, k", [((1, 16, 64), 64), ((24, 32), 32)])
def test_the_pieces_compute_the_product(x_shape, k, pieces, weight_input):
    program, inputs = _linear(x_shape, 4 * k, weight_input=weight_input, pieces=pieces)
    plain, _ = _linear(x_shape, 4 * k, weight_input=weight_input)
    text = lowers_to_the_same(program, plain, inputs)
    # and it is the pieces' products concatenated, not the product under another name
    assert text.count("R.matmul(") == pieces and text.count("R.concat(") == 1
    assert program.nodes[0].label == "ColumnsMatMul"
    assert columns.uses(program) and not columns.uses(plain)


def test_the_pieces_add_the_same_sums_in_the_same_order():
    """Fully equivalent, and exact: on TVM the pieces give the plain product's bits."""
    program, inputs = _linear((1, 32, 64), 192, pieces=3)
    plain, _ = _linear((1, 32, 64), 192)
    got = _run(program_to_module(program), inputs["x"])
    want = _run(program_to_module(plain), inputs["x"])
    np.testing.assert_array_equal(got, want)


def test_each_piece_is_a_kernel_of_one_workload_and_the_bias_fuses_into_the_concatenation():
    from tvm_pet.tune.compile import prepare
    program, _ = _linear((1, 8, 64), 192, pieces=3)
    main = prepare(program_to_module(program), "llvm")["main"].script()
    calls = [line.split("R.call_tir(")[1].split(",")[0] for line in main.splitlines()
             if "R.call_tir(" in line]
    assert calls == ["matmul", "matmul", "matmul", "fused_concatenate_add"], calls


@pytest.mark.parametrize("a, b, want", [
    ((1, 128, 768), (768, 2304), (3,)),      # BERT's Q, K and V, merged by TVM
    ((1, 128, 768), (768, 3072), (4,)),      # its first feed-forward product
    ((1, 128, 3072), (3072, 768), ()),       # its second: a long reduction
    ((1, 128, 768), (768, 768), ()),         # square
    ((128, 1000), (1000, 3000), (3,)),
    ((128, 700), (700, 3000), ()),           # not a multiple of the reduction
    ((128, 64), (64, 9 * 64), ()),           # too many pieces
    ((2, 8, 64, 256), (2, 256, 512), ()),    # a batched right side
])
def test_which_products_are_offered_in_pieces(a, b, want):
    assert columns.offers(a, b) == want


def test_the_generator_offers_a_verified_mutant_for_a_wide_product_only_when_asked():
    from tvm_pet.search.config import SearchConfig
    from tvm_pet.search.generator import generate

    def column_mutants(x_shape, n, split=0, asked=True):
        sub, inputs = _linear(x_shape, n, split=split)
        mutants, _ = generate(sub, SearchConfig(depth=3, time_limit=60, columns=asked))
        return sub, inputs, [m for m in mutants if columns.uses(m.corrected)]

    assert column_mutants((1, 16, 64), 64)[2] == []  # a square product: none
    assert column_mutants((1, 16, 64), 192, asked=False)[2] == []  # off by default
    sub, _ = _linear((1, 16, 64), 192)
    assert not any(columns.uses(m.corrected) for m in generate(sub, SearchConfig(depth=3))[0])
    for split in (0, 3):  # as it is, and with its output split as TVM's merged Q, K and V
        sub, inputs, found = column_mutants((1, 16, 64), 192, split=split)
        pieces = {n.attrs["columns"] for m in found for n in m.corrected.nodes
                  if n.attrs.get("columns")}
        assert found and pieces == {3}
        want = evaluate(sub, inputs, dtype=np.float64)
        for m in found:  # fully equivalent: verified without a correction, and it lowers right
            assert m.result.equivalent and "ColumnsMatMul" in m.ops
            for got, name in zip(_outputs(program_to_module(m.corrected), inputs["x"]),
                                 sub.outputs, strict=True):
                np.testing.assert_allclose(got, want[name], rtol=1e-5,
                                           atol=1e-5 * np.abs(want[name]).max())


def test_column_mutants_take_the_places_kept_for_what_the_untuned_screen_cannot_rank():
    """Untuned, the pieces only add kernels; they share the places of the mutants that align an
    awkward side, and say why they were tuned."""
    from tvm_pet.cost.model import RewriteScreen
    from tvm_pet.pipeline.plan import Screened, rank_mutants

    def screen(saving_s, keys, ratio=1.0):
        return RewriteScreen(saving_s, ratio, new_kernels=frozenset(keys))

    screened = [Screened(f"sub{k}", ("Transpose", "MatMul"), screen(0.004, {f"t{k}"}, 0.5), k)
                for k in range(4)]
    screened += [Screened("qkv", ("ColumnsMatMul", "Add"), screen(0.0, {"p", "c"}), 4,
                          splits=True)]
    picks = rank_mutants(screened, promising=4, screen_ratio=2.0)
    assert picks[0].index == 4 and picks[0].splits
    assert "its wide columns" in picks[0].reason


@pytest.mark.parametrize("command", ["optimize", "tune"])
def test_the_cli_offers_column_pieces_only_when_asked(command):
    from tvm_pet.cli import _search_config, build_parser
    argv = [command, "m.onnx", "--target", "llvm"] + (["--out", "o"] if command == "optimize"
                                                     else [])
    parser = build_parser()
    assert _search_config(parser.parse_args(argv)).columns is False
    assert _search_config(parser.parse_args(argv + ["--columns"])).columns is True
