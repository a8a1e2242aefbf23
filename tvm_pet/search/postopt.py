"""PET's post-optimizations (paper 6.3): clean up what the per-subprogram search leaves behind.

Where it goes in the pipeline: after the optimizer has replaced every multi-linear subprogram by
its best (verified, corrected) candidate and the subprograms are stitched back together at the
non-linear operators, and before lowering to Relax. Neighbouring subprograms then often meet in
layout operators that undo each other (``transpose ... relu ... transpose back``).

Preconditions: a valid :class:`~tvm_pet.ir.node.Program` (any operators, opaque ones included).
Every rule is a pure function ``Program -> Program`` that applies its rewrite wherever it can and
returns the *same object* when nothing applies; program outputs keep their names; every result
passes :func:`~tvm_pet.ir.check.check_program`. The rules, by name (:data:`POST_OPTIMIZATIONS`):

``move_layout_across_elementwise``  layout(f(x)) -> f(layout(x)) for element-wise opaque f
``move_layout_across_constant``     layout(x + w) -> layout(x) + w' for a weight w (also x * w)
``eliminate_inverse_layouts``       a chain of layout nodes that is the identity disappears
``fuse_layout_chains``              layout2(layout1(x)) -> one layout node
``precompute_weights``              multi-linear nodes over constants become weights

Layout rewrites are checked exactly: a chain of bijective layout nodes is a permutation of the
elements, computed by running it on ``np.arange``; fused and eliminated chains are also checked
with the verifier before they are applied.

>>> from tvm_pet.ir import ProgramBuilder
>>> b = ProgramBuilder(); x = b.input("x", (2, 3))
>>> (r,) = b.opaque("Relu", [b.transpose(x, (1, 0))])
>>> program, applied = post_optimize(b.build([b.transpose(r, (1, 0), out="y")]))
>>> [n.describe() for n in program.nodes], applied
(['y = Relu(x; kind=Relu)'], ['move_layout_across_elementwise', 'eliminate_inverse_layouts'])
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from tvm_pet.errors import ProgramError, VerificationError
from tvm_pet.ir.builder import ProgramBuilder
from tvm_pet.ir.node import Node, Program, Shape, TensorSpec
from tvm_pet.ir.ops import BIJECTIVE_LAYOUT, MULTILINEAR, Op
from tvm_pet.ops.float_eval import FLOAT_RULES
from tvm_pet.verify.verifier import verify

#: Opaque kinds that are element-wise, shape-preserving and single-input: layout ops commute.
ELEMENTWISE_OPAQUE = frozenset({"Relu", "Sigmoid", "Tanh", "Erf", "Gelu", "Identity", "Exp"})
#: Most candidate transposes tried when expressing a fused layout as a plain TRANSPOSE.
MAX_TRANSPOSE_CANDIDATES = 64

Rule = Callable[[Program], Program]


# ---------------------------------------------------------------------------------------------
# Layout algebra: a chain of bijective layout nodes as a permutation of the elements
# ---------------------------------------------------------------------------------------------

def layout_index(chain: Sequence[Node], shape: Shape) -> np.ndarray:
    """Run ``chain`` on ``np.arange`` of ``shape``: ``out.flat[k] == in.flat[index.flat[k]]``."""
    value = np.arange(math.prod(shape)).reshape(shape)
    for node in chain:
        if node.op not in BIJECTIVE_LAYOUT:
            raise ProgramError(f"`{node.describe()}` is not a bijective layout operator")
        (value,) = FLOAT_RULES[node.op](node.attrs, [value])
    return value


def _strided_axes(flat: np.ndarray) -> list[tuple[int, int]] | None:
    """Split a flat permutation into (size, stride) output axes, inner first, or None."""
    axes, rest = [], flat
    while rest.size > 1:
        stride = int(rest[1] - rest[0])
        steps = np.diff(rest) != stride
        run = int(np.argmax(steps)) + 1 if steps.any() else rest.size
        if stride < 1 or rest.size % run:
            return None
        blocks = rest.reshape(-1, run)
        if not np.array_equal(blocks, blocks[:, :1] + stride * np.arange(run)):
            return None
        axes.append((run, stride))
        rest = blocks[:, 0]
    return axes


def _as_transpose(index: np.ndarray, in_shape: Shape) -> tuple[int, ...] | None:
    """A perm with ``arange(in_shape).transpose(perm) == index``, or None."""
    out_shape = index.shape
    if sorted(in_shape) != sorted(out_shape):
        return None
    groups = {d: [a for a, n in enumerate(in_shape) if n == d] for d in set(in_shape)}
    choices = [itertools.permutations(g) if d > 1 else [tuple(g)] for d, g in groups.items()]
    source = np.arange(index.size).reshape(in_shape)
    for tried, picks in enumerate(itertools.product(*choices)):
        if tried >= MAX_TRANSPOSE_CANDIDATES:
            return None
        queues = {d: list(p) for d, p in zip(groups, picks)}
        perm = tuple(queues[d].pop(0) for d in out_shape)
        if np.array_equal(source.transpose(perm), index):
            return perm
    return None


def layout_node(index: np.ndarray, in_shape: Shape, source: str, out: str) -> Node | None:
    """One layout node ``out = layout(source)`` realising the permutation ``index``, or None.

    The simplest kind that fits is chosen: RESHAPE when element order is kept, then TRANSPOSE,
    then RESHAPE_TRANSPOSE (reshape to ``split_shape``, transpose, reshape to ``index.shape``).
    """
    out_shape = tuple(index.shape)
    if np.array_equal(index.ravel(), np.arange(index.size)):
        return Node(Op.RESHAPE, (source,), (out,), {"shape": out_shape})
    perm = _as_transpose(index, in_shape)
    if perm is not None:
        return Node(Op.TRANSPOSE, (source,), (out,), {"perm": perm})
    axes = _strided_axes(index.ravel())
    if axes is None:
        return None
    by_stride = sorted(axes, key=lambda a: a[1])
    expected = 1
    for size, stride in by_stride:
        if stride != expected:
            return None
        expected *= size
    split = list(reversed(by_stride))                     # input axes, outermost first
    perm = tuple(split.index(a) for a in reversed(axes))  # output axes, outermost first
    node = Node(Op.RESHAPE_TRANSPOSE, (source,), (out,),
                {"split_shape": tuple(s for s, _ in split), "perm": perm, "shape": out_shape})
    if not np.array_equal(layout_index([node], in_shape), index):
        raise ProgramError(f"internal error: `{node.describe()}` does not realise the fused layout")
    return node


def _is_identity(index: np.ndarray, in_shape: Shape) -> bool:
    return tuple(index.shape) == tuple(in_shape) and np.array_equal(index.ravel(),
                                                                    np.arange(index.size))


#: Layout facts the verifier has accepted, by :func:`_fact_key` (at most :data:`MAX_FACTS`).
_accepted: dict[tuple, None] = {}
MAX_FACTS = 65536


def _fact_key(before: Sequence[Node], after: Sequence[Node], source: str, shape: Shape,
              out: str) -> tuple:
    """The structure of a layout fact: both chains with their tensors renamed in order of
    appearance, and the source's shape. Equal keys are the same fact on other names."""
    names: dict[str, str] = {source: "t0", out: "t1"}
    chains = []
    for chain in (before, after):
        renamed = []
        for n in chain:
            for t in (*n.inputs, *n.outputs):
                names.setdefault(t, f"t{len(names)}")
            renamed.append(Node(n.op, tuple(names[i] for i in n.inputs),
                                tuple(names[o] for o in n.outputs), n.attrs))
        chains.append(tuple(renamed))
    return (*chains, tuple(shape))


