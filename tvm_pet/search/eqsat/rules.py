"""The post-optimizations as egglog rules, and the verified facts they rewrite with.

Each rule is an egglog ``rule`` over the operator terms of :mod:`.terms`; it fires only where a
fact table holds an entry for the keys it matched. The facts are the layout algebra of
:mod:`tvm_pet.search.postopt`, computed in Python and checked before they enter the e-graph
(:class:`Facts`): a fused or eliminated layout chain by the verifier, a layout moved across an
element-wise or constant operator by an exact evaluation (the same numbers, permuted). The
rules themselves only match and union, so the e-graph holds nothing that was not checked.

The rules, by name (:data:`RULES`), with the post-optimization each one is:

``fuse_layout_chains``              L2(L1(a)) = L3(a), L3 the composite layout
``eliminate_inverse_layouts``       L(a) = a, L the identity (a fused inverse pair among them)
``move_layout_across_elementwise``  L(f(a)) = f'(L(a)) for an element-wise opaque f
``move_layout_across_constant``     L(a + w) = L(a) + w' for a weight w (also *, either side)

``precompute_weights`` is no rule: folding a constant subterm into a new weight would put
values computed in float32 into the e-graph as if they were the model's own. The cost models
charge nothing for multi-linear nodes over constants, so it does not change the choice; it is
applied to the extracted program afterwards, as Algorithm 2 applies it (``_polished``).

Requests: for each pair of keys that some rule could use, a ``want_*`` rule records the keys;
:meth:`Facts.answer` reads the records after each iteration and adds the facts that hold (an
entry it cannot make, such as a composite no single layout node expresses, stays absent, so the
rule never fires there).
"""
from __future__ import annotations

import numpy as np
from egglog import (String, StringLike, eq, function, i64, i64Like, relation, rule, ruleset,
                    set_, union, var)
from egglog import get_callable_args, get_literal_value

from tvm_pet.errors import PetError, VerificationError
from tvm_pet.ir.node import Node, Program, TensorSpec
from tvm_pet.ir.ops import BIJECTIVE_LAYOUT, Op
from tvm_pet.ops.float_eval import FLOAT_RULES
from tvm_pet.search.eqsat.terms import NodeSpec, ProgramEGraph, Tensor
from tvm_pet.search.postopt import (ELEMENTWISE_OPAQUE, _check_constant_move,
                                    _check_with_verifier, _compact, _is_identity, layout_index,
                                    layout_node)

is_layout = relation("is_layout", String)
is_identity = relation("is_identity", String)
is_elementwise = relation("is_elementwise", String)
is_add_or_mul = relation("is_add_or_mul", String)


def _keep_first(old, new):
    return old


@function(merge=_keep_first)
def composed(first: StringLike, second: StringLike) -> String: ...


@function(merge=_keep_first)
def moved_elementwise(layout: StringLike, op: StringLike) -> String: ...


@function(merge=_keep_first)
def moved_op(layout: StringLike, op: StringLike, w: StringLike, side: i64Like) -> String: ...


@function(merge=_keep_first)
def moved_weight(layout: StringLike, op: StringLike, w: StringLike, side: i64Like) -> String: ...


@function(merge=_keep_first)
def want_composed(first: StringLike, second: StringLike) -> i64: ...


@function(merge=_keep_first)
def want_moved_elementwise(layout: StringLike, op: StringLike) -> i64: ...


@function(merge=_keep_first)
def want_moved_constant(layout: StringLike, op: StringLike, w: StringLike,
                        side: i64Like) -> i64: ...


_a, _r = var("a", Tensor), var("r", Tensor)
_k1, _k2, _k3, _w, _w2 = (var(n, String) for n in ("k1", "k2", "k3", "w", "w2"))


def _constant_move(side: int):
    """``move_layout_across_constant`` with the weight as input ``side`` of the ADD or MUL."""
    w = Tensor.weight(_w)
    before = Tensor.op2(_k1, _a, w) if side == 1 else Tensor.op2(_k1, w, _a)
    moved = Tensor.weight(_w2)
    after = (Tensor.op2(_k2, Tensor.op1(_k3, _a), moved) if side == 1
             else Tensor.op2(_k2, moved, Tensor.op1(_k3, _a)))
    return rule(eq(_r).to(Tensor.op1(_k3, before)), eq(_k2).to(moved_op(_k3, _k1, _w, side)),
                eq(_w2).to(moved_weight(_k3, _k1, _w, side))).then(union(_r).with_(after))


