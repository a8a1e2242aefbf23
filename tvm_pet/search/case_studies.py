"""The paper's case-study transformations, as subprograms at their real shapes.

Each case is a subprogram and a predicate telling whether a mutant *is* that transformation; the
generator knows nothing of them. Tests assert that each case's transformation is generated,
verified and (when partially equivalent) corrected; ``benchmarks/search_bench.py`` times them.
Nothing in the package imports this module: it is test and benchmark material.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from tvm_pet.ir.builder import ProgramBuilder
from tvm_pet.ir.node import Program
from tvm_pet.ir.ops import Op


@dataclasses.dataclass(frozen=True)
class CaseStudy:
    """A subprogram, the search depth the transformation needs, and how to recognise it."""

    name: str
    title: str
    build: Callable[[], Program]
    depth: int
    found: Callable[[Program, Program], bool]  # (subprogram, mutant) -> is it the transformation?


def _w(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32) * np.float32(1 / np.sqrt(np.prod(shape[1:])))


def _conv(x, w, **attrs) -> Callable[[], Program]:
    def build():
        rng = np.random.default_rng(0)
        b = ProgramBuilder("case")
        b.conv(b.input("x", x), b.weight("w", _w(rng, *w)), out="y", **attrs)
        return b.build(["y"])
    return build


def _convs(name):
    def build():
        rng = np.random.default_rng(0)
        b = ProgramBuilder(name)
        if name == "fig10a":
            x = b.input("x", (1, 768, 18, 18))
            b.conv(x, b.weight("w1", _w(rng, 192, 768, 1, 1)), out="y1")
            b.conv(x, b.weight("w2", _w(rng, 160, 768, 3, 3)), pads=1, out="y2")
        elif name == "table3_1x1":
            x = b.input("x", (1, 768, 18, 18))
            b.conv(x, b.weight("w1", _w(rng, 192, 768, 1, 1)), out="y1")
            b.conv(x, b.weight("w2", _w(rng, 160, 768, 1, 1)), out="y2")
        else:  # fig10b: the same conv shape on two different inputs
            for k in (1, 2):
                b.conv(b.input(f"x{k}", (1, 48, 38, 38)), b.weight(f"w{k}", _w(rng, 64, 48, 5, 5)),
                       pads=2, out=f"y{k}")
        return b.build(["y1", "y2"])
    return build


def _matmuls(batched: bool) -> Callable[[], Program]:
    def build():
        rng = np.random.default_rng(0)
        b = ProgramBuilder("matmul")
        if batched:
            b.matmul(b.input("x", (4, 128, 768)), b.weight("w", _w(rng, 768, 768)), out="y")
            return b.build(["y"])
        x = b.input("x", (512, 768))
        for k in range(3):
            b.matmul(x, b.weight(f"w{k}", _w(rng, 768, 768)), out=f"y{k}")
        return b.build(["y0", "y1", "y2"])
    return build


def _pool() -> Program:
    b = ProgramBuilder("pool")
    b.avgpool(b.input("x", (1, 192, 38, 38)), 3, 1, 1, count_include_pad=False, out="y")
    return b.build(["y"])


def _convs_in(mutant: Program) -> list:
    return [n for n in mutant.nodes if n.op is Op.CONV]


def _input_shape(program: Program, node) -> tuple:
    return program.shapes[node.inputs[0]]


def _one_conv(pred) -> Callable[[Program, Program], bool]:
    def found(sub, mutant):
        convs = _convs_in(mutant)
        return len(convs) >= 1 and pred(sub, mutant, convs[0])
    return found


CASE_STUDIES: dict[str, CaseStudy] = {c.name: c for c in [
    CaseStudy("spatial_to_batch", "conv [1,48,38,38]*[64,48,5,5]: input tiles moved into the batch",
              _conv((1, 48, 38, 38), (64, 48, 5, 5), pads=2), 3,
              _one_conv(lambda s, m, c: _input_shape(m, c)[0] > 1
                        and _input_shape(m, c)[2] < 38)),
    CaseStudy("dilated_to_regular", "dilated conv [1,512,14,14]*[256,512,3,3] as a regular conv",
              _conv((1, 512, 14, 14), (256, 512, 3, 3), pads=2, dilations=2), 3,
              _one_conv(lambda s, m, c: c.attrs["dilations"] == (1, 1))),
    CaseStudy("side_by_side", "two images [2,48,38,38] placed side by side along the width",
              _conv((2, 48, 38, 38), (64, 48, 5, 5), pads=2), 3,
              _one_conv(lambda s, m, c: _input_shape(m, c)[0] == 1
                        and _input_shape(m, c)[3] == 76)),
    CaseStudy("merge_parallel_convs",
              "1x1 and 3x3 convs on [1,768,18,18] as one conv, zero-padded weights",
              _convs("fig10a"), 4,
              lambda s, m: len(_convs_in(m)) == 1 and any(n.op is Op.PAD for n in m.nodes)),
    CaseStudy("merge_parallel_1x1", "Table 3: two 1x1 convs on [1,768,18,18] as one conv",
              _convs("table3_1x1"), 3, lambda s, m: len(_convs_in(m)) == 1),
    CaseStudy("merge_to_grouped", "two convs on different inputs as one grouped conv",
              _convs("fig10b"), 4,
              lambda s, m: len(_convs_in(m)) == 1 and _convs_in(m)[0].attrs["groups"] == 2),
    CaseStudy("batch_matmul_to_matmul", "batch matmul [4,128,768]x[768,768] as one matmul",
              _matmuls(True), 3,
              lambda s, m: any(n.op is Op.MATMUL and len(m.shapes[n.inputs[0]]) == 2
                               for n in m.nodes)),
    CaseStudy("merge_three_matmuls", "three [512,768]x[768,768] matmuls sharing their input as one",
              _matmuls(False), 3, lambda s, m: sum(n.op is Op.MATMUL for n in m.nodes) == 1),
    CaseStudy("grouped_to_dense",
              "grouped conv [1,64,56,56]*[64,32,3,3] (2 groups) as a dense conv",
              _conv((1, 64, 56, 56), (64, 32, 3, 3), pads=1, groups=2), 3,
              _one_conv(lambda s, m, c: c.attrs["groups"] == 1)),
    CaseStudy("avgpool_to_conv", "average pool 3x3 on [1,192,38,38] as a depthwise conv",
              _pool, 3, lambda s, m: len(_convs_in(m)) == 1),
    CaseStudy("stride2_to_stride1", "stride-2 conv [1,64,56,56]*[128,64,3,3] as stride 1 + slice",
              _conv((1, 64, 56, 56), (128, 64, 3, 3), pads=1, strides=2), 3,
              _one_conv(lambda s, m, c: c.attrs["strides"] == (1, 1))),
]}