def _check_with_verifier(before: Sequence[Node], after: Sequence[Node], source: str,
                         shape: Shape, out: str) -> None:
    """Raise :class:`VerificationError` unless the layout chains ``before`` and ``after`` agree.

    A fact the verifier accepted once is not verified again (:func:`_fact_key`: the same
    chains on the same shape, under other tensor names, recur across layers and searches)."""
    key = _fact_key(before, after, source, shape, out)
    if key in _accepted:
        return
    _verify_layout_fact(before, after, source, shape, out)
    if len(_accepted) >= MAX_FACTS:
        _accepted.clear()
    _accepted[key] = None


def _verify_layout_fact(before: Sequence[Node], after: Sequence[Node], source: str,
                        shape: Shape, out: str) -> None:
    """The verifier's check of :func:`_check_with_verifier`, uncached."""
    spec = (TensorSpec(source, shape),)
    result = verify(Program(spec, {}, tuple(before), (out,)),
                    Program(spec, {}, tuple(after), (out,)))
    if not result.equivalent:
        raise VerificationError(
            f"the verifier rejects replacing {[n.describe() for n in before]} by "
            f"{[n.describe() for n in after]} although their element permutations agree; "
            f"this is a bug in the layout algebra or the verifier")


# ---------------------------------------------------------------------------------------------
# Helpers on programs
# ---------------------------------------------------------------------------------------------

