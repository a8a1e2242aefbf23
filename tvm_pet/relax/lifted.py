"""The lifted form of a Relax function and the helpers both directions share.

:class:`Lifted` is what :func:`~tvm_pet.relax.adapter.from_relax` returns; the lifting rules are in
:mod:`tvm_pet.relax.lift` and the lowering rules in :mod:`tvm_pet.relax.lower`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Union

import numpy as np
import tvm
from tvm import relax

from tvm_pet.errors import ShapeError, UnsupportedOperator
from tvm_pet.ir.node import Node, Program, Shape

F32 = "float32"
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
        return (node.attrs["kind"] == self.kind and node.outputs == tuple(_flatten(self.outputs))
                and len(node.inputs) == sum(len(_flatten(t)) for _, t in self.leaves))

    def rebuild(self, args: Sequence[relax.Expr]) -> relax.Expr:
        """The kept expression with its leaves replaced by ``args`` (the node's inputs)."""
        items = iter(args)
        mapping = {leaf.__chandle__(): _unflatten(tree, items, relax.Tuple)
                   for leaf, tree in self.leaves}
        return _substitute(self.expr, mapping)


@dataclasses.dataclass(frozen=True, eq=False)
class Lifted:
    """A program lifted from a Relax function, with what :func:`to_relax` needs to rebuild it.

    Attributes:
        program: the tvm_pet program.
        params: the function's parameter Vars, in signature order.
        input_names: the program input each parameter became (same order).
        opaque: the kept expression of every OPAQUE node, by each of its output names.
        constants: the original Relax constant of each weight that came from one.
        outputs: the structure of the function's result, as a tree of program output names.
        attrs: the function's attributes (``num_input``, ``global_symbol``, ...).
        name: the function's global symbol (``"main"`` by default).
    """

    program: Program
    params: tuple[relax.Var, ...]
    input_names: tuple[str, ...]
    opaque: Mapping[str, OpaqueBinding]
    constants: Mapping[str, tuple[np.ndarray, relax.Expr]]
    outputs: Tree
    attrs: Mapping[str, Any]
    name: str = "main"


def _flatten(tree: Tree) -> list[str]:
    return [tree] if isinstance(tree, str) else [n for t in tree for n in _flatten(t)]


def _unflatten(tree: Tree, items: Iterator, make_tuple: Callable) -> Any:
    if isinstance(tree, str):
        return next(items)
    return make_tuple([_unflatten(t, items, make_tuple) for t in tree])


def _substitute(expr: relax.Expr, mapping: Mapping[int, relax.Expr]) -> relax.Expr:
    """``expr`` with every Var or Constant whose handle is in ``mapping`` replaced."""
    if isinstance(expr, (relax.Var, tvm.ir.expr.Constant)):
        return mapping.get(expr.__chandle__(), expr)
    if isinstance(expr, relax.Tuple):
        return relax.Tuple([_substitute(f, mapping) for f in expr.fields])
    if isinstance(expr, relax.TupleGetItem):
        return relax.TupleGetItem(_substitute(expr.tuple_value, mapping), expr.index)
    if isinstance(expr, relax.Call):
        return relax.Call(expr.op, [_substitute(a, mapping) for a in expr.args], expr.attrs,
                          expr.ty_args)
    return expr


# ---------------------------------------------------------------------------- reading Relax types
def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _static(ty, what: str) -> Shape:
    """The static shape of a tensor type; ShapeError for symbolic or unknown shapes."""
    if ty.shape is None:
        raise ShapeError(f"{what} has no known shape ({ty}); tvm_pet needs static shapes")
    try:
        shape = tuple(int(d) for d in ty.shape)
    except TypeError:
        raise ShapeError(f"{what} has the symbolic shape {ty.shape}; tvm_pet needs static shapes "
                         f"(bind the symbolic dims first, e.g. relax.transform.BindSymbolicVars)"
                         ) from None
    if any(d < 1 for d in shape):
        raise ShapeError(f"{what} has the zero-size shape {list(shape)}")
    return shape


def _type_tree(ty, what: str):
    """A tensor type, or a (nested) tuple of them; UnsupportedOperator for anything else."""
    if isinstance(ty, relax.TensorType):
        return ty
    if isinstance(ty, relax.TupleType) and len(ty.fields):
        return tuple(_type_tree(f, what) for f in ty.fields)
    raise UnsupportedOperator(f"{what} has type {ty}; tvm_pet lifts tensors and tuples of tensors")


def _template(tree) -> Tree:
    """A tree of placeholder names shaped like a tree of tensor types."""
    return "t" if isinstance(tree, relax.TensorType) else tuple(_template(f) for f in tree)


def _leaf_types(tree) -> list:
    if isinstance(tree, relax.TensorType):
        return [tree]
    return [t for f in tree for t in _leaf_types(f)]


def _is_f32(expr: relax.Expr) -> bool:
    """True when every tensor in ``expr``'s type is float32 (non-tensor operands pass)."""
    ty = expr.ty
    if isinstance(ty, relax.TensorType):
        return str(ty.dtype) == F32
    if isinstance(ty, relax.TupleType):
        return all(str(f.dtype) == F32 for f in ty.fields if isinstance(f, relax.TensorType))
    return True


def _const_ints(expr: relax.Expr) -> tuple[int, ...] | None:
    """The integers of a constant Tuple or ShapeExpr operand, or None."""
    fields = expr.fields if isinstance(expr, relax.Tuple) else (
        expr.values if isinstance(expr, relax.ShapeExpr) else None)
    if fields is None:
        return None
    try:
        return tuple(int(getattr(f, "value", f)) for f in fields)
    except TypeError:
        return None


def _call_kind(call: relax.Call) -> str:
    op = call.op
    if isinstance(op, tvm.ir.Op):
        return op.name
    if isinstance(op, tvm.ir.GlobalVar):
        return f"call {op.name_hint}"
    return f"call {type(op).__name__}"


def _no_dtype(out_dtype) -> bool:
    return out_dtype is None or str(out_dtype) in ("", F32, "void")


def _pads(padding, nsp: int) -> tuple[int, ...] | None:
    """Relax's padding (begins then ends, or one per axis) as begins + ends."""
    p = _ints(padding)
    return p * 2 if len(p) == nsp else (p if len(p) == 2 * nsp else None)

