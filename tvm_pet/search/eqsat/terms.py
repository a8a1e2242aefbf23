"""The e-graph's language: one e-node per operator application, keyed by operator, attributes
and input shapes, built on egglog.

Grammar of the terms (egglog sorts :class:`Tensor` and :class:`Args`)::

    tensor ::= Tensor.input(name)            a runtime input of the model
             | Tensor.weight(wkey)           a weight, by content (equal values: one leaf)
             | Tensor.op1(key, tensor)       an operator with one input
             | Tensor.op2(key, tensor, tensor)
             | Tensor.opn(key, args)         an operator with none or three and more inputs
             | tensor.get(k)                 output k of an operator with several outputs
    args   ::= Args.nil() | Args.cons(tensor, args)

A ``key`` names a :class:`NodeSpec`: the operator, its attributes and its input and output
shapes, so equal keys on equal e-classes are the same computation and egglog hash-conses them:
two subprograms that apply the same operators to the same tensors and equal weights are one
e-class. A ``wkey`` names a weight's values (:class:`Registry` holds both). Operators are taken
as functions of their inputs; an OPAQUE operator without inputs, or one that draws random
numbers, keeps its output names in its key, so that it is never shared.

:class:`ProgramEGraph` inserts a program (each tensor let-bound, so a deep DAG stays linear) and
unions each output of a subprogram with the same output of a verified mutant.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
from egglog import EGraph, Expr, StringLike, i64Like, union

from tvm_pet.ir.node import Attrs, Node, Program, Shape, WeightKeys, free_name
from tvm_pet.ir.ops import Op

#: the deepest an expression handed to egglog nests (deeper terms are let-bound)
NEST_LIMIT = 48


class Tensor(Expr):
    """A tensor (or, under ``get``, the tuple of an operator with several outputs)."""

    @classmethod
    def input(cls, name: StringLike) -> Tensor: ...

    @classmethod
    def weight(cls, wkey: StringLike) -> Tensor: ...

    @classmethod
    def op1(cls, key: StringLike, a: Tensor) -> Tensor: ...

    @classmethod
    def op2(cls, key: StringLike, a: Tensor, b: Tensor) -> Tensor: ...

    @classmethod
    def opn(cls, key: StringLike, args: Args) -> Tensor: ...

    def get(self, k: i64Like) -> Tensor: ...


class Args(Expr):
    """The inputs of an ``opn`` node, as a list."""

    @classmethod
    def nil(cls) -> Args: ...

    @classmethod
    def cons(cls, head: Tensor, tail: Args) -> Args: ...


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    """What an e-node's key stands for: ``outputs = op(inputs; attrs)`` on these shapes."""

    op: Op
    attrs: Attrs
    in_shapes: tuple[Shape, ...]
    out_shapes: tuple[Shape, ...]
    unique: tuple[str, ...] = ()  # output names of an OPAQUE node never shared (see above)

    @property
    def arity(self) -> int:
        return len(self.in_shapes)

    def node(self, inputs: Sequence[str], outputs: Sequence[str]) -> Node:
        """The IR node this spec describes, on tensors of these names."""
        return Node(self.op, tuple(inputs), tuple(outputs), self.attrs)

    @staticmethod
    def of(program: Program, node: Node) -> "NodeSpec":
        shapes = program.shapes
        unique = node.outputs if node.op is Op.OPAQUE and (
            not node.inputs or "random" in node.attrs["kind"].lower()) else ()
        return NodeSpec(node.op, node.attrs, tuple(shapes[i] for i in node.inputs),
                        tuple(shapes[o] for o in node.outputs), unique)