def _private(program: Program, name: str) -> bool:
    """True when exactly one node reads ``name`` and it is not a program output."""
    return name not in program.outputs and len(program.consumers.get(name, ())) == 1


def _fresh(program: Program, hint: str) -> str:
    names = set(program.shapes)
    return ProgramBuilder(reserved=names).fresh(hint)


def _rename_inputs(node: Node, mapping: dict[str, str]) -> Node:
    if not any(i in mapping for i in node.inputs):
        return node
    return dataclasses.replace(node, inputs=tuple(mapping.get(i, i) for i in node.inputs))


def _to_fixed_point(step: Callable[[Program], Program | None]) -> Rule:
    """A rule applying ``step`` (one rewrite, or None) until it no longer applies."""
    def rule(program: Program) -> Program:
        while (changed := step(program)) is not None:
            program = changed
        return program
    rule.__name__ = rule.__qualname__ = step.__name__.lstrip("_")
    rule.__doc__ = step.__doc__
    return rule


# ---------------------------------------------------------------------------------------------
# The rules: each step applies one rewrite and returns the new program, or None
# ---------------------------------------------------------------------------------------------

def _is_elementwise_opaque(program: Program, node: Node | None) -> bool:
    return (node is not None and node.op is Op.OPAQUE
            and node.attrs["kind"] in ELEMENTWISE_OPAQUE
            and len(node.inputs) == 1 and len(node.outputs) == 1
            and program.shapes[node.inputs[0]] == program.shapes[node.outputs[0]])


def _move_layout_across_elementwise(program: Program) -> Program | None:
    """Move a layout node above the element-wise opaque node that feeds only it:
    ``layout(f(x)) -> f(layout(x))``, so that layout nodes of neighbouring subprograms meet."""
    position = {n.outputs[0]: k for k, n in enumerate(program.nodes)}
    for k, node in enumerate(program.nodes):
        if node.op not in BIJECTIVE_LAYOUT:
            continue
        src = program.producers.get(node.inputs[0])
        if not _is_elementwise_opaque(program, src) or not _private(program, src.outputs[0]):
            continue
        moved = _fresh(program, node.outputs[0])
        nodes = list(program.nodes)
        nodes[position[src.outputs[0]]] = Node(node.op, src.inputs, (moved,), node.attrs)
        nodes[k] = Node(Op.OPAQUE, (moved,), node.outputs,
                        src.attrs.replace(shapes=(program.shapes[node.outputs[0]],)))
        return program.replace(nodes=tuple(nodes))
    return None


def _compact(value: np.ndarray) -> np.ndarray:
    """``value`` with every axis along which it is constant reduced to size 1 (it broadcasts back
    to ``value``)."""
    for axis in range(value.ndim):
        first = np.take(value, [0], axis=axis)
        if value.shape[axis] > 1 and np.array_equal(value, np.broadcast_to(first, value.shape)):
            value = first
    return np.ascontiguousarray(value)


