"""Reading Relax types and attributes: static shapes, dtypes, constant integers, op names.

Shared by lifting (:mod:`tvm_pet.relax.lifting`), lowering (:mod:`tvm_pet.relax.lower`) and the
coverage figures (:mod:`tvm_pet.relax.coverage`).
"""
from __future__ import annotations

import tvm
from tvm import relax

from tvm_pet.errors import ShapeError, UnsupportedOperator
from tvm_pet.ir.node import Shape

F32 = "float32"


def ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def known_shape(ty) -> Shape | None:
    """A tensor type's shape where every dimension is a known integer; None where the shape is
    unknown or symbolic."""
    if ty.shape is None:
        return None
    try:
        return tuple(int(d) for d in ty.shape)
    except TypeError:
        return None


def static_shape(ty, what: str) -> Shape:
    """The static shape of a tensor type; ShapeError for symbolic or unknown shapes."""
    if ty.shape is None:
        raise ShapeError(f"{what} has no known shape ({ty}); tvm_pet needs static shapes")
    shape = known_shape(ty)
    if shape is None:
        raise ShapeError(f"{what} has the symbolic shape {ty.shape}; tvm_pet needs static shapes "
                         f"(bind the symbolic dims first, e.g. relax.transform.BindSymbolicVars)")
    if any(d < 1 for d in shape):
        raise ShapeError(f"{what} has the zero-size shape {list(shape)}")
    return shape


def type_tree(ty, what: str):
    """A tensor type, or a (nested) tuple of them; UnsupportedOperator for anything else."""
    if isinstance(ty, relax.TensorType):
        return ty
    if isinstance(ty, relax.TupleType) and len(ty.fields):
        return tuple(type_tree(f, what) for f in ty.fields)
    raise UnsupportedOperator(f"{what} has type {ty}; tvm_pet lifts tensors and tuples of tensors")


def template(tree):
    """A tree of placeholder names shaped like a tree of tensor types."""
    return "t" if isinstance(tree, relax.TensorType) else tuple(template(f) for f in tree)


def leaf_types(tree) -> list:
    if isinstance(tree, relax.TensorType):
        return [tree]
    return [t for f in tree for t in leaf_types(f)]


def is_f32(expr: relax.Expr) -> bool:
    """True when every tensor in ``expr``'s type is float32 (non-tensor operands pass)."""
    ty = expr.ty
    if isinstance(ty, relax.TensorType):
        return str(ty.dtype) == F32
    if isinstance(ty, relax.TupleType):
        return all(str(f.dtype) == F32 for f in ty.fields if isinstance(f, relax.TensorType))
    return True


def const_ints(expr: relax.Expr) -> tuple[int, ...] | None:
    """The integers of a constant Tuple or ShapeExpr operand, or None."""
    fields = expr.fields if isinstance(expr, relax.Tuple) else (
        expr.values if isinstance(expr, relax.ShapeExpr) else None)
    if fields is None:
        return None
    try:
        return tuple(int(getattr(f, "value", f)) for f in fields)
    except TypeError:
        return None


def call_kind(call: relax.Call) -> str:
    """The kind of a call in words, for summaries and errors: the Relax operator's name (a
    ``call_tir`` with its function's, numbers dropped: ``relax.call_tir(maximum)``), or the
    function called."""
    op = call.op
    if isinstance(op, tvm.ir.Op):
        if op.name == "relax.call_tir" and call.args and isinstance(call.args[0], tvm.ir.GlobalVar):
            return f"relax.call_tir({call.args[0].name_hint.rstrip('0123456789_') or 'tir'})"
        return op.name
    if isinstance(op, tvm.ir.GlobalVar):
        return f"call {op.name_hint}"
    return f"call {type(op).__name__}"


def float32_or_void(out_dtype) -> bool:
    return out_dtype is None or str(out_dtype) in ("", F32, "void")


def begins_ends(padding, nsp: int) -> tuple[int, ...] | None:
    """Relax's padding (begins then ends, or one per axis) as begins + ends."""
    p = ints(padding)
    return p * 2 if len(p) == nsp else (p if len(p) == 2 * nsp else None)