class Registry:
    """The keys of one e-graph: node specs and weights, each under a short string.

    Weights are keyed by content (:class:`~tvm_pet.ir.node.WeightKeys`), as the verifier
    identifies them; the first name a weight had is kept for the programs extracted.
    """

    def __init__(self, weight_keys: WeightKeys | None = None):
        self.weight_keys = weight_keys or WeightKeys()
        self.specs: dict[str, NodeSpec] = {}
        self._spec_ids: dict[NodeSpec, str] = {}
        self.weights: dict[str, np.ndarray] = {}
        self.weight_names: dict[str, str] = {}
        self._weight_ids: dict[str, str] = {}
        self._reserved: set[str] = set()
        self.fresh: list[str] = []  # keys made since the last call of :meth:`take_fresh`

    def key(self, spec: NodeSpec) -> str:
        """The key of ``spec`` (a new one the first time)."""
        found = self._spec_ids.get(spec)
        if found is None:
            found = f"n{len(self.specs)}"
            self._spec_ids[spec] = found
            self.specs[found] = spec
            self.fresh.append(found)
        return found

    def reserve(self, names) -> None:
        """Tensor names no new weight may take."""
        self._reserved.update(names)

    def weight(self, array: np.ndarray, name: str, own: bool = False) -> str:
        """The key of a weight with ``array``'s values. The first weight with these values
        names it: by ``name`` when it is the program's ``own``, else by a free name from it."""
        content = self.weight_keys(array)
        found = self._weight_ids.get(content)
        if found is None:
            found = f"w{len(self.weights)}"
            if not own:
                name = free_name(name, self._reserved)
            self._reserved.add(name)
            self._weight_ids[content] = found
            self.weights[found] = array
            self.weight_names[found] = name
        return found

    def take_fresh(self) -> list[str]:
        """The node keys made since the last call."""
        fresh, self.fresh = self.fresh, []
        return fresh


@dataclasses.dataclass(frozen=True)
class Term:
    """One e-node as inserted, in Python: its constructor, literal and children (term ids).

    ``kind`` is one of ``input``, ``weight``, ``op`` (``lit`` is the key), ``get`` (``lit`` is
    the output index). Term ids index :attr:`ProgramEGraph.terms`; equal terms share an id.
    """

    kind: str
    lit: str | int
    children: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class Alternative:
    """A verified rewrite of one subprogram, as inserted into the e-graph.

    Attributes:
        subprogram: the subprogram's name (``sub3``, ``sub1+sub2`` for a merge).
        outputs: the term of each output of the rewrite (unioned with the subprogram's).
        terms: every term of the rewrite (what the extraction chooses when it applies it).
        original_ops: the subprogram's operators.
        ops: the rewrite's operators (the original's own for the subprogram as it is).
        partially_equivalent: the mutant needed corrections (they are among ``terms``).
        corrected_boxes: boxes the corrections recompute.
    """

    subprogram: str
    outputs: tuple[int, ...]
    terms: tuple[int, ...]
    original_ops: tuple[str, ...]
    ops: tuple[str, ...]
    partially_equivalent: bool = False
    corrected_boxes: int = 0
    is_original: bool = False


