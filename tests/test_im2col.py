"""A 2-D or 3-D convolution as one matrix product over its shifted windows (tvm_pet.ir.im2col):
offered by the generator only when asked (``SearchConfig(im2col=True)``), verified as the CONV it
is, lowered to a data movement and one product (checked against NumPy in float64 over strides,
dilations, uneven pads, non-square kernels, a batch and 3-D convolutions), and given places of
its own by the tuning plan."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.first_node import lowers_to_the_same, run_module as _run, with_inputs
from tvm_pet.ir import ProgramBuilder, im2col
from tvm_pet.relax.adapter import program_to_module
from tvm_pet.verify.interpreter import evaluate


def _conv(x_shape, w_shape, *, strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1),
          weight_input=False, order=None, seed=0):
    """``conv(x, w) + b``, the CONV by its windows in ``order`` (None: as it is); the
    program and its inputs."""
    rng = np.random.default_rng(seed)
    w_value = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype("float32")
    b = ProgramBuilder()
    x = b.input("x", x_shape)
    w = b.input("w", w_shape) if weight_input else b.weight("w", w_value)
    bias_shape = (1, w_shape[0]) + (1,) * (len(x_shape) - 2)
    bias = b.weight("b", rng.standard_normal(bias_shape).astype("float32"))
    y = b.conv(x, w, strides=strides, dilations=dilations, pads=pads)
    return with_inputs(b.build([b.add(y, bias)]), rng, x_shape, w_value, weight_input,
                       **({"im2col": order} if order else {}))


CASES = [  # (x, w, strides, dilations, pads)
    ((1, 8, 14, 14), (16, 8, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ((1, 8, 14, 14), (8, 8, 3, 3), (1, 1), (2, 2), (2, 2, 2, 2)),   # CSRNet's dilated convs
    ((2, 5, 10, 11), (6, 5, 3, 2), (2, 1), (1, 2), (1, 0, 2, 1)),   # uneven everything
    ((1, 3, 15, 15), (8, 3, 7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),   # a stem
    ((1, 4, 9, 9), (4, 4, 3, 3), (1, 1), (1, 1), (0, 0, 0, 0)),     # no padding
    ((1, 6, 4, 7, 7), (8, 6, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1,) * 6),  # ResNet3D-18's
    ((1, 4, 5, 8, 9), (6, 4, 3, 3, 3), (1, 2, 2), (1, 1, 1), (1,) * 6),  # its strided ones
    ((2, 3, 5, 6, 7), (4, 3, 2, 3, 1), (2, 1, 1), (1, 2, 1), (0, 1, 0, 1, 2, 0)),  # uneven
]


@pytest.mark.parametrize("order", im2col.ORDERS)
@pytest.mark.parametrize("x_shape, w_shape, strides, dilations, pads", CASES)
def test_the_windows_product_computes_the_convolution(x_shape, w_shape, strides, dilations,
                                                     pads, order):
    kw = dict(strides=strides, dilations=dilations, pads=pads)
    program, inputs = _conv(x_shape, w_shape, order=order, **kw)
    plain, _ = _conv(x_shape, w_shape, **kw)
    text = lowers_to_the_same(program, plain, inputs)
    # and it is one matrix product over concatenated windows, not the convolution renamed
    assert "R.nn.conv" not in text and text.count("R.matmul(") == 1
    assert text.count("R.strided_slice(") == np.prod(w_shape[2:])
    assert program.nodes[0].label == im2col.LABELS[order]
    assert im2col.uses(program) and not im2col.uses(plain)


@pytest.mark.parametrize("order", im2col.ORDERS)
@pytest.mark.parametrize("x_shape, w_shape, pads", [
    ((1, 4, 8, 8), (6, 4, 3, 3), (1,) * 4), ((1, 4, 3, 8, 8), (6, 4, 3, 3, 3), (1,) * 6)])
def test_a_filter_given_at_run_time_is_permuted_in_the_graph(x_shape, w_shape, pads, order):
    nsp = len(x_shape) - 2
    kw = dict(strides=(1,) * nsp, dilations=(1,) * nsp, pads=pads, weight_input=True)
    program, inputs = _conv(x_shape, w_shape, order=order, **kw)
    plain, _ = _conv(x_shape, w_shape, **kw)
    want = evaluate(plain, inputs, dtype=np.float64)[plain.outputs[0]]
    got = _run(program_to_module(program), inputs["x"], inputs["w"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("order", im2col.ORDERS)
@pytest.mark.parametrize("x_shape, w_shape, pads", [
    ((1, 8, 14, 14), (16, 8, 3, 3), (1,) * 4), ((1, 8, 4, 8, 8), (16, 8, 3, 3, 3), (1,) * 6)])
def test_tvm_makes_three_kernels_the_windows_the_bare_product_and_the_layout_with_the_bias(
        x_shape, w_shape, pads, order):
    """TVM's fusion of the lowered form: every slice and the concat in one kernel, the product
    bare (the reshape after it stops the bias from fusing in: one workload for every layer of
    its shape, whatever follows it), then the layout back with the bias."""
    from tvm_pet.tune.compile import prepare
    nsp = len(x_shape) - 2
    program, _ = _conv(x_shape, w_shape, strides=(1,) * nsp, dilations=(1,) * nsp, pads=pads,
                       order=order)
    main = prepare(program_to_module(program), "llvm")["main"].script()
    calls = [line.split("R.call_tir(")[1].split(",")[0] for line in main.splitlines()
             if "R.call_tir(" in line]
    assert len(calls) == 3, calls
    assert "strided_slice" in calls[0] and "concatenate" in calls[0]
    assert calls[1] == "matmul" and "add" in calls[2] and "reshape" in calls[2]


@pytest.mark.parametrize("x, w, attrs, want", [
    ((1, 512, 14, 14), (512, 512, 3, 3), {"dilations": (2, 2), "pads": (2, 2, 2, 2)}, True),
    ((1, 256, 14, 14), (256, 256, 1, 1), {"pads": (0, 0, 0, 0)}, False),  # a product already
    ((1, 64, 224, 224), (64, 64, 3, 3), {}, False),                      # windows too large
    ((1, 32, 8, 8), (32, 1, 3, 3), {"groups": 32}, False),                # depthwise
    ((1, 8, 4, 4, 4), (8, 8, 3, 3, 3), {"strides": (1, 1, 1), "dilations": (1, 1, 1),
                                        "pads": (1,) * 6}, True),         # 3-D
    ((1, 64, 16, 56, 56), (64, 64, 3, 3, 3), {"strides": (1, 1, 1), "dilations": (1, 1, 1),
                                              "pads": (1,) * 6}, False),  # 87 M values
    ((1, 8, 4, 4), (8, 8, 3, 3, 3), {}, False),                         # ranks differ
    ((1, 8, 4), (8, 8, 3), {"strides": (1,), "dilations": (1,), "pads": (1, 1)}, False),  # 1-D
    ((1, 8, 14, 14), (8, 8, 3, 3), {"winograd": 4}, False),
])
def test_which_convolutions_have_a_window_form(x, w, attrs, want):
    base = {"strides": (1, 1), "dilations": (1, 1), "pads": (1, 1, 1, 1), "groups": 1}
    assert im2col.eligible(x, w, {**base, **attrs}) is want


def test_the_generator_offers_verified_window_mutants_only_when_asked():
    from tvm_pet.search.config import SearchConfig
    from tvm_pet.search.generator import generate

    sub, inputs = _conv((1, 8, 10, 10), (8, 8, 3, 3))

    def window_mutants(asked=True):
        mutants, _ = generate(sub, SearchConfig(depth=2, time_limit=60, im2col=asked))
        return [m for m in mutants if im2col.uses(m.corrected)]

    assert window_mutants(asked=False) == []  # off by default
    found = window_mutants()
    orders = {n.attrs["im2col"] for m in found for n in m.corrected.nodes if n.attrs.get("im2col")}
    assert orders == set(im2col.SEARCH_ORDERS)
    want = evaluate(sub, inputs, dtype=np.float64)[sub.outputs[0]]
    for m in found:  # fully equivalent: verified without a correction, and it lowers right
        assert m.result.equivalent
        got = _run(program_to_module(m.corrected), inputs["x"])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_window_mutants_take_the_places_kept_for_what_the_untuned_screen_cannot_rank():
    from tvm_pet.cost.model import RewriteScreen
    from tvm_pet.pipeline.plan import Screened, rank_mutants

    def screen(replaced_s, keys, ratio=1.0):
        return RewriteScreen(replaced_s, ratio, new_kernels=frozenset(keys))

    screened = [Screened(f"sub{k}", ("Transpose", "Conv"), screen(0.004, {f"t{k}"}, 0.5), k)
                for k in range(4)]
    screened += [Screened("conv9", ("Im2colConvT",), screen(0.03, {"w", "m"}, 1.8), 4,
                          windows=True),
                 Screened("conv9", ("Im2colConvT", "Add"), screen(0.03, {"w", "n"}, 1.8), 5,
                          windows=True),
                 Screened("conv8", ("Im2colConvT",), screen(0.02, {"w2", "m2"}, 1.9), 6,
                          windows=True)]
    picks = rank_mutants(screened, promising=4, screen_ratio=2.0)
    windows = [p for p in picks if p.windows]
    # places on top of the others': one per subprogram (the furthest reach first), and the
    # four best expected savings still picked
    assert [p.index for p in windows] == [4, 6]
    assert {0, 1, 2, 3} <= {p.index for p in picks if not p.windows}
    assert "shifted windows" in windows[0].reason and windows[0].to_json()["windows"] is True
    # a rerun: the one tuned keeps its subprogram's place, and no other of its mutants takes one
    tuned = dataclasses.replace(screened[4], screen=RewriteScreen(
        0.03, 1.8, tuned_s=0.02, new_kernels=frozenset({"w", "m"})))
    again = rank_mutants(screened[:4] + [tuned] + screened[5:], promising=4, screen_ratio=2.0)
    assert [p.index for p in again if p.windows] == [6]
    assert [p.index for p in again if p.tuned_before] == [4]
