"""Winograd's F(m×m, 3×3) as a lowering of a CONV (tvm_pet.relax.winograd): the same function as
the direct convolution, checked against torch's and NumPy's, for every shape class it accepts."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_pet.ir import ProgramBuilder
from tvm_pet.ir import winograd as winograd_ir
from tvm_pet.relax import winograd
from tvm_pet.ir.winograd import eligible, uses
from tvm_pet.relax.adapter import program_to_module
from tvm_pet.verify.interpreter import evaluate


def _run(mod, *inputs):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(x) for x in inputs])
    return out.numpy()


def _program(x_shape, k, pads, dilation, m, weight_input=False, products="tk"):
    rng = np.random.default_rng(sum(x_shape) + k + dilation)
    b = ProgramBuilder()
    x = b.input("x", x_shape)
    w_value = (rng.standard_normal((k, x_shape[1], 3, 3)) / np.sqrt(9 * x_shape[1])).astype(
        "float32")
    w = b.input("w", w_value.shape) if weight_input else b.weight("w", w_value)
    y = b.conv(x, w, pads=pads, dilations=dilation)
    program = b.build([y])
    if m:
        node = program.nodes[0]
        program = program.replace(nodes=(dataclasses.replace(
            node, attrs=node.attrs.replace(winograd=m, winograd_products=products)),))
    data = rng.standard_normal(x_shape).astype("float32")
    return program, data, w_value


@pytest.mark.parametrize("m", winograd.TILES)
@pytest.mark.parametrize("x_shape, k, pads, dilation", [
    ((1, 8, 14, 14), 16, 1, 1),           # a side that is a multiple of neither tile
    ((2, 5, 9, 12), 7, 1, 1),             # a batch, odd channels, a non-square map
    ((1, 6, 10, 10), 4, 0, 1),            # "valid": no padding
    ((1, 6, 8, 8), 4, (2, 0, 1, 1), 1),   # uneven pads
    ((1, 8, 28, 28), 8, 2, 2),            # CSRNet's back end: dilation 2, "same"
    ((1, 4, 12, 18), 6, 3, 3),            # dilation 3
])
def test_winograd_lowering_computes_the_direct_convolution(x_shape, k, pads, dilation, m):
    program, data, w = _program(x_shape, k, pads, dilation, m)
    direct, _, _ = _program(x_shape, k, pads, dilation, 0)
    want = evaluate(direct, {"x": data}, dtype=np.float64)[direct.outputs[0]]
    got = _run(program_to_module(program), data)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * np.abs(want).max())
    # and it is another program, not the direct form under another name
    text = program_to_module(program).script()
    assert text.count("R.matmul(") == 4 and "R.take(" in text and "conv2d(" not in text


def _lowered_form(x_shape, w, pads, dilation, m, **form):
    """The Relax module of the conv of ``x`` by the constant ``w`` (pads and dilation as
    :func:`_program` takes them) as ``winograd.conv2d`` lowers it with the keywords ``form``."""
    pads4 = (pads,) * 4 if isinstance(pads, int) else pads
    attrs = {"strides": (1, 1), "dilations": (dilation, dilation), "pads": pads4, "groups": 1}
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = winograd.conv2d(lambda e, hint: bb.emit(e), x, relax.const(w), x_shape, w.shape,
                                attrs, m, **form)
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.finalize()


@pytest.mark.parametrize("m", winograd.TILES)
@pytest.mark.parametrize("x_shape, k, pads, dilation", [
    ((2, 5, 9, 12), 7, (2, 0, 1, 1), 1),
    ((1, 8, 28, 28), 8, 2, 2),
])
def test_the_separable_input_transform_computes_the_direct_convolution(x_shape, k, pads,
                                                                       dilation, m):
    """In the channels-first lowering, ``separable=True`` (the input tiles by rows, then by
    columns: two grouped convolutions) is the same function, and another program than
    ``B ⊗ B``'s one grouped convolution."""
    direct, data, w = _program(x_shape, k, pads, dilation, 0)
    want = evaluate(direct, {"x": data}, dtype=np.float64)[direct.outputs[0]]
    texts = []
    for separable in (False, True):
        mod = _lowered_form(x_shape, w, pads, dilation, m, separable=separable,
                            channels_last=False)
        np.testing.assert_allclose(_run(mod, data), want, rtol=1e-4,
                                   atol=2e-5 * np.abs(want).max())
        texts.append(mod.script())
    assert texts[1].count("conv2d(") == texts[0].count("conv2d(") + 1


