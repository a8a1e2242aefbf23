"""Correction fusion (paper 5.3): one operator instead of a mutant kernel and its correction.

Two CONV nodes that apply the same weight tensor with the same strides, dilations and groups are
fused: both inputs are padded explicitly, concatenated (along the batch axis when everything else
matches, or along the last spatial axis when only that differs), convolved once without padding,
and the two results are sliced back out. Columns computed across the seam are discarded, so the
result is exact. Every fused program can be (and in the tests is) checked by the verifier.
"""
from __future__ import annotations

from collections.abc import Sequence

from tvm_pet.ir.builder import ProgramBuilder
from tvm_pet.ir.node import Node, Program
from tvm_pet.ir.ops import Op


def _ancestors(program: Program, name: str) -> set[str]:
    seen, stack = set(), [name]
    while stack:
        t = stack.pop()
        node = program.producers.get(t)
        if node is not None and t not in seen:
            seen.add(t)
            stack.extend(node.inputs)
    return seen


def _key(node: Node):
    a = node.attrs
    return (node.inputs[1], a["strides"], a["dilations"], a["groups"])


def _fusable_pairs(program: Program) -> list[tuple[Node, Node]]:
    convs = [n for n in program.nodes if n.op is Op.CONV and n.inputs[1] in program.weights]
    pairs, used = [], set()
    for i, a in enumerate(convs):
        for b in convs[i + 1:]:
            if a.output in used or b.output in used or _key(a) != _key(b):
                continue
            if a.output in _ancestors(program, b.inputs[0]) or \
                    b.output in _ancestors(program, a.inputs[0]):
                continue
            if _concat_axis(program, a, b) is not None:
                pairs.append((a, b))
                used |= {a.output, b.output}
    return pairs


def _padded(program: Program, node: Node) -> tuple[int, ...]:
    x = program.shapes[node.inputs[0]]
    pads = node.attrs["pads"]
    nsp = len(x) - 2
    return x[:2] + tuple(x[2 + i] + pads[i] + pads[nsp + i] for i in range(nsp))


def _concat_axis(program: Program, a: Node, b: Node) -> int | None:
    sa, sb = _padded(program, a), _padded(program, b)
    if sa[1:] == sb[1:]:
        return 0
    last = len(sa) - 1
    if sa[:last] == sb[:last] and sa[last] % a.attrs["strides"][-1] == 0:
        return last
    return None


def fuse_corrections(program: Program) -> Program:
    """Fuse pairs of convolutions that share a weight (see the module docstring).

    Args:
        program: any program, typically a corrected candidate.

    Returns:
        An equivalent program with one CONV per fused pair (the program itself if nothing fuses).
    """
    pairs = _fusable_pairs(program)
    if not pairs:
        return program
    fused = {n.output: (a, b) for a, b in pairs for n in (a, b)}
    b = ProgramBuilder(program.name, prefix="fused",
                       reserved={n for node in program.nodes for n in node.outputs})
    for t in program.inputs:
        b.input(t.name, t.shape)
    for k, v in program.weights.items():
        b.weight(k, v)
    pending = list(program.nodes)
    done_pairs: set[str] = set()
    defined = set(program.input_names) | set(program.weights)
    while pending:
        progress = False
        for node in list(pending):
            group: Sequence[Node] = fused.get(node.outputs[0], (node,))
            if not all(i in defined for n in group for i in n.inputs):
                continue
            if len(group) == 2 and group[0].output not in done_pairs:
                _emit_fused(b, program, *group)
                done_pairs.add(group[0].output)
            elif len(group) == 1:
                b.node(node.op, node.inputs, node.attrs, node.outputs)
            for n in group:
                if n in pending:
                    pending.remove(n)
                defined |= set(n.outputs)
            progress = True
        if not progress:  # cannot happen: pairs never depend on each other
            raise AssertionError("fusion made a cycle")
    return b.build(program.outputs)


def _emit_fused(b: ProgramBuilder, program: Program, first: Node, second: Node) -> None:
    axis = _concat_axis(program, first, second)
    parts = []
    for node in (first, second):
        x, pads = node.inputs[0], node.attrs["pads"]
        if any(pads):
            rank = len(program.shapes[x])
            nsp = rank - 2
            x = b.pad(x, (0, 0) + tuple(pads[:nsp]) + (0, 0) + tuple(pads[nsp:]))
        parts.append(x)
    joined = b.concat(parts, axis)
    y = b.node(Op.CONV, [joined, first.inputs[1]], first.attrs.replace(
        pads=(0,) * len(first.attrs["pads"])))[0]
    if axis == 0:
        sizes = (program.shapes[first.inputs[0]][0], program.shapes[second.inputs[0]][0])
        b.node(Op.SPLIT, [y], {"axis": 0, "sizes": sizes}, [first.output, second.output])
        return
    offset = 0
    stride = first.attrs["strides"][-1]
    for k, node in enumerate((first, second)):
        out = program.shapes[node.output]
        start = (0,) * (len(out) - 1) + (offset,)
        b.node(Op.SLICE, [y], {"starts": start, "steps": (1,) * len(out), "sizes": out},
               [node.output])
        offset = b.shapes[parts[0]][-1] // stride
