"""Hypothesis strategies: random small multi-linear programs, and (original, candidate) mutants.

A program is drawn as a :class:`Recipe`: runtime inputs, then 1-4 :class:`Step` s, each an operator
kind, the pool indices of its inputs and its parameters (weights included, as arrays). Replaying a
recipe with :func:`replay` builds the program. A mutant replays the same recipe with one or two
steps replaced by a named rewrite (:data:`REWRITES`): some exact (operands swapped, regroupings
into the batch with factors 2 and 3, identity round trips), some partially equivalent (images
side by side, parity grids, ``count_include_pad`` flipped, a wrong inverse transpose), some wrong
(pads moved, slices shifted by one, a weight element perturbed). The candidate names its weights
differently: the verifier must match them by content.

Every tensor stays below :data:`MAX_ELEMS` elements so brute force stays cheap.

:func:`small_programs` draws simpler programs directly: a chain over every multi-linear operator
on small 4-d shapes (the exact mod-p and restriction tests).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
from hypothesis import strategies as st

from tvm_pet.ir.builder import ProgramBuilder
from tvm_pet.ir.node import Node, Program, Shape
from tvm_pet.ir.shapes import broadcast_shapes, conv_out_size
from tvm_pet.errors import ShapeError

MAX_ELEMS = 1500
MAX_RANK = 5
DIMS = (1, 2, 2, 3, 4, 4, 5, 6, 6, 7)
FACTORS = (2, 3)


@dataclasses.dataclass(frozen=True)
class Step:
    """One operator application of a recipe; ``inputs`` index the tensor pool."""

    kind: str
    inputs: tuple[int, ...]
    params: dict = dataclasses.field(compare=False)


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Inputs, steps and output pool indices of a random program."""

    inputs: tuple[tuple[str, Shape], ...]
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]


# ---------------------------------------------------------------------------------------------
# Regroupings with factors: pure shape arithmetic, shared by the drawers and the rewrites
# ---------------------------------------------------------------------------------------------