@pytest.mark.parametrize("m", winograd.TILES)
@pytest.mark.parametrize("x_shape, k, pads, dilation", [
    ((2, 5, 9, 12), 7, (2, 0, 1, 1), 1),
    ((1, 8, 28, 28), 8, 2, 2),
    ((1, 4, 12, 18), 6, 3, 3),
])
def test_the_channels_last_lowering_computes_the_direct_convolution(x_shape, k, pads, dilation,
                                                                    m):
    """``channels_last=True`` (the map permuted to ``[n, h, w, c]`` inside, the tiles gathered by
    ``take`` and transformed by matrix products) is the same function as the direct form and as
    the channels-first lowering, and has no grouped convolution left."""
    direct, data, w = _program(x_shape, k, pads, dilation, 0)
    want = evaluate(direct, {"x": data}, dtype=np.float64)[direct.outputs[0]]
    got = {}
    for channels_last in (False, True):
        mod = _lowered_form(x_shape, w, pads, dilation, m, channels_last=channels_last)
        got[channels_last] = _run(mod, data)
        np.testing.assert_allclose(got[channels_last], want, rtol=1e-4,
                                   atol=2e-5 * np.abs(want).max())
        assert ("conv2d(" in mod.script()) is not channels_last
    np.testing.assert_allclose(got[True], got[False], rtol=1e-4, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("channels_last", [True, False])
@pytest.mark.parametrize("x_shape, k, pads, dilation", [
    ((2, 5, 9, 12), 7, (2, 0, 1, 1), 1),
    ((1, 8, 28, 28), 8, 2, 2),
])
def test_the_filters_by_tiles_products_compute_the_direct_convolution(x_shape, k, pads,
                                                                      dilation, channels_last):
    """The products in the order ``"kt"`` (``[a², K, C] x [a², C, T]``) are the same function
    as the direct form and as the order ``"tk"``, with the filters transformed transposed: in
    the Relax program, the products' ``matmul`` takes the constant first."""
    direct, data, w = _program(x_shape, k, pads, dilation, 0)
    want = evaluate(direct, {"x": data}, dtype=np.float64)[direct.outputs[0]]
    got = {}
    for products in winograd_ir.PRODUCTS:
        mod = _lowered_form(x_shape, w, pads, dilation, 4, channels_last=channels_last,
                            products=products)
        got[products] = _run(mod, data)
        np.testing.assert_allclose(got[products], want, rtol=1e-4,
                                   atol=2e-5 * np.abs(want).max())
        first = [b.value.args[0] for b in mod["main"].body.blocks[0].bindings
                 if isinstance(b.value, relax.Call) and b.value.op.name == "relax.matmul"
                 and isinstance(b.value.args[0], tvm.ir.expr.Constant)
                 and tuple(b.value.args[0].value.shape) == (36, k, x_shape[1])]
        assert bool(first) is (products == "kt")
    np.testing.assert_allclose(got["kt"], got["tk"], rtol=1e-4, atol=2e-5 * np.abs(want).max())
    with pytest.raises(ValueError, match="products"):
        _lowered_form(x_shape, w, pads, dilation, 4, products="tt")


@pytest.mark.parametrize("products", ["tk", "kt"])
def test_winograd_against_torch_with_the_weight_as_a_runtime_input(products):
    torch = pytest.importorskip("torch")
    program, data, w = _program((1, 16, 20, 20), 24, 2, 2, 4, weight_input=True,
                                products=products)
    got = _run(program_to_module(program), data, w)
    want = torch.nn.functional.conv2d(torch.from_numpy(data), torch.from_numpy(w), padding=2,
                                      dilation=2).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * np.abs(want).max())