def _move_layout_across_constant(program: Program) -> Program | None:
    """Move a layout node above the ADD or MUL with a weight that feeds only it:
    ``layout(x + w) -> layout(x) + w'``, where ``w'`` is ``w`` broadcast to ``x``'s shape, put
    through the same layout, and compacted back to a broadcast (a per-channel bias stays one
    value per channel). Together with ``move_layout_across_elementwise`` this lets the layout
    nodes of neighbouring subprograms meet across ``bias + ReLU``."""
    for k, node in enumerate(program.nodes):
        if node.op not in BIJECTIVE_LAYOUT:
            continue
        src = program.producers.get(node.inputs[0])
        if (src is None or src.op not in (Op.ADD, Op.MUL) or not _private(program, src.output)
                or sum(i in program.weights for i in src.inputs) != 1):
            continue
        (w,) = [i for i in src.inputs if i in program.weights]
        (x,) = [i for i in src.inputs if i not in program.weights]
        shape = program.shapes[src.output]
        if program.shapes[x] != shape:
            continue                        # the weight must broadcast into x, not x into it
        full = np.broadcast_to(np.asarray(program.weights[w]), shape)
        (moved_w,) = FLOAT_RULES[node.op](node.attrs, [full])
        moved_w = _compact(np.asarray(moved_w)).astype(np.asarray(program.weights[w]).dtype)
        names = ProgramBuilder(reserved=set(program.shapes))
        moved, w_name = names.fresh(node.outputs[0]), names.fresh(w)
        before = [src, node]
        layout = Node(node.op, (x,), (moved,), node.attrs)
        op = Node(src.op, (moved, w_name) if src.inputs[0] == x else (w_name, moved),
                  node.outputs, src.attrs)
        _check_constant_move(before, [layout, op], x, program.shapes[x], node.output,
                             {w: program.weights[w], w_name: moved_w})
        nodes = list(program.nodes)
        nodes[nodes.index(src)] = layout
        nodes[k] = op
        weights = {**program.weights, w_name: moved_w}
        if len(program.consumers.get(w, ())) == 1 and w not in program.outputs:
            del weights[w]
        return program.replace(nodes=tuple(nodes), weights=weights)
    return None


def _check_constant_move(before, after, source, shape, out, weights) -> None:
    """Raise unless ``before`` and ``after`` agree exactly on random data: both add (or
    multiply) the same numbers, only permuted, so float results are bit-identical."""
    from tvm_pet.verify.interpreter import evaluate
    x = {source: np.random.default_rng(0).standard_normal(shape)}
    results = []
    for chain in (before, after):
        used = {i for n in chain for i in n.inputs}
        program = Program((TensorSpec(source, shape),),
                          {k: v for k, v in weights.items() if k in used}, tuple(chain), (out,))
        results.append(evaluate(program, x)[out])
    if results[0].shape != results[1].shape or not np.array_equal(results[0], results[1]):
        raise VerificationError(
            f"moving {[n.describe() for n in before]} to {[n.describe() for n in after]} changes "
            f"the result; this is a bug in the layout algebra")


def _fuse_layout_chains(program: Program) -> Program | None:
    """Fuse two consecutive bijective layout nodes (the first read only by the second) into one
    RESHAPE, TRANSPOSE or RESHAPE_TRANSPOSE, when one node can express the composite."""
    for k, node in enumerate(program.nodes):
        first = program.producers.get(node.inputs[0]) if node.op in BIJECTIVE_LAYOUT else None
        if first is None or first.op not in BIJECTIVE_LAYOUT or not _private(program, first.output):
            continue
        source, shape = first.inputs[0], program.shapes[first.inputs[0]]
        fused = layout_node(layout_index([first, node], shape), shape, source, node.output)
        if fused is None:
            continue
        _check_with_verifier([first, node], [fused], source, shape, node.output)
        nodes = [fused if j == k else n for j, n in enumerate(program.nodes) if n is not first]
        return program.replace(nodes=tuple(nodes))
    return None


def _identity_chain(program: Program, first: Node) -> list[Node] | None:
    """The shortest chain of layout nodes from ``first`` whose composite is the identity."""
    shape = program.shapes[first.inputs[0]]
    chain = [first]
    while True:
        if _is_identity(layout_index(chain, shape), shape):
            return chain
        tail = chain[-1].output
        if not _private(program, tail) or program.consumers[tail][0].op not in BIJECTIVE_LAYOUT:
            return None
        chain.append(program.consumers[tail][0])