def batch_into_axis(x: Shape, f: int, axis: int, outer: bool) -> dict:
    """Params of [N, .., S, ..] -> [N/f, .., f*S, ..]: batch item ``m*f + j`` goes to block ``j``
    of ``axis`` (``outer``, images side by side) or to positions ``= j mod f`` (interleaved)."""
    r = len(x)
    split = (x[0] // f, f) + x[1:]
    rest = [0] + list(range(2, r + 1))                # mid axes without the factor
    pos = rest.index(axis + 1) + (0 if outer else 1)
    perm = rest[:pos] + [1] + rest[pos:]
    shape = list(x)
    shape[0] //= f
    shape[axis] *= f
    return {"split_shape": split, "perm": tuple(perm), "shape": tuple(shape)}


def axis_into_batch(x: Shape, f: int, axis: int, outer: bool) -> dict:
    """The inverse of :func:`batch_into_axis`: [M, .., f*L, ..] -> [M*f, .., L, ..]."""
    n = x[axis] // f
    split = x[:axis] + ((f, n) if outer else (n, f)) + x[axis + 1:]
    fpos = axis if outer else axis + 1
    others = [d for d in range(len(x) + 1) if d != fpos]
    perm = [others[0], fpos] + others[1:]
    shape = list(x)
    shape[0] *= f
    shape[axis] = n
    return {"split_shape": split, "perm": tuple(perm), "shape": tuple(shape)}


def group_residues(x: Shape, f: int, axis: int, inverse: bool = False) -> dict:
    """Reorder ``axis`` in place so that positions ``= 0 mod f`` come first, then ``1 mod f``..."""
    n = x[axis]
    pair = (f, n // f) if inverse else (n // f, f)
    perm = list(range(len(x) + 1))
    perm[axis], perm[axis + 1] = perm[axis + 1], perm[axis]
    return {"split_shape": x[:axis] + pair + x[axis + 1:], "perm": tuple(perm), "shape": x}


def _rt(b: ProgramBuilder, t: str, p: dict) -> str:
    return b.reshape_transpose(t, p["split_shape"], p["perm"], p["shape"])



# ---------------------------------------------------------------------------------------------
# Emitting steps
# ---------------------------------------------------------------------------------------------

def _weights(b: ProgramBuilder, p: dict, prefix: str) -> list[str]:
    return [b.weight(b.fresh(prefix), w) for w in p.get("weights", ())]


def _matmul_operands(b, ins, p, prefix) -> tuple[str, str]:
    if p["mode"] == "tensor":
        return ins[0], ins[1]
    (w,) = _weights(b, p, prefix)
    return (ins[0], w) if p["mode"] == "right" else (w, ins[0])


def _binary_operands(b, ins, p, prefix) -> tuple[str, str]:
    other = {"self": lambda: ins[0], "tensor": lambda: ins[1],
             "weight": lambda: _weights(b, p, prefix)[0]}[p["mode"]]()
    return (other, ins[0]) if p["swap"] else (ins[0], other)


def _slice_stops(p) -> tuple[int, ...]:
    return tuple(s + (k - 1) * t + 1 for s, t, k in zip(p["starts"], p["steps"], p["sizes"]))


EMIT: dict[str, Callable[..., tuple[str, ...]]] = {
    "conv": lambda b, ins, p, pre: (b.conv(ins[0], _weights(b, p, pre)[0], p["strides"], p["pads"],
                                           p["dilations"], p["groups"]),),
    "matmul": lambda b, ins, p, pre: (b.matmul(*_matmul_operands(b, ins, p, pre)),),
    "add": lambda b, ins, p, pre: (b.add(*_binary_operands(b, ins, p, pre)),),
    "mul": lambda b, ins, p, pre: (b.mul(*_binary_operands(b, ins, p, pre)),),
    "batchnorm": lambda b, ins, p, pre: (b.batchnorm(ins[0], *_weights(b, p, pre)),),
    "avgpool": lambda b, ins, p, pre: (b.avgpool(ins[0], p["kernel"], p["strides"], p["pads"],
                                                 p["count_include_pad"]),),
    "concat": lambda b, ins, p, pre: (b.concat(ins, p["axis"]),),
    "split": lambda b, ins, p, pre: b.split(ins[0], p["axis"], p["sizes"]),
    "slice": lambda b, ins, p, pre: (b.slice(ins[0], p["starts"], _slice_stops(p), p["steps"]),),
    "pad": lambda b, ins, p, pre: (b.pad(ins[0], p["pads"]),),
    "transpose": lambda b, ins, p, pre: (b.transpose(ins[0], p["perm"]),),
    "reshape": lambda b, ins, p, pre: (
        _rt(b, ins[0], p) if p.get("reshape_transpose") else b.reshape(ins[0], p["shape"]),),
}


# ---------------------------------------------------------------------------------------------
# Drawing steps: each drawer returns (input pool indices, params) or None when it does not fit
# ---------------------------------------------------------------------------------------------

def _array(draw, shape) -> np.ndarray:
    seed = draw(st.integers(0, 2**32 - 1))
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _fits(shape) -> bool:
    return math.prod(shape) <= MAX_ELEMS


def _draw_conv(draw, shapes, i):
    x = shapes[i]
    if len(x) not in (3, 4):
        return None
    n, c, spatial = x[0], x[1], x[2:]
    g = draw(st.sampled_from([d for d in range(1, min(c, 4) + 1) if c % d == 0]))
    o = g * draw(st.integers(1, 3))
    kernel, strides, dils, begins, ends, out = [], [], [], [], [], [n, o]
    for s in spatial:
        k = draw(st.sampled_from((3, 1, 2, 3)))
        d = draw(st.sampled_from((2, 1, 2, 3))) if k > 1 else 1
        stride = draw(st.sampled_from((1, 1, 2)))
        if draw(st.booleans()):                      # "same" padding, centred or not
            pb = d * (k - 1) // 2 if draw(st.booleans()) else draw(st.integers(0, d * (k - 1)))
            pe = d * (k - 1) - pb
        else:
            pb, pe = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        if conv_out_size(s, k, stride, d, pb, pe) < 1:
            d = 1
        if conv_out_size(s, k, stride, d, pb, pe) < 1:
            k = 1
        kernel.append(k), strides.append(stride), dils.append(d), begins.append(pb), ends.append(pe)
        out.append(conv_out_size(s, k, stride, d, pb, pe))
    if not _fits(out):
        return None
    return (i,), {"strides": tuple(strides), "pads": tuple(begins + ends), "dilations": tuple(dils),
                "groups": g, "weights": (_array(draw, (o, c // g, *kernel)),)}


def _batch_broadcasts(a: Shape, b: Shape) -> bool:
    try:
        broadcast_shapes(a[:-2], b[:-2])
    except ShapeError:
        return False
    return True


def _draw_matmul(draw, shapes, i):
    x = shapes[i]
    if len(x) < 2:
        return None
    partners = [j for j, y in enumerate(shapes) if len(y) >= 2 and y[-2] == x[-1]
                and _batch_broadcasts(x, y)
                and _fits(broadcast_shapes(x[:-2], y[:-2]) + (x[-2], y[-1]))]
    mode = draw(st.sampled_from(["right", "right", "left"] + (["tensor"] if partners else [])))
    if mode == "tensor":
        return (i, draw(st.sampled_from(partners))), {"mode": "tensor"}
    m = draw(st.integers(1, 6))
    if mode == "right":
        batch = (x[-3],) if len(x) >= 3 and draw(st.booleans()) else ()
        wshape, out = batch + (x[-1], m), x[:-1] + (m,)
    else:
        wshape, out = (m, x[-2]), x[:-2] + (m, x[-1])
    if not _fits(out):
        return None
    return (i,), {"mode": mode, "weights": (_array(draw, wshape),)}


def _draw_binary(draw, shapes, i):
    x = shapes[i]
    partners = []
    for j, y in enumerate(shapes):
        try:
            if j != i and _fits(broadcast_shapes(x, y)):
                partners.append(j)
        except ShapeError:
            pass
    mode = draw(st.sampled_from(["self", "weight", "weight"] + (["tensor"] * 2 if partners else [])))
    swap = draw(st.booleans())
    if mode == "tensor":
        return (i, draw(st.sampled_from(partners))), {"mode": "tensor", "swap": swap}
    if mode == "self":
        return (i,), {"mode": "self", "swap": swap}
    keep = draw(st.lists(st.booleans(), min_size=len(x), max_size=len(x)))
    drop = draw(st.integers(0, len(x) - 1))
    wshape = tuple(d if k else 1 for d, k in zip(x, keep))[drop:]
    return (i,), {"mode": "weight", "swap": swap, "weights": (_array(draw, wshape),)}


def _draw_batchnorm(draw, shapes, i):
    x = shapes[i]
    if len(x) < 2:
        return None
    return (i,), {"weights": (_array(draw, (x[1],)), _array(draw, (x[1],)))}


def _draw_avgpool(draw, shapes, i):
    x = shapes[i]
    if len(x) not in (3, 4):
        return None
    kernel, strides, begins, ends, out = [], [], [], [], list(x[:2])
    for s in x[2:]:
        k = draw(st.integers(1, 3))
        stride = draw(st.sampled_from((1, 1, 2)))
        pb, pe = draw(st.integers(0, k - 1)), draw(st.integers(0, k - 1))
        if conv_out_size(s, k, stride, 1, pb, pe) < 1:
            k, pb, pe = 1, 0, 0
        kernel.append(k), strides.append(stride), begins.append(pb), ends.append(pe)
        out.append(conv_out_size(s, k, stride, 1, pb, pe))
    if not _fits(out):
        return None
    return (i,), {"kernel": tuple(kernel), "strides": tuple(strides), "pads": tuple(begins + ends),
                "count_include_pad": draw(st.booleans())}


def _draw_concat(draw, shapes, i):
    x = shapes[i]
    axis = draw(st.integers(0, len(x) - 1))
    same = [j for j, y in enumerate(shapes) if len(y) == len(x)
            and all(a == b for d, (a, b) in enumerate(zip(x, y)) if d != axis)]
    others = draw(st.lists(st.sampled_from(same), min_size=1, max_size=2))
    ins = draw(st.permutations([i] + others))
    out = list(x)
    out[axis] = sum(shapes[j][axis] for j in ins)
    if not _fits(out):
        return None
    return tuple(ins), {"axis": axis}


def _draw_split(draw, shapes, i):
    x = shapes[i]
    axes = [d for d, n in enumerate(x) if n >= 2]
    if not axes:
        return None
    axis = draw(st.sampled_from(axes))
    n = x[axis]
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), min_size=1, max_size=min(2, n - 1))))
    bounds = [0] + cuts + [n]
    return (i,), {"axis": axis, "sizes": tuple(b - a for a, b in zip(bounds, bounds[1:]))}


def _draw_slice(draw, shapes, i):
    starts, steps, sizes = [], [], []
    for n in shapes[i]:
        step = draw(st.sampled_from((1, 1, 2, 3)))
        start = draw(st.integers(0, n - 1))
        starts.append(start), steps.append(step)
        sizes.append(draw(st.integers(1, (n - 1 - start) // step + 1)))
    return (i,), {"starts": tuple(starts), "steps": tuple(steps), "sizes": tuple(sizes)}


def _draw_pad(draw, shapes, i):
    x = shapes[i]
    pads = [draw(st.sampled_from((0, 0, 1, 2))) for _ in range(2 * len(x))]
    out = [n + pads[d] + pads[len(x) + d] for d, n in enumerate(x)]
    if not any(pads) or not _fits(out):
        return None
    return (i,), {"pads": tuple(pads)}


def _draw_transpose(draw, shapes, i):
    return (i,), {"perm": tuple(draw(st.permutations(range(len(shapes[i])))))}


def regroupings(x: Shape) -> list[tuple[str, int, int]]:
    """The factor-2/3 regroupings that apply to shape ``x``: (how, axis, factor)."""
    out = []
    for f in FACTORS:
        for a, n in enumerate(x):
            if n % f == 0 and len(x) < MAX_RANK:
                out.append(("split", a, f))
            if n % f == 0 and a >= 1:
                out.append(("space_to_batch", a, f))
            if x[0] % f == 0 and a >= 1:
                out.append(("batch_to_space", a, f))
    out += [("merge", a, 0) for a in range(len(x) - 1) if len(x) >= 3]
    return out


def _draw_reshape(draw, shapes, i):
    x = shapes[i]
    options = regroupings(x)
    if not options:
        return None
    how, a, f = draw(st.sampled_from(options))
    if how == "merge":
        return (i,), {"shape": x[:a] + (x[a] * x[a + 1],) + x[a + 2:]}
    if how == "split":
        pair = (x[a] // f, f) if draw(st.booleans()) else (f, x[a] // f)
        return (i,), {"shape": x[:a] + pair + x[a + 1:]}
    outer = draw(st.booleans())
    p = (axis_into_batch if how == "space_to_batch" else batch_into_axis)(x, f, a, outer)
    return (i,), {"reshape_transpose": True, **p}


DRAWERS = {
    "conv": _draw_conv, "matmul": _draw_matmul, "add": _draw_binary, "mul": _draw_binary,
    "batchnorm": _draw_batchnorm, "avgpool": _draw_avgpool, "concat": _draw_concat,
    "split": _draw_split, "slice": _draw_slice, "pad": _draw_pad, "transpose": _draw_transpose,
    "reshape": _draw_reshape,
}
#: Kinds drawn, with repetitions as weights.
KINDS = ("conv", "conv", "conv", "matmul", "matmul", "add", "mul", "batchnorm", "avgpool",
         "avgpool", "concat", "split", "slice", "pad", "transpose", "reshape", "reshape")


# ---------------------------------------------------------------------------------------------
# Programs
# ---------------------------------------------------------------------------------------------

@st.composite
def _shape(draw, budget: int = 400, ranks=(2, 3, 3, 4, 4)) -> Shape:
    rank = draw(st.sampled_from(ranks))
    dims = []
    for _ in range(rank):
        d = draw(st.sampled_from([v for v in DIMS if v <= budget] or [1]))
        budget //= d
        dims.append(d)
    return tuple(dims)


@st.composite
def recipes(draw, max_steps: int = 4, first_kind: str | None = None) -> Recipe:
    """A random :class:`Recipe` of 1-2 inputs and 1-``max_steps`` steps.

    With ``first_kind``, the first step applies that kind to ``x0`` whenever it fits.
    """
    first = draw(_shape(ranks=(3, 4, 4) if first_kind in ("conv", "avgpool") else (2, 3, 3, 4, 4)))
    inputs = [("x0", first)]
    if draw(st.booleans()):
        inputs.append(("x1", first if draw(st.booleans()) else draw(_shape())))
    b = ProgramBuilder("draft")
    pool = [b.input(n, s) for n, s in inputs]
    steps, consumed = [], set()
    for n in range(draw(st.integers(1, max_steps))):
        shapes = [b.shapes[t] for t in pool]
        i = len(pool) - 1 if draw(st.booleans()) else draw(st.integers(0, len(pool) - 1))
        kinds = draw(st.permutations(KINDS))
        if n == 0 and first_kind is not None:
            i, kinds = 0, [first_kind] + kinds
        for kind in kinds:
            drawn = DRAWERS[kind](draw, shapes, i)
            if drawn is not None:
                break
        else:
            continue
        step = Step(kind, *drawn)
        pool.extend(EMIT[kind](b, [pool[j] for j in step.inputs], step.params, "w"))
        consumed.update(step.inputs)
        steps.append(step)
    n_in = len(inputs)
    if not steps:        # nothing fitted: a transpose always does
        step = Step("transpose", (0,), {"perm": tuple(reversed(range(len(first))))})
        pool.extend(EMIT["transpose"](b, [pool[0]], step.params, "w"))
        steps.append(step)
    last = len(pool) - _n_outputs(steps[-1])
    leaves = [j for j in range(n_in, len(pool)) if j not in consumed and j != last]
    outputs = [last] + ([draw(st.sampled_from(leaves))] if leaves and draw(st.booleans()) else [])
    return Recipe(tuple(inputs), tuple(steps), tuple(outputs))


def _n_outputs(step: Step) -> int:
    return len(step.params["sizes"]) if step.kind == "split" else 1


def _renamed(program: Program, mapping: dict[str, str]) -> Program:
    def r(n):
        return mapping.get(n, n)
    nodes = tuple(Node(n.op, tuple(map(r, n.inputs)), tuple(map(r, n.outputs)), n.attrs)
                  for n in program.nodes)
    return Program(program.inputs, dict(program.weights), nodes, tuple(map(r, program.outputs)),
                   program.name)


Rewriter = Callable[..., "tuple[str, ...] | None"]


def _rollback(b: ProgramBuilder, n_nodes: int, names: set[str]) -> None:
    del b.nodes[n_nodes:]
    for name in set(b.shapes) - names:
        del b.shapes[name]
        b.weights.pop(name, None)


def replay(recipe: Recipe, name: str = "original", prefix: str = "w",
           rewrites: dict[int, list[tuple[str, Rewriter]]] | None = None,
           draw=None) -> tuple[Program, list[str]]:
    """Build the program of ``recipe``; steps in ``rewrites`` use the first rewrite that applies.

    Returns:
        The program (outputs named ``y0``, ``y1``) and the names of the rewrites applied.
    """
    b = ProgramBuilder(name)
    pool = [b.input(n, s) for n, s in recipe.inputs]
    applied = []
    for k, step in enumerate(recipe.steps):
        ins = [pool[j] for j in step.inputs]
        outs = None
        for rw_name, rw in (rewrites or {}).get(k, []):
            mark = (len(b.nodes), set(b.shapes))
            outs = rw(draw, b, step, ins, prefix)
            if outs is not None:
                applied.append(f"{rw_name}@{step.kind}")
                break
            _rollback(b, *mark)         # a rewrite that does not fit may have emitted nodes
        pool.extend(outs if outs is not None else EMIT[step.kind](b, ins, step.params, prefix))
    outs = [pool[j] for j in recipe.outputs]
    program = b.build(outs)
    suffix = f"[{', '.join(applied)}]" if applied else ""
    return _renamed(program.replace(name=name + suffix),
                    {o: f"y{j}" for j, o in enumerate(outs)}), applied


@st.composite
def programs(draw, max_steps: int = 4) -> Program:
    """A random small multi-linear program (1-2 inputs ``x0``, ``x1``; outputs ``y0``[, ``y1``])."""
    return replay(draw(recipes(max_steps)))[0]


@st.composite
def mutant_pairs(draw, max_steps: int = 4, max_rewrites: int = 2,
                 focus: tuple[str, ...] | None = None) -> tuple[Program, Program]:
    """(original, candidate): the candidate replays the original's recipe with 1-2 steps rewritten.

    The candidate's name lists the rewrites applied, e.g. ``mutant[conv_side_by_side@conv]``.

    Args:
        max_steps: steps of the original.
        max_rewrites: steps rewritten.
        focus: rewrite names to draw from (else all). With ``focus``, the recipe starts with a
            step of the first kind the focused rewrites apply to, and that step is rewritten.
    """
    names = tuple(focus or REWRITES)
    first_kind = None
    if focus:
        first_kind = next(k for n in focus for k in (REWRITES[n][0] or ()))
    recipe = draw(recipes(max_steps, first_kind))
    # windowed steps and the paper's regroupings are favoured (listed twice)
    steps = list(range(len(recipe.steps))) + [k for k, s in enumerate(recipe.steps)
                                              if s.kind in ("conv", "avgpool")]
    targets = draw(st.lists(st.sampled_from(steps), min_size=1, max_size=max_rewrites, unique=True))
    if focus:
        targets = [0] + [k for k in targets if k != 0]
    plan = {}
    for k in targets:
        kind = recipe.steps[k].kind
        fitting = [n for n in names if REWRITES[n][0] is None or kind in REWRITES[n][0]]
        fitting += [n for n in FAVOURED if n in fitting]
        if not fitting:
            continue
        first = draw(st.integers(0, len(fitting) - 1))   # then on in a cycle, if it does not fit
        order = dict.fromkeys(fitting[first:] + fitting[:first])
        plan[k] = [(n, REWRITES[n][1]) for n in order] + FALLBACK
    original, _ = replay(recipe)
    candidate, _ = replay(recipe, "mutant", "cw", plan, draw)
    return original, candidate


# ---------------------------------------------------------------------------------------------
# Rewrites: ``rewrite(draw, builder, step, inputs, weight_prefix) -> outputs``, or None when the
# step does not fit. Each emits a replacement for the step with the same output shapes.
# ---------------------------------------------------------------------------------------------

def _set(t: tuple, a: int, v) -> tuple:
    out = list(t)
    out[a] = v
    return tuple(out)


def _conv(b, x, w, p, **changes) -> str:
    q = {**p, **changes}
    return b.conv(x, w, q["strides"], q["pads"], q["dilations"], q["groups"])


def _axis_slice(b, t, axis, start, size, step=1) -> str:
    s = b.shapes[t]
    starts, steps = _set((0,) * len(s), axis, start), _set((1,) * len(s), axis, step)
    stops = _set(s, axis, start + (size - 1) * step + 1)
    return b.slice(t, starts, stops, steps)


def _axis_pad(rank, axis, begin, end) -> tuple[int, ...]:
    return _set(_set((0,) * (2 * rank), axis, begin), rank + axis, end)


def _spatial_pads(p, nsp) -> tuple[int, ...]:
    return (0, 0) + p["pads"][:nsp] + (0, 0) + p["pads"][nsp:]


def _kernel(p, a) -> int:
    return p["weights"][0].shape[2 + a] if "weights" in p else p["kernel"][a]


def _layout_pair(draw, x: Shape):
    """A random bijective layout change of shape ``x`` and its inverse, as builder functions."""
    options = [("transpose", 0, 0), ("pad_slice", 0, 0)] + regroupings(x)
    options += [("residues", a, f) for f in FACTORS for a, n in enumerate(x) if n % f == 0]
    how, a, f = draw(st.sampled_from(options))
    if how == "transpose":
        perm = tuple(draw(st.permutations(range(len(x)))))
        return lambda b, t: b.transpose(t, perm), lambda b, t: b.transpose(t, tuple(np.argsort(perm)))
    if how == "pad_slice":
        a = draw(st.integers(0, len(x) - 1))
        pb, pe = draw(st.integers(0, 2)), draw(st.integers(1, 2))
        return (lambda b, t: b.pad(t, _axis_pad(len(x), a, pb, pe)),
                lambda b, t: _axis_slice(b, t, a, pb, x[a]))
    if how in ("split", "merge"):
        shape = (x[:a] + (x[a] // f, f) + x[a + 1:]) if how == "split" \
            else x[:a] + (x[a] * x[a + 1],) + x[a + 2:]
        return lambda b, t: b.reshape(t, shape), lambda b, t: b.reshape(t, x)
    if how == "residues":
        return (lambda b, t: _rt(b, t, group_residues(x, f, a)),
                lambda b, t: _rt(b, t, group_residues(x, f, a, inverse=True)))
    outer = draw(st.booleans())
    there, back = (axis_into_batch, batch_into_axis) if how == "space_to_batch" \
        else (batch_into_axis, axis_into_batch)
    return (lambda b, t: _rt(b, t, there(x, f, a, outer)),
            lambda b, t: _rt(b, t, back(b.shapes[t], f, a, outer)))


def rw_roundtrip(draw, b, step, ins, pre):
    """Exact: a bijective layout change and its inverse, before or after the step."""
    if draw(st.booleans()):
        fwd, bwd = _layout_pair(draw, b.shapes[ins[0]])
        return EMIT[step.kind](b, [bwd(b, fwd(b, ins[0]))] + ins[1:], step.params, pre)
    outs = list(EMIT[step.kind](b, ins, step.params, pre))
    j = draw(st.integers(0, len(outs) - 1))
    fwd, bwd = _layout_pair(draw, b.shapes[outs[j]])
    outs[j] = bwd(b, fwd(b, outs[j]))
    return tuple(outs)


def rw_roundtrip_wrong(draw, b, step, ins, pre):
    """Partial: residues regrouped (factor 2 or 3) but never regrouped back, or regrouped twice."""
    outs = list(EMIT[step.kind](b, ins, step.params, pre))
    x = b.shapes[outs[0]]
    opts = [(a, f) for f in FACTORS for a, n in enumerate(x) if n % f == 0 and n // f >= 2]
    if not opts:
        return None
    a, f = draw(st.sampled_from(opts))
    t = _rt(b, outs[0], group_residues(x, f, a))
    outs[0] = _rt(b, t, group_residues(x, f, a)) if draw(st.booleans()) else t
    return tuple(outs)


def rw_weight_perturbed(draw, b, step, ins, pre):
    """Wrong: one element of one weight changed (a new random variable)."""
    ws = list(step.params.get("weights", ()))
    if not ws:
        return None
    k = draw(st.integers(0, len(ws) - 1))
    w = ws[k].copy()
    w.flat[draw(st.integers(0, w.size - 1))] += draw(st.sampled_from((1.0, -0.5, 2.0)))
    ws[k] = w
    return EMIT[step.kind](b, ins, {**step.params, "weights": tuple(ws)}, pre)


def rw_swap_operands(draw, b, step, ins, pre):
    """Exact: a commutative operator with its operands swapped."""
    return EMIT[step.kind](b, ins, {**step.params, "swap": not step.params["swap"]}, pre)


def rw_elementwise_regrouped(draw, b, step, ins, pre):
    """Exact: operands moved to another layout (factor 2/3 regroupings included) and back."""
    p = step.params
    if step.kind == "batchnorm":
        x = b.shapes[ins[0]]
        opts = [(a, f) for f in FACTORS for a in range(2, len(x)) if x[a] % f == 0]
        if not opts:
            return None
        a, f = draw(st.sampled_from(opts))
        outer = draw(st.booleans())
        t = _rt(b, ins[0], axis_into_batch(x, f, a, outer))
        y = b.batchnorm(t, *_weights(b, p, pre))
        return (_rt(b, y, batch_into_axis(b.shapes[y], f, a, outer)),)
    lhs, rhs = _binary_operands(b, ins, p, pre)
    if b.shapes[lhs] != b.shapes[rhs]:
        return None
    fwd, bwd = _layout_pair(draw, b.shapes[lhs])
    op = b.add if step.kind == "add" else b.mul
    return (bwd(b, op(fwd(b, lhs), fwd(b, rhs))),)


def rw_batchnorm_as_mul_add(draw, b, step, ins, pre):
    """Exact: ``x * scale[c] + shift[c]`` written with broadcasting MUL and ADD."""
    x = b.shapes[ins[0]]
    scale, shift = _weights(b, step.params, pre)
    col = (x[1],) + (1,) * (len(x) - 2)
    return (b.add(b.mul(ins[0], b.reshape(scale, col)), b.reshape(shift, col)),)


def rw_matmul_transposed(draw, b, step, ins, pre):
    """Exact: ``A @ B = (B^T @ A^T)^T`` on the last two axes."""
    def t(name):
        r = len(b.shapes[name])
        return b.transpose(name, tuple(range(r - 2)) + (r - 1, r - 2))
    lhs, rhs = _matmul_operands(b, ins, step.params, pre)
    return (t(b.matmul(t(rhs), t(lhs))),)


def rw_matmul_split_k(draw, b, step, ins, pre):
    """Exact: the reduction split in two, two matmuls added."""
    lhs, rhs = _matmul_operands(b, ins, step.params, pre)
    k = b.shapes[lhs][-1]
    if k < 2:
        return None
    cut = draw(st.integers(1, k - 1))
    l1, l2 = b.split(lhs, len(b.shapes[lhs]) - 1, (cut, k - cut))
    r1, r2 = b.split(rhs, len(b.shapes[rhs]) - 2, (cut, k - cut))
    return (b.add(b.matmul(l1, r1), b.matmul(l2, r2)),)


def rw_matmul_fold_batch(draw, b, step, ins, pre):
    """Exact: batch axes of the left operand folded into its rows for a 2-D right operand."""
    lhs, rhs = _matmul_operands(b, ins, step.params, pre)
    a = b.shapes[lhs]
    if len(a) < 3 or len(b.shapes[rhs]) != 2:
        return None
    y = b.matmul(b.reshape(lhs, (math.prod(a[:-1]), a[-1])), rhs)
    return (b.reshape(y, a[:-1] + (b.shapes[rhs][-1],)),)


def rw_conv_batch_split(draw, b, step, ins, pre):
    """Exact: the batch split in two, two convolutions concatenated."""
    n = b.shapes[ins[0]][0]
    if n < 2:
        return None
    cut = draw(st.integers(1, n - 1))
    (w,) = _weights(b, step.params, pre)
    return (b.concat([_conv(b, t, w, step.params) for t in b.split(ins[0], 0, (cut, n - cut))], 0),)


def rw_conv_group_split(draw, b, step, ins, pre):
    """Exact: a grouped convolution as one convolution per group."""
    p = step.params
    g = p["groups"]
    if g < 2:
        return None
    (w,) = _weights(b, p, pre)
    xs = b.split(ins[0], 1, (b.shapes[ins[0]][1] // g,) * g)
    ws = b.split(w, 0, (b.shapes[w][0] // g,) * g)
    return (b.concat([_conv(b, xi, wi, p, groups=1) for xi, wi in zip(xs, ws)], 1),)


def rw_conv_explicit_pad(draw, b, step, ins, pre):
    """Exact: the convolution's padding done by a PAD node."""
    p = step.params
    if not any(p["pads"]):
        return None
    nsp = len(p["strides"])
    (w,) = _weights(b, p, pre)
    return (_conv(b, b.pad(ins[0], _spatial_pads(p, nsp)), w, p, pads=(0,) * (2 * nsp)),)


def rw_conv_edge_replicated(draw, b, step, ins, pre):
    """Wrong on one edge: explicit padding that repeats the edge row instead of one zero row."""
    p = step.params
    nsp = len(p["strides"])
    sides = [(a, e) for a in range(nsp) for e in (0, 1) if p["pads"][e * nsp + a] >= 1]
    if not sides:
        return None
    a, e = draw(st.sampled_from(sides))
    pads = _set(p["pads"], e * nsp + a, p["pads"][e * nsp + a] - 1)
    xp = b.pad(ins[0], _spatial_pads({"pads": pads}, nsp))
    edge_at = pads[a] if e == 0 else pads[a] + b.shapes[ins[0]][2 + a] - 1
    edge = _axis_slice(b, xp, 2 + a, edge_at, 1)
    xp = b.concat([edge, xp] if e == 0 else [xp, edge], 2 + a)
    (w,) = _weights(b, p, pre)
    return (_conv(b, xp, w, p, pads=(0,) * (2 * nsp)),)


def rw_conv_pad_shift(draw, b, step, ins, pre):
    """Wrong (or partial): one unit of padding moved from one side of an axis to the other."""
    p = step.params
    nsp = len(p["strides"])
    moves = [(a, -1) for a in range(nsp) if p["pads"][a] >= 1] + \
        [(a, 1) for a in range(nsp) if p["pads"][nsp + a] >= 1]
    if not moves:
        return None
    a, delta = draw(st.sampled_from(moves))
    pads = _set(_set(p["pads"], a, p["pads"][a] + delta), nsp + a, p["pads"][nsp + a] - delta)
    (w,) = _weights(b, p, pre)
    return (_conv(b, ins[0], w, p, pads=pads),)


def _same_padded_axes(p, x, factors=FACTORS):
    nsp = len(p["strides"])
    return [(a, f) for a in range(nsp) for f in factors if p["strides"][a] == 1
            and p["pads"][a] + p["pads"][nsp + a] == p["dilations"][a] * (_kernel(p, a) - 1)]


def rw_conv_side_by_side(draw, b, step, ins, pre):
    """Partial (Figure 1): groups of f batch items placed side by side along a spatial axis."""
    x = b.shapes[ins[0]]
    opts = [(a, f) for a, f in _same_padded_axes(step.params, x) if x[0] % f == 0]
    if not opts:
        return None
    a, f = draw(st.sampled_from(opts))
    (w,) = _weights(b, step.params, pre)
    y = _conv(b, _rt(b, ins[0], batch_into_axis(x, f, 2 + a, True)), w, step.params)
    return (_rt(b, y, axis_into_batch(b.shapes[y], f, 2 + a, True)),)


def rw_conv_interleave_batch(draw, b, step, ins, pre):
    """Exact: f batch items interleaved along an axis, dilation and pads scaled by f."""
    p = step.params
    x = b.shapes[ins[0]]
    nsp = len(p["strides"])
    opts = [(a, f) for a in range(nsp) for f in FACTORS if p["strides"][a] == 1 and x[0] % f == 0]
    if not opts:
        return None
    a, f = draw(st.sampled_from(opts))
    pads = _set(_set(p["pads"], a, f * p["pads"][a]), nsp + a, f * p["pads"][nsp + a])
    (w,) = _weights(b, p, pre)
    y = _conv(b, _rt(b, ins[0], batch_into_axis(x, f, 2 + a, False)), w, p, pads=pads,
              dilations=_set(p["dilations"], a, f * p["dilations"][a]))
    return (_rt(b, y, axis_into_batch(b.shapes[y], f, 2 + a, False)),)


def rw_conv_space_to_batch(draw, b, step, ins, pre):
    """Exact (Figure 3): residues mod f of a dilated axis moved into the batch."""
    p = step.params
    x = b.shapes[ins[0]]
    nsp = len(p["strides"])
    opts = [(a, f) for a in range(nsp) for f in FACTORS if p["strides"][a] == 1
            and _kernel(p, a) > 1 and p["dilations"][a] % f == 0]
    if not opts:
        return None
    a, f = draw(st.sampled_from(opts))
    ax, n = 2 + a, x[2 + a]
    pb, pe, d = p["pads"][a], p["pads"][nsp + a], p["dilations"][a]
    (w,) = _weights(b, p, pre)
    if pb % f == 0 and pe % f == 0 and n % f == 0 and draw(st.booleans()):
        y = _conv(b, _rt(b, ins[0], axis_into_batch(x, f, ax, False)), w, p,
                  pads=_set(_set(p["pads"], a, pb // f), nsp + a, pe // f),
                  dilations=_set(p["dilations"], a, d // f))
        return (_rt(b, y, batch_into_axis(b.shapes[y], f, ax, False)),)
    extra = -(n + pb + pe) % f
    xp = b.pad(ins[0], _axis_pad(len(x), ax, pb, pe + extra))
    y = _conv(b, _rt(b, xp, axis_into_batch(b.shapes[xp], f, ax, False)), w, p,
              pads=_set(_set(p["pads"], a, 0), nsp + a, 0), dilations=_set(p["dilations"], a, d // f))
    z = _rt(b, y, batch_into_axis(b.shapes[y], f, ax, False))
    length = conv_out_size(n, _kernel(p, a), 1, d, pb, pe)
    return (z if b.shapes[z][ax] == length else _axis_slice(b, z, ax, 0, length),)


def rw_conv_grid(draw, b, step, ins, pre):
    """Partial (Figure 3, in place): residues mod f of a dilated axis grouped in place."""
    p = step.params
    x = b.shapes[ins[0]]
    nsp = len(p["strides"])
    opts = [(a, f) for a, f in _same_padded_axes(p, x) if p["dilations"][a] % f == 0
            and x[2 + a] % f == 0 and p["pads"][a] % f == 0 and p["pads"][nsp + a] % f == 0]
    if not opts:
        return None
    a, f = draw(st.sampled_from(opts))
    (w,) = _weights(b, p, pre)
    pads = _set(_set(p["pads"], a, p["pads"][a] // f), nsp + a, p["pads"][nsp + a] // f)
    y = _conv(b, _rt(b, ins[0], group_residues(x, f, 2 + a)), w, p, pads=pads,
              dilations=_set(p["dilations"], a, p["dilations"][a] // f))
    return (_rt(b, y, group_residues(b.shapes[y], f, 2 + a, inverse=True)),)


def rw_stride_as_slice(draw, b, step, ins, pre):
    """Exact, or wrong when shifted: a stride done by a strided SLICE of a stride-1 result."""
    p = step.params
    axes = [a for a, s in enumerate(p["strides"]) if s > 1]
    if not axes:
        return None
    a = draw(st.sampled_from(axes))
    s, nsp = p["strides"][a], len(p["strides"])
    full = EMIT[step.kind](b, ins, {**p, "strides": _set(p["strides"], a, 1)}, pre)[0]
    d = p["dilations"][a] if "dilations" in p else 1
    length = conv_out_size(b.shapes[ins[0]][2 + a], _kernel(p, a), s, d, p["pads"][a],
                           p["pads"][nsp + a])
    start = 1 if draw(st.booleans()) and 1 + (length - 1) * s < b.shapes[full][2 + a] else 0
    return (_axis_slice(b, full, 2 + a, start, length, s),)


def rw_avgpool_count_flip(draw, b, step, ins, pre):
    """Partial where padded, exact without pads: ``count_include_pad`` flipped."""
    p = step.params
    return EMIT["avgpool"](b, ins, {**p, "count_include_pad": not p["count_include_pad"]}, pre)


def rw_avgpool_explicit_pad(draw, b, step, ins, pre):
    """Exact when padding counts, partial otherwise: the pool's padding done by a PAD node."""
    p = step.params
    if not any(p["pads"]):
        return None
    nsp = len(p["kernel"])
    xp = b.pad(ins[0], _spatial_pads(p, nsp))
    return EMIT["avgpool"](b, [xp], {**p, "pads": (0,) * (2 * nsp)}, pre)


def rw_slice_shift(draw, b, step, ins, pre):
    """Wrong: a slice start moved by one."""
    p = step.params
    x = b.shapes[ins[0]]
    moves = [(d, m) for d, (n, s, t, k) in enumerate(zip(x, p["starts"], p["steps"], p["sizes"]))
             for m in (-1, 1) if 0 <= s + m and s + m + (k - 1) * t < n]
    if not moves:
        return None
    d, m = draw(st.sampled_from(moves))
    return EMIT["slice"](b, ins, {**p, "starts": _set(p["starts"], d, p["starts"][d] + m)}, pre)


def rw_pad_edge_moved(draw, b, step, ins, pre):
    """Wrong: one unit of padding moved to the other side of an axis."""
    pads, r = step.params["pads"], len(b.shapes[ins[0]])
    moves = [(d, -1) for d in range(r) if pads[d] >= 1] + [(d, 1) for d in range(r) if pads[r + d] >= 1]
    if not moves:
        return None
    d, m = draw(st.sampled_from(moves))
    return (b.pad(ins[0], _set(_set(pads, d, pads[d] + m), r + d, pads[r + d] - m)),)


def rw_split_via_slices(draw, b, step, ins, pre):
    """Exact, or wrong when one piece is shifted by one: a SPLIT as SLICEs."""
    axis, sizes = step.params["axis"], step.params["sizes"]
    n = b.shapes[ins[0]][axis]
    starts = list(np.cumsum((0,) + sizes[:-1]))
    if draw(st.booleans()):
        k = draw(st.integers(0, len(sizes) - 1))
        starts[k] += -1 if starts[k] + sizes[k] == n else 1
    return tuple(_axis_slice(b, ins[0], axis, int(s), k) for s, k in zip(starts, sizes))


def rw_concat_permuted(draw, b, step, ins, pre):
    """Wrong unless the pieces agree: concatenation operands in another order."""
    order = draw(st.permutations(ins))
    return (b.concat(order if order != ins else ins[::-1], step.params["axis"]),)


def rw_concat_as_pad_add(draw, b, step, ins, pre):
    """Exact: a concatenation as a sum of zero-padded pieces."""
    axis = step.params["axis"]
    r = len(b.shapes[ins[0]])
    total = sum(b.shapes[t][axis] for t in ins)
    acc, offset = None, 0
    for t in ins:
        n = b.shapes[t][axis]
        piece = b.pad(t, _axis_pad(r, axis, offset, total - offset - n))
        acc = piece if acc is None else b.add(acc, piece)
        offset += n
    return (acc,)


def rw_transpose_compose(draw, b, step, ins, pre):
    """Exact: a transpose as two transposes."""
    perm = step.params["perm"]
    first = tuple(draw(st.permutations(range(len(perm)))))
    inv = np.argsort(first)
    return (b.transpose(b.transpose(ins[0], first), tuple(int(inv[q]) for q in perm)),)


def rw_transpose_wrong(draw, b, step, ins, pre):
    """Partial (equal on the diagonal): two output axes of equal length swapped."""
    perm = step.params["perm"]
    out = b.shapes[ins[0]]
    pairs = [(i, j) for i in range(len(perm)) for j in range(i + 1, len(perm))
             if out[perm[i]] == out[perm[j]]]
    if not pairs:
        return None
    i, j = draw(st.sampled_from(pairs))
    swapped = list(perm)
    swapped[i], swapped[j] = swapped[j], swapped[i]
    return (b.transpose(ins[0], tuple(swapped)),)


#: Every rewrite: name -> (step kinds it applies to, or None for any; function).
REWRITES: dict[str, tuple[tuple[str, ...] | None, Callable]] = {
    "swap_operands":          (("add", "mul"), rw_swap_operands),
    "elementwise_regrouped":  (("add", "mul", "batchnorm"), rw_elementwise_regrouped),
    "batchnorm_as_mul_add":   (("batchnorm",), rw_batchnorm_as_mul_add),
    "matmul_transposed":      (("matmul",), rw_matmul_transposed),
    "matmul_split_k":         (("matmul",), rw_matmul_split_k),
    "matmul_fold_batch":      (("matmul",), rw_matmul_fold_batch),
    "conv_batch_split":       (("conv",), rw_conv_batch_split),
    "conv_group_split":       (("conv",), rw_conv_group_split),
    "conv_explicit_pad":      (("conv",), rw_conv_explicit_pad),
    "conv_edge_replicated":   (("conv",), rw_conv_edge_replicated),
    "conv_pad_shift":         (("conv",), rw_conv_pad_shift),
    "conv_side_by_side":      (("conv",), rw_conv_side_by_side),
    "conv_interleave_batch":  (("conv",), rw_conv_interleave_batch),
    "conv_space_to_batch":    (("conv",), rw_conv_space_to_batch),
    "conv_grid":              (("conv",), rw_conv_grid),
    "stride_as_slice":        (("conv", "avgpool"), rw_stride_as_slice),
    "avgpool_count_flip":     (("avgpool",), rw_avgpool_count_flip),
    "avgpool_explicit_pad":   (("avgpool",), rw_avgpool_explicit_pad),
    "slice_shift":            (("slice",), rw_slice_shift),
    "pad_edge_moved":         (("pad",), rw_pad_edge_moved),
    "split_via_slices":       (("split",), rw_split_via_slices),
    "concat_permuted":        (("concat",), rw_concat_permuted),
    "concat_as_pad_add":      (("concat",), rw_concat_as_pad_add),
    "transpose_compose":      (("transpose",), rw_transpose_compose),
    "transpose_wrong":        (("transpose",), rw_transpose_wrong),
    "weight_perturbed":       (None, rw_weight_perturbed),
    "roundtrip_wrong":        (None, rw_roundtrip_wrong),
    "roundtrip":              (None, rw_roundtrip),
}
#: Drawn more often: the paper's regroupings of convolutions.
FAVOURED = ("conv_side_by_side", "conv_interleave_batch", "conv_space_to_batch", "conv_grid",
            "conv_edge_replicated")
#: Tried last: a round trip fits every step.
FALLBACK = [("roundtrip", rw_roundtrip)]


@st.composite
def small_programs(draw):
    """A random chain over every multi-linear operator, on small shapes."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    b = ProgramBuilder()
    n, c, h = draw(st.integers(1, 2)), draw(st.sampled_from([2, 4])), draw(st.integers(4, 6))
    x = b.input("x", (n, c, h, h))
    ops = draw(st.lists(st.sampled_from(["conv", "pool", "pad", "slice", "transpose", "rt",
                                         "concat", "split", "bn", "mul", "add", "matmul", "update"]),
                        min_size=1, max_size=4))
    cur = x
    for op in ops:
        s = b.shapes[cur]
        if len(s) != 4:
            cur = b.reshape(cur, (1, 1, 1, -1))
            s = b.shapes[cur]
        if op == "conv":
            g = draw(st.sampled_from([g for g in (1, 2) if s[1] % g == 0]))
            k = draw(st.integers(1, min(3, s[2], s[3])))
            w = b.weight(b.fresh("w"), rng.standard_normal((2 * g, s[1] // g, k, k)))
            cur = b.conv(cur, w, strides=draw(st.integers(1, 2)), pads=draw(st.integers(0, 1)),
                         groups=g)
        elif op == "pool":
            k = draw(st.integers(1, min(2, s[2], s[3])))
            cur = b.avgpool(cur, k, 1, pads=draw(st.integers(0, k - 1)),
                            count_include_pad=draw(st.booleans()))
        elif op == "pad":
            cur = b.pad(cur, (0, 0, draw(st.integers(0, 2)), 1, 0, 1, 0, draw(st.integers(0, 2))))
        elif op == "slice" and s[3] > 2:
            cur = b.slice(cur, (0, 0, 0, 1), (s[0], s[1], s[2], s[3]), (1, 1, 2, 2))
        elif op == "transpose":
            cur = b.transpose(cur, (0, 1, 3, 2))
        elif op == "rt" and s[2] % 2 == 0:
            cur = b.reshape_transpose(cur, (s[0], s[1], s[2] // 2, 2, s[3]), (0, 3, 1, 2, 4),
                                      (s[0] * 2, s[1], s[2] // 2, s[3]))
        elif op == "concat":
            cur = b.concat([cur, x] if b.shapes[x][1:] == s[1:] else [cur, cur], 0)
        elif op == "split" and s[1] >= 2:
            cur = b.split(cur, 1, (1, s[1] - 1))[draw(st.integers(0, 1))]
        elif op == "bn":
            cur = b.batchnorm(cur, b.weight(b.fresh("s"), rng.standard_normal(s[1])),
                              b.weight(b.fresh("t"), rng.standard_normal(s[1])))
        elif op == "mul":
            cur = b.mul(cur, b.weight(b.fresh("m"), rng.standard_normal((1, s[1], 1, 1))))
        elif op == "add":
            cur = b.add(cur, cur)
        elif op == "matmul":
            cur = b.matmul(cur, b.weight(b.fresh("k"), rng.standard_normal((s[3], 3))))
        elif op == "update" and s[2] > 1:
            patch = b.slice(cur, (0, 0, 0, 0), (s[0], s[1], 1, s[3]))
            cur = b.update(cur, patch, (0, 0, s[2] - 1, 0))
    return b.build([cur])


@st.composite
def winograd_programs(draw):
    """``(program, None)``: a 3×3 stride-1 convolution that Winograd's F(4×4, 3×3) can take
    (dilation 1 or 2; sides of 4 to 14 positions at dilation 1 and 4 to 8 a class at 2, pads
    multiples of the dilation), maybe followed by a bias, a scale, a slice or a second such
    convolution.

    :func:`mutant_pairs` draws such convolutions seldom and on tiny maps; these have outputs of
    up to four tiles a side, so the lowering's tiling, slicing and dilation classes all run.
    """
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    b = ProgramBuilder()
    d = draw(st.sampled_from((1, 1, 2)))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    h, w = (d * draw(st.integers(4, 12 // d + 2)) for _ in range(2))
    cur = b.input("x", (n, c, h, w))
    for step in range(draw(st.integers(1, 2))):
        k = draw(st.integers(1, 4))
        pads = tuple(d * draw(st.integers(0, 2)) for _ in range(4))
        weight = b.weight(b.fresh("w"), rng.standard_normal((k, b.shapes[cur][1], 3, 3)))
        cur = b.conv(cur, weight, pads=pads, dilations=d)
        s = b.shapes[cur]
        if min(s[2:]) < 2 * d + 1 or s[2] % d or s[3] % d:
            break
        then = draw(st.sampled_from(("none", "bias", "scale", "slice")))
        if then == "bias":
            cur = b.add(cur, b.weight(b.fresh("bias"), rng.standard_normal((1, s[1], 1, 1))))
        elif then == "scale":
            cur = b.mul(cur, b.weight(b.fresh("scale"), rng.standard_normal((1, s[1], 1, 1))))
        elif then == "slice":
            cur = b.slice(cur, (0, 0, 0, d), s)
    return b.build([cur]), None


@st.composite
def conv3d_programs(draw):
    """``(program, None)``: a 3-D convolution (kernel sides 1 to 3, not 1 × 1 × 1; strides 1
    or 2; pads of 0 to 2 a side), maybe followed by a bias or a scale and a second such
    convolution: what ``--im2col`` offers in 3-D, on maps of 2 to 7 positions a side."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    b = ProgramBuilder()
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    cur = b.input("x", (n, c) + tuple(draw(st.integers(2, 7)) for _ in range(3)))
    for _ in range(draw(st.integers(1, 2))):
        sides = tuple(draw(st.integers(1, 3)) for _ in range(3))
        if sides == (1, 1, 1):
            sides = (3, 3, 3)
        pads = tuple(draw(st.integers(0, 2)) for _ in range(6))
        strides = tuple(draw(st.sampled_from((1, 1, 2))) for _ in range(3))
        full = [x + p + q for x, p, q in zip(b.shapes[cur][2:], pads[:3], pads[3:])]
        if any(f < k for f, k in zip(full, sides)):
            break
        k = draw(st.integers(1, 4))
        weight = b.weight(b.fresh("w"), rng.standard_normal((k, b.shapes[cur][1]) + sides))
        cur = b.conv(cur, weight, strides=strides, pads=pads)
        then = draw(st.sampled_from(("none", "bias", "scale")))
        if then != "none":
            op = b.add if then == "bias" else b.mul
            cur = op(cur, b.weight(b.fresh(then), rng.standard_normal((1, k, 1, 1, 1))))
    return b.build([cur]), None


def window_programs():
    """What ``--im2col`` offers: :func:`winograd_programs` (2-D, 3 × 3) or
    :func:`conv3d_programs`, one as often as the other."""
    return st.one_of(winograd_programs(), conv3d_programs())