def test_the_transform_matrices_satisfy_the_identity_exactly():
    assert all(winograd.identity_holds(m) for m in winograd.TILES)
    # a wrong matrix is caught: the check is not vacuous
    a, b, g = winograd.matrices(2)
    real = winograd.matrices
    try:
        winograd.matrices = lambda m: (a, b, g * np.array([[1.0], [1.0], [1.0], [2.0]]))
        assert not winograd.identity_holds(2)
    finally:
        winograd.matrices = real


@pytest.mark.parametrize("x_shape, w_shape, attrs, ok", [
    ((1, 8, 14, 14), (8, 8, 3, 3), {"strides": (1, 1), "dilations": (1, 1), "pads": (1,) * 4,
                                    "groups": 1}, True),
    ((1, 8, 14, 14), (8, 8, 5, 5), {"strides": (1, 1), "dilations": (1, 1), "pads": (2,) * 4,
                                    "groups": 1}, False),
    ((1, 8, 14, 14), (8, 8, 3, 3), {"strides": (2, 2), "dilations": (1, 1), "pads": (1,) * 4,
                                    "groups": 1}, False),
    ((1, 8, 14, 14), (8, 4, 3, 3), {"strides": (1, 1), "dilations": (1, 1), "pads": (1,) * 4,
                                    "groups": 2}, False),
    ((1, 8, 14, 14), (8, 8, 3, 3), {"strides": (1, 1), "dilations": (2, 2), "pads": (1,) * 4,
                                    "groups": 1}, False),
    ((1, 8, 6, 6, 6), (8, 8, 3, 3, 3), {"strides": (1,) * 3, "dilations": (1,) * 3,
                                        "pads": (1,) * 6, "groups": 1}, False),
])
def test_eligibility(x_shape, w_shape, attrs, ok):
    assert eligible(x_shape, w_shape, attrs) is ok


def test_an_ineligible_conv_is_refused_by_name():
    with pytest.raises(ValueError, match="no Winograd lowering"):
        winograd.conv2d(None, None, None, (1, 8, 14, 14), (8, 8, 5, 5),
                        {"strides": (1, 1), "dilations": (1, 1), "pads": (2,) * 4,
                         "groups": 1}, 2)


def _conv_sub(x_shape=(1, 16, 14, 14), kernel=3, pads=2, dilations=2, strides=1):
    b = ProgramBuilder()
    x = b.input("x", x_shape)
    w = b.weight("w", np.random.default_rng(0).standard_normal(
        (16, x_shape[1], kernel, kernel)).astype("float32"))
    return b.build([b.conv(x, w, pads=pads, dilations=dilations, strides=strides)])


@pytest.mark.parametrize("dilations, pads", [(1, 1), (2, 2)])
def test_the_generator_offers_a_verified_winograd_mutant_only_when_asked(dilations, pads):
    from tvm_pet.search.config import SearchConfig
    from tvm_pet.search.generator import generate
    sub = _conv_sub(pads=pads, dilations=dilations)

    def winograd_mutants(flag):
        mutants, _ = generate(sub, SearchConfig(depth=3, winograd=flag, time_limit=60))
        return [m for m in mutants if uses(m.corrected)]

    assert winograd_mutants(False) == []
    found = winograd_mutants(True)
    # the convolution itself by Winograd's algorithm, verified equivalent, no correction
    alone = [m for m in found if m.ops == ("WinogradConv",)]
    assert len(alone) == 1 and alone[0].result.equivalent
    assert alone[0].corrected.nodes[0].attrs["winograd"] == 4
    # and with the products in the other order, as a mutant of its own
    (kt,) = [m for m in found if m.ops == ("WinogradConvKT",)]
    assert kt.result.equivalent and kt.corrected.nodes[0].attrs["winograd_products"] == "kt"
    data = np.random.default_rng(2).standard_normal(sub.inputs[0].shape).astype("float32")
    want = evaluate(sub, {"x": data}, dtype=np.float64)[sub.outputs[0]]
    for m in found:  # every one lowers to what the subprogram computes
        got = _run(program_to_module(m.corrected), data)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("kernel, strides, pads", [(5, 1, 4), (3, 2, 2)])