def _eliminate_inverse_layouts(program: Program) -> Program | None:
    """Remove a chain of layout nodes whose composite is the identity and read its input instead;
    a chain ending in a program output becomes one identity RESHAPE keeping the output's name."""
    for first in program.nodes:
        chain = _identity_chain(program, first) if first.op in BIJECTIVE_LAYOUT else None
        if chain is None:
            continue
        source, end = first.inputs[0], chain[-1].output
        shape = program.shapes[source]
        keep = Node(Op.RESHAPE, (source,), (end,), {"shape": shape})
        if end in program.outputs and chain == [keep]:
            continue                         # already the simplest node defining an output
        _check_with_verifier(chain, [keep], source, shape, end)
        dropped = set(chain)
        if end in program.outputs:
            nodes = [keep if n is chain[-1] else n for n in program.nodes
                     if n not in dropped or n is chain[-1]]
        else:
            nodes = [_rename_inputs(n, {end: source}) for n in program.nodes if n not in dropped]
        return program.replace(nodes=tuple(nodes))
    return None


def precompute_weights(program: Program) -> Program:
    """Evaluate (float32) every multi-linear node whose inputs are all weights or constants,
    turning its outputs into weights of the same names; drop the weights and FILL nodes left dead.

    Nodes defining a program output are kept (a program output stays a node's output).
    """
    values = {name: np.asarray(v, np.float32) for name, v in program.weights.items()}
    weights, nodes, folded = dict(program.weights), [], False
    for node in program.nodes:
        constant = node.op in MULTILINEAR and all(i in values for i in node.inputs)
        if constant:
            outs = FLOAT_RULES[node.op](node.attrs, [values[i] for i in node.inputs])
            values.update((o, np.asarray(v, np.float32)) for o, v in zip(node.outputs, outs))
        if not constant or node.op is Op.FILL or any(o in program.outputs for o in node.outputs):
            nodes.append(node)
            continue
        weights.update((o, values[o]) for o in node.outputs)
        folded = True
    if not folded:
        return program
    used = {i for n in nodes for i in n.inputs} | set(program.outputs)
    nodes = [n for n in nodes if n.op is not Op.FILL or any(o in used for o in n.outputs)]
    used = {i for n in nodes for i in n.inputs} | set(program.outputs)
    return program.replace(nodes=tuple(nodes),
                           weights={k: v for k, v in weights.items() if k in used})


move_layout_across_elementwise = _to_fixed_point(_move_layout_across_elementwise)
move_layout_across_constant = _to_fixed_point(_move_layout_across_constant)
fuse_layout_chains = _to_fixed_point(_fuse_layout_chains)
eliminate_inverse_layouts = _to_fixed_point(_eliminate_inverse_layouts)

#: The post-optimizations by name, in the order :func:`post_optimize` tries them.
POST_OPTIMIZATIONS: dict[str, Rule] = {
    "move_layout_across_elementwise": move_layout_across_elementwise,
    "move_layout_across_constant":    move_layout_across_constant,
    "eliminate_inverse_layouts":      eliminate_inverse_layouts,
    "fuse_layout_chains":             fuse_layout_chains,
    "precompute_weights":             precompute_weights,
}


def post_optimize(program: Program, rules: dict[str, Rule] | None = None,
                  max_rounds: int = 100) -> tuple[Program, list[str]]:
    """Apply the post-optimizations until none changes the program.

    Args:
        program: the stitched, optimized program.
        rules: the rules to run, by name (default :data:`POST_OPTIMIZATIONS`).
        max_rounds: most passes over all rules; running out means the rules cycle (a bug).

    Returns:
        The final program and the names of the rules that changed it, in the order applied.

    Raises:
        ProgramError: the rules still change the program after ``max_rounds`` passes.
    """
    rules = POST_OPTIMIZATIONS if rules is None else rules
    applied: list[str] = []
    for _ in range(max_rounds):
        before = len(applied)
        for name, rule in rules.items():
            result = rule(program)
            if result is not program:
                program = result
                applied.append(name)
        if len(applied) == before:
            return program, applied
    raise ProgramError(f"post-optimizations still change the program after {max_rounds} rounds "
                       f"(last applied: {applied[-4:]}); the rules cycle")