#: The post-optimizations as rules, by name (a name may hold several rules).
RULES = {
    "fuse_layout_chains": [
        rule(eq(_r).to(Tensor.op1(_k2, Tensor.op1(_k1, _a))), eq(_k3).to(composed(_k1, _k2))
             ).then(union(_r).with_(Tensor.op1(_k3, _a)))],
    "eliminate_inverse_layouts": [
        rule(eq(_r).to(Tensor.op1(_k1, _a)), is_identity(_k1)).then(union(_r).with_(_a))],
    "move_layout_across_elementwise": [
        rule(eq(_r).to(Tensor.op1(_k1, Tensor.op1(_k2, _a))),
             eq(_k3).to(moved_elementwise(_k1, _k2))
             ).then(union(_r).with_(Tensor.op1(_k3, Tensor.op1(_k1, _a))))],
    "move_layout_across_constant": [_constant_move(1), _constant_move(2)],
}

#: The rules recording which facts the rules above could use.
REQUESTS = [
    rule(Tensor.op1(_k2, Tensor.op1(_k1, _a)), is_layout(_k1), is_layout(_k2)
         ).then(set_(want_composed(_k1, _k2)).to(i64(1))),
    rule(Tensor.op1(_k1, Tensor.op1(_k2, _a)), is_layout(_k1), is_elementwise(_k2)
         ).then(set_(want_moved_elementwise(_k1, _k2)).to(i64(1))),
    rule(Tensor.op1(_k1, Tensor.op2(_k2, _a, Tensor.weight(_w))), is_layout(_k1),
         is_add_or_mul(_k2)).then(set_(want_moved_constant(_k1, _k2, _w, 1)).to(i64(1))),
    rule(Tensor.op1(_k1, Tensor.op2(_k2, Tensor.weight(_w), _a)), is_layout(_k1),
         is_add_or_mul(_k2)).then(set_(want_moved_constant(_k1, _k2, _w, 2)).to(i64(1))),
]


def rules_named(names) -> object:
    """One egglog ruleset of the named rules of :data:`RULES` and the requests."""
    chosen = [r for name in names for r in RULES[name]]
    return ruleset(*chosen, *REQUESTS)


