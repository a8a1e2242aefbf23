"""Partitioning (paper 6.1): split a program at non-linear operators into multi-linear subprograms.

A subprogram is a maximal set of multi-linear nodes connected through tensors that multi-linear
nodes produce. Its inputs are the tensors it reads but does not produce (program inputs, outputs
of opaque nodes); its outputs are the tensors it produces that something outside reads (opaque
nodes, the program's outputs). Independent subprograms (neither reads what the other produces)
that share an input, or that apply the same operators to same-shaped tensors, are also offered as
one merged subprogram, so that the generator can merge them (Q/K/V matmuls, Inception branches).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tvm_pet.ir.node import Node, Program, TensorSpec, free_name
from tvm_pet.ir.ops import MULTILINEAR, REDUCING


@dataclasses.dataclass(frozen=True)
class Subprogram:
    """A standalone multi-linear program cut out of a larger one.

    Attributes:
        name: a readable name (``sub0``, ``sub0+sub3`` for a merge).
        program: the subprogram itself; its inputs and outputs keep the enclosing program's names.
        nodes: positions, in the enclosing program, of the nodes it covers.
        parts: names of the subprograms merged into it (itself alone when not merged).
    """

    name: str
    program: Program
    nodes: tuple[int, ...]
    parts: tuple[str, ...]

    @property
    def is_merge(self) -> bool:
        return len(self.parts) > 1


def searchable_subprograms(program: Program) -> list[Subprogram]:
    """The multi-linear subprograms of ``program`` that the search has anything to rewrite in,
    unmerged: those with a reducing operator (conv, matmul, pool), which every subset it
    searches holds (``optimizer.operator_subsets``); a lone Pad has none. Both coverage counts
    (``tvm-pet optimize``'s report and the Relax pass's) count these."""
    return [s for s in partition(program, max_merge=1)
            if any(program.nodes[k].op in REDUCING for k in s.nodes)]


def _components(program: Program) -> list[list[int]]:
    """Maximal connected sets of multi-linear nodes (union-find over produced tensors)."""
    linear = [k for k, n in enumerate(program.nodes) if n.op in MULTILINEAR]
    parent = {k: k for k in linear}

    def find(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    producer = {o: k for k in linear for o in program.nodes[k].outputs}
    for k in linear:
        for i in program.nodes[k].inputs:
            if i in producer:
                parent[find(k)] = find(producer[i])
    groups: dict[int, list[int]] = {}
    for k in linear:
        groups.setdefault(find(k), []).append(k)
    return [sorted(g) for g in groups.values()]


def extract(program: Program, nodes: Sequence[int], name: str,
            parts: Sequence[str] | None = None) -> Subprogram:
    """The subprogram made of ``nodes`` (positions in ``program``), as a standalone program."""
    chosen = [program.nodes[k] for k in sorted(nodes)]
    produced = {o for n in chosen for o in n.outputs}
    inside = set(sorted(nodes))
    read_outside = {i for k, n in enumerate(program.nodes) if k not in inside for i in n.inputs}
    inputs, weights = [], {}
    for n in chosen:
        for i in n.inputs:
            if i in produced or i in weights or any(t.name == i for t in inputs):
                continue
            if i in program.weights:
                weights[i] = program.weights[i]
            else:
                inputs.append(TensorSpec(i, program.shapes[i]))
    outputs = [o for n in chosen for o in n.outputs
               if o in read_outside or o in program.outputs]
    sub = Program(tuple(inputs), weights, tuple(chosen), tuple(outputs), name)
    return Subprogram(name, sub, tuple(sorted(nodes)), tuple(parts or (name,)))


def _depends(program: Program, a: Sequence[int], b: Sequence[int]) -> bool:
    """True when some node of ``b`` (transitively) reads an output of ``a``."""
    reach = {o for k in a for o in program.nodes[k].outputs}
    for k in range(min(a), len(program.nodes)):
        node = program.nodes[k]
        if any(i in reach for i in node.inputs):
            if k in b:
                return True
            reach.update(node.outputs)
    return False


def _signature(program: Program, nodes: Sequence[int]) -> tuple:
    return tuple((program.nodes[k].op, tuple(program.shapes[i] for i in program.nodes[k].inputs))
                 for k in nodes)


def partition(program: Program, max_merge: int = 3) -> list[Subprogram]:
    """Multi-linear subprograms of ``program``, then merge candidates of independent ones.

    Args:
        program: any program (opaque nodes allowed).
        max_merge: most subprograms merged into one candidate.

    Returns:
        The subprograms in program order (``sub0``, ``sub1``, ...), followed by merged candidates
        of independent subprograms that contain a reducing operator (conv, matmul, pooling) and
        either read a common input or have the same operators on the same shapes.
    """
    comps = sorted(_components(program))
    subs = [extract(program, c, f"sub{i}") for i, c in enumerate(comps)]
    heavy = [i for i, c in enumerate(comps) if any(program.nodes[k].op in REDUCING for k in c)]
    merges, seen = [], set()
    for i in heavy:
        group = [i]
        for j in heavy:
            if j <= i or len(group) >= max_merge:
                continue
            related = (set(subs[i].program.input_names) & set(subs[j].program.input_names)) or \
                _signature(program, comps[i]) == _signature(program, comps[j])
            independent = all(not _depends(program, comps[g], comps[j]) and
                              not _depends(program, comps[j], comps[g]) for g in group)
            if related and independent:
                group.append(j)
        key = tuple(group)
        if len(group) > 1 and key not in seen:
            seen.add(key)
            nodes = sorted(k for g in group for k in comps[g])
            merges.append(extract(program, nodes, "+".join(f"sub{g}" for g in group),
                                  [f"sub{g}" for g in group]))
    return subs + merges


def replace_subprogram(program: Program, sub: Subprogram, new: Program) -> Program:
    """``program`` with the nodes of ``sub`` replaced by the nodes of ``new``.

    ``new`` must have the subprogram's inputs and outputs (names and shapes); its weights join the
    program's, and its intermediate tensors are renamed if they clash. The result is in
    topological order.
    """
    taken = set(program.shapes)
    rename = {}
    for node in new.nodes:
        for o in node.outputs:
            if o not in sub.program.outputs and o in taken:
                rename[o] = free_name(o, taken)
                taken.add(rename[o])
    weights = dict(program.weights)
    for k, v in new.weights.items():
        if k in weights and weights[k] is not v and weights[k].shape != v.shape:
            raise ValueError(f"weight {k!r} of the replacement clashes with the program's")
        weights.setdefault(k, v)
    fresh = [Node(n.op, tuple(rename.get(i, i) for i in n.inputs),
                  tuple(rename.get(o, o) for o in n.outputs), n.attrs) for n in new.nodes]
    first = min(sub.nodes)
    drop = set(sub.nodes)
    before = [n for k, n in enumerate(program.nodes) if k < first and k not in drop]
    after = [n for k, n in enumerate(program.nodes) if k > first and k not in drop]
    nodes = _toposort(before + fresh + after, set(program.input_names) | set(weights))
    used = {i for n in nodes for i in n.inputs}
    weights = {k: v for k, v in weights.items() if k in used or k in program.outputs}
    return program.replace(nodes=tuple(nodes), weights=weights)


def feedback(program: Program, sub: Subprogram) -> frozenset[tuple[str, str]]:
    """The ``(output, input)`` pairs of ``sub`` where ``program`` computes that input, outside
    ``sub``, from that output: through a non-linear operator, as in SiLU's ``x * sigmoid(x)``
    when ``sub`` computes ``x`` and the product. A replacement that computes such an output from
    such an input (:func:`closes_a_loop`) would make a cycle."""
    inside = set(sub.nodes)
    reach: dict[str, frozenset[str]] = {o: frozenset({o}) for o in sub.program.outputs}
    for k, node in enumerate(program.nodes):
        if k not in inside:
            src = frozenset().union(*(reach.get(i, ()) for i in node.inputs))
            if src:
                reach.update((o, src) for o in node.outputs)
    return frozenset((o, i) for i in sub.program.input_names for o in reach.get(i, ()))


def closes_a_loop(new: Program, pairs: frozenset[tuple[str, str]]) -> bool:
    """Whether ``new`` computes an output of a pair of :func:`feedback` from its input. The
    verifier cannot see it (it takes the inputs as independent): such a mutant computes the
    same function, but in the model it would read what it computes."""
    if not pairs:
        return False
    reads: dict[str, frozenset[str]] = {i: frozenset({i}) for i in new.input_names}
    for node in new.nodes:
        src = frozenset().union(*(reads.get(i, ()) for i in node.inputs))
        reads.update((o, src) for o in node.outputs)
    return any(i in reads.get(o, ()) for o, i in pairs)


def _toposort(nodes: Sequence[Node], available: set[str]) -> list[Node]:
    """Stable topological order (nodes keep their relative order where dependencies allow)."""
    done, out, pending = set(available), [], list(nodes)
    while pending:
        for k, n in enumerate(pending):
            if all(i in done for i in n.inputs):
                out.append(n)
                done.update(n.outputs)
                del pending[k]
                break
        else:
            raise ValueError("the replacement makes a cycle or reads an undefined tensor")
    return out