def test_winograd_only_where_the_form_applies(kernel, strides, pads):
    """A 5x5 kernel has none; a strided 3x3 one only where a mutant makes its convolution one
    of stride 1 (each such mutant still computes the subprogram)."""
    from tvm_pet.search.config import SearchConfig
    from tvm_pet.search.generator import generate
    sub = _conv_sub(kernel=kernel, strides=strides, pads=pads)
    mutants, _ = generate(sub, SearchConfig(depth=2, winograd=True, time_limit=60))
    assert mutants
    data = np.random.default_rng(2).standard_normal(sub.inputs[0].shape).astype("float32")
    want = evaluate(sub, {"x": data}, dtype=np.float64)[sub.outputs[0]]
    for m in mutants:
        nodes = [n for n in m.corrected.nodes if n.attrs.get("winograd")]
        assert kernel == 3 or not nodes
        for n in nodes:
            shapes = m.corrected.shapes
            assert eligible(shapes[n.inputs[0]], shapes[n.inputs[1]], n.attrs)
        if nodes:
            got = _run(program_to_module(m.corrected), data)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * np.abs(want).max())


def test_the_analytic_cost_counts_a_quarter_of_the_products_plus_the_transforms():
    from tvm_pet.cost.analytic import FLOPS
    from tvm_pet.ir.node import Attrs
    from tvm_pet.ir.ops import Op
    attrs = Attrs({"strides": (1, 1), "dilations": (1, 1), "pads": (1, 1, 1, 1), "groups": 1})
    ins, outs = [(1, 512, 28, 28), (512, 512, 3, 3)], [(1, 512, 28, 28)]
    direct = FLOPS[Op.CONV](attrs, ins, outs)
    by_winograd = FLOPS[Op.CONV](attrs.replace(winograd=4), ins, outs)
    assert direct == 2 * 28 * 28 * 512 * 512 * 9
    # 49 tiles x 36 products x C x K, and 49 x (C x 36 x 12 + K x 16 x 36) for the transforms:
    # the input tiles by rows then columns (2 x 6 an entry), the output's by A^T x A^T
    assert by_winograd == 2 * (49 * 36 * 512 * 512 + 49 * (512 * 36 * 12 + 512 * 16 * 36))
    assert 0.25 < by_winograd / direct < 0.3


def test_the_optimize_flag_reaches_the_search_config():
    from tvm_pet.cli import _search_config, build_parser
    args = build_parser().parse_args(["optimize", "m.onnx", "--out", "o", "--winograd"])
    assert _search_config(args).winograd is True
    args = build_parser().parse_args(["optimize", "m.onnx", "--out", "o"])
    assert _search_config(args).winograd is False


def test_winograd_mutants_take_places_of_their_own():
    """Mutants tuned before (an earlier run's) would fill every place, and aligning mutants
    tuned before would spend the places kept for mutants the untuned screen cannot rank
    (Inception-v3 got no Winograd mutant so); Winograd mutants, whose untuned products are a
    naive loop nest, have ``promising`` places of their own, on top of it."""
    from tvm_pet.cost.model import RewriteScreen
    from tvm_pet.pipeline.plan import Screened, rank_mutants

    def screen(saving_s, keys, tuned=None):
        return RewriteScreen(saving_s, 1.0, tuned_s=tuned, new_kernels=frozenset(keys))

    screened = [Screened(f"sub{k}", ("Pad", "Conv"), screen(0.004, {f"t{k}"}, tuned=0.001), k,
                         aligns=True) for k in range(4)]
    screened += [Screened("sub8", ("WinogradConv",), screen(0.002, {"v"}), 4, winograd=True),
                 Screened("sub9", ("WinogradConv",), screen(0.004, {"w"}), 5, winograd=True),
                 Screened("sub7", ("WinogradConv",), screen(0.001, {"u"}), 6, winograd=True)]
    picks = rank_mutants(screened, promising=2, screen_ratio=2.0)
    # promising's count of places, the furthest-reaching first, then the two tuned before
    # with the best saving (all four save the same: the first two)
    assert [p.index for p in picks[:2]] == [5, 4]
    assert all(p.winograd and not p.aligns for p in picks[:2])
    assert "Winograd" in picks[0].reason and picks[0].to_json()["winograd"] is True
    assert [p.index for p in picks[2:]] == [0, 1] and all(p.tuned_before for p in picks[2:])
    # a rerun once they are tuned: their places are spent, and the third is not tuned
    rerun = [dataclasses.replace(s, screen=screen(s.screen.replaced_s, s.screen.new_kernels,
                                                  tuned=0.001))
             if s.index in (4, 5) else s for s in screened]
    again = rank_mutants(rerun, promising=2, screen_ratio=2.0)
    assert 6 not in [p.index for p in again] and all(p.tuned_before for p in again)
    assert len(again) == 4 and {4, 5} <= {p.index for p in again}
    # several Winograd mutants of one conv tuned before (with and without its padding) hold
    # one place, its best; the others go to the convs with none tuned yet (CSRNet: four tuned
    # forms of its two dilated 512-channel layers had filled all four places)
    forms = [dataclasses.replace(screened[5], mutant=("Pad", "WinogradConv"), index=7,
                                 screen=screen(0.004, {"w", "p"}, tuned=0.003)),
             dataclasses.replace(screened[5], screen=screen(0.004, {"w"}, tuned=0.002))]
    third = rank_mutants(screened[:5] + screened[6:] + forms, promising=2, screen_ratio=2.0)
    assert [p.index for p in third[:1]] == [4] and third[0].winograd
    assert third[1].index == 5 and third[1].tuned_before
    assert 7 not in [p.index for p in third]
    # without the flag there are no such places: the four tuned before fill promising
    plain = [s for s in screened if not s.winograd]
    assert sorted(p.index for p in rank_mutants(plain, promising=4, screen_ratio=2.0)) == \
        [0, 1, 2, 3]