class ProgramEGraph:
    """An egglog e-graph of one program and the verified rewrites of its subprograms.

    Args:
        registry: the keys (a fresh one when omitted).

    >>> from tvm_pet.ir import ProgramBuilder
    >>> b = ProgramBuilder(); x = b.input("x", (2, 3))
    >>> p = b.build([b.add(b.transpose(x, (1, 0)), b.transpose(x, (1, 0)))])
    >>> g = ProgramEGraph(); names = g.add_program(p)
    >>> names[p.nodes[0].output] == names[p.nodes[1].output]  # the same transpose, hash-consed
    True
    """

    def __init__(self, registry: Registry | None = None):
        self.egraph = EGraph()
        self.registry = registry or Registry()
        self.terms: list[Term] = []
        self._term_ids: dict[Term, int] = {}
        self._exprs: dict[int, Tensor] = {}  # let-bound terms
        self.input_shapes: dict[str, Shape] = {}
        #: the original program's tensor names of each term (for readable extracted programs)
        self.names: dict[int, str] = {}

    # ------------------------------------------------------------------------------ terms
    def term(self, kind: str, lit, children: Sequence[int] = ()) -> int:
        """The id of a term (hash-consed in Python as egglog hash-conses the e-node)."""
        t = Term(kind, lit, tuple(children))
        found = self._term_ids.get(t)
        if found is None:
            found = len(self.terms)
            self.terms.append(t)
            self._term_ids[t] = found
        return found

    def expr(self, tid: int) -> Tensor:
        """The egglog expression of a term: let-bound terms by reference, the others nested."""
        if tid in self._exprs:
            return self._exprs[tid]
        t = self.terms[tid]
        if t.kind == "input":
            return Tensor.input(t.lit)
        if t.kind == "weight":
            return Tensor.weight(t.lit)
        if t.kind == "get":
            return self.expr(t.children[0]).get(t.lit)
        args = [self.expr(c) for c in t.children]
        if len(args) == 1:
            return Tensor.op1(t.lit, args[0])
        if len(args) == 2:
            return Tensor.op2(t.lit, args[0], args[1])
        listed = Args.nil()
        for a in reversed(args):
            listed = Args.cons(a, listed)
        return Tensor.opn(t.lit, listed)

    def _bind(self, tid: int) -> None:
        if tid not in self._exprs:
            self._exprs[tid] = self.egraph.let(f"t{tid}", self.expr(tid))

    def _bind_deep(self, tids) -> None:
        """Let-bind every ``NEST_LIMIT``-th level of terms ``tids`` (in program order), so no
        expression handed to egglog nests deeper than that (egglog converts expressions
        recursively: a long rewrite, nested whole, exceeds Python's recursion limit)."""
        depth: dict[int, int] = {}
        for tid in tids:
            if tid in self._exprs or tid in depth:
                continue
            d = 1 + max((depth.get(c, 0) for c in self.terms[tid].children
                         if c not in self._exprs), default=0)
            if d >= NEST_LIMIT:
                self._bind(tid)
            else:
                depth[tid] = d

    def _tensor_terms(self, program: Program, known: Mapping[str, int],
                      own_names: bool) -> dict[str, int]:
        """Term ids of every tensor of ``program``; tensors in ``known`` keep their ids."""
        ids = dict(known)
        for spec in program.inputs:
            if spec.name not in ids:
                ids[spec.name] = self.term("input", spec.name)
                self.input_shapes[spec.name] = spec.shape
        for name, array in program.weights.items():
            if name not in ids:
                ids[name] = self.term("weight", self.registry.weight(
                    array, name if own_names else f"{name}_eq", own=own_names))
        for node in program.nodes:
            key = self.registry.key(NodeSpec.of(program, node))
            tid = self.term("op", key, [ids[i] for i in node.inputs])
            if len(node.outputs) == 1:
                ids.setdefault(node.outputs[0], tid)
            else:
                for k, o in enumerate(node.outputs):
                    ids.setdefault(o, self.term("get", k, [tid]))
        return ids

    # ------------------------------------------------------------------------------ insertion
    def add_program(self, program: Program) -> dict[str, int]:
        """Insert ``program``; returns the term id of each of its tensors (all let-bound)."""
        self.registry.reserve(program.shapes)
        ids = self._tensor_terms(program, {}, own_names=True)
        for name, tid in ids.items():
            self.names.setdefault(tid, name)
            self._bind(tid)
        return ids

    def add_alternative(self, ids: Mapping[str, int], outputs: Sequence[str],
                        rewrite: Program) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Union each of ``outputs`` (tensors of an inserted program, term ids ``ids``) with
        the same-named output of ``rewrite``, a verified rewrite that reads tensors of that
        program.

        Returns:
            The rewrite's output terms and every term of its nodes.
        """
        leaves = {n: ids[n] for n in rewrite.input_names}  # weights: by content
        local = self._tensor_terms(rewrite, leaves, own_names=False)
        self._bind_deep(local[o] for n in rewrite.nodes for o in n.outputs)
        outs = tuple(local[o] for o in outputs)
        self.egraph.register(*[union(self._exprs[ids[o]]).with_(self.expr(t))
                               for o, t in zip(outputs, outs)])
        made = {o: local[o] for n in rewrite.nodes for o in n.outputs}
        nodes = tuple(dict.fromkeys(self.terms[t].children[0] if self.terms[t].kind == "get"
                                    else t for t in made.values()))
        return outs, nodes

    def original_terms(self, ids: Mapping[str, int], part: Program) -> tuple[int, ...]:
        """The terms of the nodes of ``part``, a subprogram of an inserted program."""
        out = []
        for node in part.nodes:
            t = ids[node.outputs[0]]
            out.append(self.terms[t].children[0] if self.terms[t].kind == "get" else t)
        return tuple(dict.fromkeys(out))

    def size(self) -> int:
        """E-nodes of the program's sorts now in the e-graph."""
        return sum(n for fn, n in self.egraph.all_function_sizes() if _is_constructor(fn))


_CONSTRUCTORS = {Tensor.input, Tensor.weight, Tensor.op1, Tensor.op2, Tensor.opn, Tensor.get,
                 Args.nil, Args.cons}


def _is_constructor(fn) -> bool:
    try:
        return fn in _CONSTRUCTORS
    except TypeError:  # an egglog callable that does not compare
        return False
