"""The lifted form of a Relax function: :class:`Lifted`, :class:`OpaqueBinding`, name trees.

:class:`Lifted` is what :func:`~tvm_pet.relax.adapter.from_relax` returns (built by
:mod:`tvm_pet.relax.lifting`) and what :mod:`tvm_pet.relax.lower` rebuilds a function from.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Union

import numpy as np
import tvm
from tvm import relax

from tvm_pet.ir.node import Node, Program

#: A nested structure of tensor names, like the Relax tuple it stands for.
Tree = Union[str, tuple["Tree", ...]]


# ------------------------------------------------------------------------------- the lifted form
@dataclasses.dataclass(frozen=True, eq=False)
class OpaqueBinding:
    """A Relax expression kept verbatim for an OPAQUE node.

    Attributes:
        expr: the binding's value; its tensor operands are the ``leaves``.
        leaves: each Var or Constant operand with the tree of program tensors it stood for; the
            node's inputs are these trees flattened, in order.
        outputs: the tree of the node's output names (a tuple for a tuple-valued call).
        kind: the node's kind.
    """

    expr: relax.Expr
    leaves: tuple[tuple[relax.Expr, Tree], ...]
    outputs: Tree
    kind: str

    def fits(self, node: Node) -> bool:
        """True when ``node`` still has this binding's kind, input count and outputs."""
        return (node.attrs["kind"] == self.kind and node.outputs == tuple(flatten(self.outputs))
                and len(node.inputs) == sum(len(flatten(t)) for _, t in self.leaves))

    def rebuild(self, args: Sequence[relax.Expr],
                renamed: Mapping[int, relax.Expr] | None = None) -> relax.Expr:
        """The kept expression with its leaves replaced by ``args`` (the node's inputs) and
        the Vars of bindings kept outside the program by their re-emitted ``renamed`` Vars
        (keyed by handle)."""
        items = iter(args)
        mapping = dict(renamed or {})
        mapping.update({leaf.__chandle__(): unflatten(tree, items, relax.Tuple)
                        for leaf, tree in self.leaves})
        return substitute(self.expr, mapping)


@dataclasses.dataclass(frozen=True, eq=False)
class Lifted:
    """A program lifted from a Relax function, with what :func:`to_relax` needs to rebuild it.

    Attributes:
        program: the tvm_pet program.
        params: the function's parameter Vars, in signature order.
        input_names: the program input each parameter became (same order); None for a
            parameter that is not a float32 tensor (it is read by ``outside`` bindings only).
        opaque: the kept expression of every OPAQUE node, by each of its output names.
        constants: the original Relax constant of each weight that came from one.
        outputs: the structure of the function's result, as a tree of program output names.
        attrs: the function's attributes (``num_input``, ``global_symbol``, ...).
        name: the function's global symbol (``"main"`` by default).
        outside: the bindings kept outside the program (they read no tensor the program
            computes), in their order; the lowering emits them first, verbatim.
        outside_inputs: the program inputs that stand for float32 values computed outside:
            each input name with its expression (a Var of ``outside``, or a tuple item of one).
        recognised: the original call of each node that a lift rule made from one call alone,
            with its operands in the node's input order, by the node's output. The lowering
            re-emits that call for a node still equal to it, so that a candidate's unchanged
            operators compile to the kernels TVM imported (a spatial ``mean`` stays a mean,
            not an ``avg_pool2d``).
    """

    program: Program
    params: tuple[relax.Var, ...]
    input_names: tuple[str | None, ...]
    opaque: Mapping[str, OpaqueBinding]
    constants: Mapping[str, tuple[np.ndarray, relax.Expr]]
    outputs: Tree
    attrs: Mapping[str, Any]
    name: str = "main"
    outside: tuple[relax.Binding, ...] = ()
    outside_inputs: Mapping[str, relax.Expr] = dataclasses.field(default_factory=dict)
    recognised: Mapping[str, tuple[Node, OpaqueBinding]] = dataclasses.field(default_factory=dict)


def flatten(tree: Tree) -> list[str]:
    return [tree] if isinstance(tree, str) else [n for t in tree for n in flatten(t)]


def unflatten(tree: Tree, items: Iterator, make_tuple: Callable) -> Any:
    if isinstance(tree, str):
        return next(items)
    return make_tuple([unflatten(t, items, make_tuple) for t in tree])


def substitute(expr: relax.Expr, mapping: Mapping[int, relax.Expr]) -> relax.Expr:
    """``expr`` with every Var or Constant whose handle is in ``mapping`` replaced."""
    if isinstance(expr, (relax.Var, tvm.ir.expr.Constant)):
        return mapping.get(expr.__chandle__(), expr)
    if isinstance(expr, relax.Tuple):
        return relax.Tuple([substitute(f, mapping) for f in expr.fields])
    if isinstance(expr, relax.TupleGetItem):
        return relax.TupleGetItem(substitute(expr.tuple_value, mapping), expr.index)
    if isinstance(expr, relax.Call):
        return relax.Call(expr.op, [substitute(a, mapping) for a in expr.args], expr.attrs,
                          expr.ty_args)
    return expr