def test_each_order_of_the_winograd_products_has_places_of_its_own():
    """Both orders of the products (``WinogradConv``, ``WinogradConvKT``) of the same layer are
    tuned, each order with ``promising`` places; one order tuned before (an earlier run's
    records) keeps its place and takes none from the other."""
    from tvm_pet.cost.model import RewriteScreen
    from tvm_pet.pipeline.plan import Screened, rank_mutants

    def screen(saving_s, keys, tuned=None):
        return RewriteScreen(saving_s, 1.0, tuned_s=tuned, new_kernels=frozenset(keys))

    screened = []
    for k, (sub, reach) in enumerate((("conv0", 0.004), ("conv1", 0.002), ("conv2", 0.001))):
        screened += [Screened(sub, ("Pad", "WinogradConv"), screen(reach, {f"tk{k}"}), 2 * k,
                              winograd=True),
                     Screened(sub, ("Pad", "WinogradConvKT"), screen(reach, {f"kt{k}"}),
                              2 * k + 1, winograd=True)]
    picks = rank_mutants(screened, promising=2, screen_ratio=2.0)
    assert sorted(p.index for p in picks if p.winograd) == [0, 1, 2, 3]
    assert {p.mutant[-1] for p in picks} == {"WinogradConv", "WinogradConvKT"}
    # the first order tuned before on every layer: its places are spent, the other's are not
    tuned = [dataclasses.replace(s, screen=screen(s.screen.replaced_s, s.screen.new_kernels,
                                                  tuned=0.001))
             if s.mutant[-1] == "WinogradConv" else s for s in screened]
    again = rank_mutants(tuned, promising=2, screen_ratio=2.0)
    assert [p.index for p in again if p.winograd and not p.tuned_before] == [1, 3]
    # (the third layer's tuned one is tuned already: it costs nothing, and takes a free place)
    assert [p.index for p in again if p.tuned_before] == [0, 2, 4]


def test_the_analytic_cost_reads_the_transformed_filters():
    """F(4x4)'s filters hold 36 values where the direct form's hold 9: on a 14x14 map at batch
    1 its products read four times the weights (measured: CSRNet's back end, where they made
    its batched products memory-bound)."""
    from tvm_pet.cost.analytic import bytes_moved
    sub = _conv_sub(x_shape=(1, 16, 14, 14))
    node = sub.nodes[0]
    wino = sub.replace(nodes=(dataclasses.replace(node, attrs=node.attrs.replace(winograd=4)),))
    weights = 16 * 16 * 9 * 4
    assert bytes_moved(wino, wino.nodes[0]) - bytes_moved(sub, node) == 3 * weights