class Facts:
    """The verified facts the rules rewrite with, for one :class:`ProgramEGraph`.

    Keys are classified as they are made (:meth:`classify`); :meth:`answer` serves the requests
    recorded by the rules. Every fact is checked before it is added; a check that fails is a
    bug in the layout algebra and raises :class:`~tvm_pet.errors.VerificationError`.
    """

    def __init__(self, graph: ProgramEGraph):
        self.graph = graph
        self.answered: set[tuple] = set()
        self.made: dict[str, str] = {}  # key made by a fact -> the rule it serves

    def classify(self) -> int:
        """Register the kind of each key made since the last call; returns how many."""
        registry, actions = self.graph.registry, []
        for key in registry.take_fresh():
            spec = registry.specs[key]
            if spec.op in BIJECTIVE_LAYOUT:
                actions.append(is_layout(key))
                shape = spec.in_shapes[0]
                index = layout_index([spec.node(["a"], ["b"])], shape)
                if _is_identity(index, shape):
                    _check_with_verifier([spec.node(["a"], ["b"])],
                                         [Node(Op.RESHAPE, ("a",), ("b",), {"shape": shape})],
                                         "a", shape, "b")
                    actions.append(is_identity(key))
            elif (spec.op is Op.OPAQUE and spec.attrs["kind"] in ELEMENTWISE_OPAQUE
                  and spec.arity == 1 and len(spec.out_shapes) == 1
                  and spec.in_shapes[0] == spec.out_shapes[0]):
                actions.append(is_elementwise(key))
            elif spec.op in (Op.ADD, Op.MUL):
                actions.append(is_add_or_mul(key))
        if actions:
            self.graph.egraph.register(*actions)
        return len(actions)

    def answer(self) -> int:
        """Add the facts the recorded requests ask for; returns how many were added."""
        egraph, actions = self.graph.egraph, []
        for table, make in ((want_composed, self._composed),
                            (want_moved_elementwise, self._moved_elementwise),
                            (want_moved_constant, self._moved_constant)):
            for call in egraph.function_values(table):
                args = tuple(get_literal_value(a) for a in get_callable_args(call))
                if (table, args) in self.answered:
                    continue
                self.answered.add((table, args))
                actions += make(*args)
        if actions:
            egraph.register(*actions)
        return len(actions) + self.classify()

    # ------------------------------------------------------------------------------ facts
    def _spec(self, key: str) -> NodeSpec:
        return self.graph.registry.specs[key]

    def _key(self, spec: NodeSpec, rule_name: str) -> str:
        key = self.graph.registry.key(spec)
        self.made.setdefault(key, rule_name)
        return key

    def _composed(self, first: str, second: str) -> list:
        one, two = self._spec(first), self._spec(second)
        shape = one.in_shapes[0]
        chain = [one.node(["a"], ["m"]), two.node(["m"], ["b"])]
        index = layout_index(chain, shape)
        if _is_identity(index, shape):
            fused = Node(Op.RESHAPE, ("a",), ("b",), {"shape": shape})
            name = "eliminate_inverse_layouts"
        else:
            fused = layout_node(index, shape, "a", "b")
            name = "fuse_layout_chains"
        if fused is None:
            return []
        _check_with_verifier(chain, [fused], "a", shape, "b")
        key = self._key(NodeSpec(fused.op, fused.attrs, (shape,), (tuple(index.shape),)), name)
        return [set_(composed(first, second)).to(key)]

    def _moved_elementwise(self, layout: str, op: str) -> list:
        lay, f = self._spec(layout), self._spec(op)
        shape, out = lay.in_shapes[0], lay.out_shapes[0]
        moved = NodeSpec(Op.OPAQUE, f.attrs.replace(shapes=(out,)), (out,), (out,))
        before = [f.node(["a"], ["m"]), lay.node(["m"], ["b"])]
        after = [lay.node(["a"], ["m"]), moved.node(["m"], ["b"])]
        if not _same_on_random_data(before, after, shape):
            return []  # a kind the float interpreter does not evaluate: no fact
        return [set_(moved_elementwise(layout, op)).to(
            self._key(moved, "move_layout_across_elementwise"))]

    def _moved_constant(self, layout: str, op: str, wkey: str, side: int) -> list:
        lay, spec = self._spec(layout), self._spec(op)
        registry = self.graph.registry
        w = registry.weights[wkey]
        x_shape = spec.in_shapes[0 if side == 1 else 1]
        out = spec.out_shapes[0]
        if x_shape != out:
            return []  # the weight must broadcast into x, not x into it
        full = np.broadcast_to(np.asarray(w), out)
        (moved_w,) = FLOAT_RULES[lay.op](lay.attrs, [full])
        moved_w = _compact(np.asarray(moved_w)).astype(np.asarray(w).dtype)
        inputs = ["m", "v"] if side == 1 else ["v", "m"]
        before = [spec.node(["a", "w"] if side == 1 else ["w", "a"], ["m"]),
                  lay.node(["m"], ["b"])]
        after = [lay.node(["a"], ["m"]), spec.node(inputs, ["b"])]
        _check_constant_move(before, after, "a", x_shape, "b", {"w": w, "v": moved_w})
        new_w = registry.weight(moved_w, f"{registry.weight_names[wkey]}_moved")
        lay_out = lay.out_shapes[0]
        shapes = (lay_out, moved_w.shape) if side == 1 else (moved_w.shape, lay_out)
        key = self._key(NodeSpec(spec.op, spec.attrs, tuple(tuple(s) for s in shapes),
                                 (lay_out,)), "move_layout_across_constant")
        return [set_(moved_op(layout, op, wkey, side)).to(key),
                set_(moved_weight(layout, op, wkey, side)).to(new_w)]


def _same_on_random_data(before: list[Node], after: list[Node], shape) -> bool:
    """Whether two chains from ``a`` to ``b`` give bit-identical results on random data (an
    element-wise operator on permuted elements computes the same numbers); False when the
    float interpreter cannot evaluate them."""
    from tvm_pet.verify.interpreter import evaluate
    x = {"a": np.random.default_rng(0).standard_normal(shape)}
    try:
        results = [evaluate(Program((TensorSpec("a", shape),), {}, tuple(chain), ("b",)), x,
                            np.float64)["b"] for chain in (before, after)]
    except PetError:
        return False
    if results[0].shape != results[1].shape or not np.array_equal(*results):
        raise VerificationError(
            f"moving {[n.describe() for n in before]} to {[n.describe() for n in after]} "
            f"changes the result; this is a bug in the layout algebra")
    return True
