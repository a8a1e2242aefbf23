"""Lowering: tvm_pet operators to Relax, one rule per :class:`~tvm_pet.ir.Op` (:data:`LOWER_RULES`).

OPAQUE nodes re-emit the expression kept when they were lifted, or, for nodes from tvm_pet's ONNX
importer, lower by kind through :data:`OPAQUE_LOWERING`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import numpy as np
import tvm
from tvm import relax
from tvm.relax.op import nn as rnn

from tvm_pet.errors import PetError, ProgramError, ShapeError, UnsupportedOperator
from tvm_pet.ir import winograd as wino
from tvm_pet.ir.node import Node, Program, Shape
from tvm_pet.ir.ops import Op
from tvm_pet.ops.float_eval import maxpool_ceil_pads
from tvm_pet.relax import im2col, winograd
from tvm_pet.relax.lifted_function import Lifted, Tree, flatten, substitute, unflatten
from tvm_pet.relax.relax_types import F32, static_shape


# -------------------------------------------------------------------------------------- lowering
class _Lowerer:
    """Emits one program as a Relax function with a BlockBuilder, in one dataflow block."""

    def __init__(self, program: Program, lifted: Lifted | None, standalone: bool = False):
        self.p, self.lifted = program, lifted
        #: Inputs become plain parameters and nothing outside is emitted (a region of a model).
        self.standalone = standalone
        self.bb = relax.BlockBuilder()
        self.env: dict[str, relax.Expr] = {}
        #: The re-emitted Var of each binding kept outside the program, by the old Var's handle.
        self.renamed: dict[int, relax.Expr] = {}

    def module(self) -> tvm.IRModule:
        params = self._params()
        whole = self.lifted is not None and not self.standalone
        name = self.lifted.name if whole else "main"
        attrs = dict(self.lifted.attrs) if whole and self.lifted.attrs else None
        with self.bb.function(name, params, attrs=attrs):
            with self.bb.dataflow():
                self._outside()
                for node in self.p.nodes:
                    self._node(node)
                out = self.bb.emit_output(self._result())
            self.bb.emit_func_output(out)
        return self.bb.finalize()

    def _params(self) -> list[relax.Var]:
        specs = {t.name: t for t in self.p.inputs}
        if self.lifted is None or self.standalone:
            params = [relax.Var(t.name, relax.TensorType(t.shape, F32)) for t in self.p.inputs]
            self.env.update(zip(specs, params))
            return params
        known = {n for n in self.lifted.input_names if n is not None}
        extra = sorted(set(specs) - known - set(self.lifted.outside_inputs))
        if extra:
            raise ProgramError(f"program inputs {extra} are not parameters of the lifted function "
                               f"({sorted(known)}) or values computed outside the program; keep "
                               f"the signature")
        for var, name in zip(self.lifted.params, self.lifted.input_names):
            if name is None:
                continue
            if name in specs and specs[name].shape != static_shape(var.ty, name):
                raise ShapeError(f"input {name!r} has shape {list(specs[name].shape)}, the "
                                 f"function's parameter {list(static_shape(var.ty, name))}")
            self.env[name] = var
        return list(self.lifted.params)

    def _outside(self) -> None:
        """Emit the bindings kept outside the program, then bind the inputs that stand for
        their float32 values. A region (``standalone``) takes those that read none of the
        function's parameters: the indices an opaque ``take`` reads (swin_t's shifted windows:
        ``arange``, ``add``, ``mod``); without them 60 of its first 150 mutants could not be
        costed from their region."""
        if self.lifted is None:
            return
        for binding in self.lifted.outside:
            if self.standalone and not all(v.__chandle__() in self.renamed
                                           for v in relax.analysis.free_vars(binding.value)):
                continue
            value = substitute(binding.value, self.renamed)
            if isinstance(binding, relax.MatchCast):
                new = self.bb.match_cast(value, binding.ty, name_hint=binding.var.name)
            else:
                new = self.bb.emit(value, name_hint=binding.var.name)
            self.renamed[binding.var.__chandle__()] = new
        if self.standalone:
            return
        for name, expr in self.lifted.outside_inputs.items():
            value = substitute(expr, self.renamed)
            self.env[name] = value if isinstance(value, relax.Var) else self.emit(value, name)

    def _result(self) -> relax.Expr:
        outs = list(self.p.outputs)
        tree: Tree = outs[0] if len(outs) == 1 else tuple(outs)
        if self.lifted is not None and flatten(self.lifted.outputs) == outs:
            tree = self.lifted.outputs
        return unflatten(tree, iter(self.expr(o) for o in flatten(tree)), relax.Tuple)

    def expr(self, name: str) -> relax.Expr:
        """The Relax value of a program tensor (a weight becomes a constant on first use)."""
        if name not in self.env:
            if name not in self.p.weights:
                raise ProgramError(f"tensor {name!r} is used before it is defined")
            array = self.p.weights[name]
            origin = self.lifted.constants.get(name) if self.lifted else None
            self.env[name] = origin[1] if origin is not None and origin[0] is array else \
                relax.const(np.asarray(array, np.float32))
        return self.env[name]

    def emit(self, expr: relax.Expr, hint: str) -> relax.Expr:
        hint = "".join(c if c.isalnum() else "_" for c in hint)
        return self.bb.emit(expr, name_hint=hint if hint[:1].isalpha() else f"t_{hint}")

    def shape(self, name: str) -> Shape:
        return self.p.shapes[name]

    def _node(self, node: Node) -> None:
        kept = self.lifted.recognised.get(node.outputs[0]) if self.lifted else None
        try:
            args = [self.expr(i) for i in node.inputs]
            if kept is not None and kept[0] == node:  # unchanged: the call TVM imported
                results = [kept[1].rebuild(args, self.renamed)]
            else:
                results = LOWER_RULES[node.op](self, node, args)
        except PetError as e:
            raise type(e)(f"while lowering `{node.describe()}` to Relax: {e}") from None
        for name, value in zip(node.outputs, results):
            is_var = isinstance(value, relax.Var)
            self.env[name] = value if is_var else self.emit(value, name)


LowerRule = Callable[[_Lowerer, Node, list], list]


def _conv_lower(low: _Lowerer, node: Node, args: list) -> list:
    a, nsp = node.attrs, len(low.shape(node.inputs[0])) - 2
    if a.get("winograd"):  # the same function, by Winograd's algorithm (tvm_pet.relax.winograd)
        return [winograd.conv2d(low.emit, args[0], args[1], low.shape(node.inputs[0]),
                                low.shape(node.inputs[1]), a, a["winograd"],
                                products=wino.products(a))]
    if a.get("im2col"):  # the same products, as one matrix product (tvm_pet.relax.im2col)
        return [im2col.conv(low.emit, args[0], args[1], low.shape(node.inputs[0]),
                            low.shape(node.inputs[1]), a, a["im2col"])]
    conv = (rnn.conv1d, rnn.conv2d, rnn.conv3d)[nsp - 1]
    return [conv(args[0], args[1], strides=a["strides"], padding=a["pads"],
                 dilation=a["dilations"], groups=a["groups"])]


def _avgpool_lower(low: _Lowerer, node: Node, args: list) -> list:
    a = node.attrs
    nsp = len(a["kernel"])
    pool = (rnn.avg_pool1d, rnn.avg_pool2d, rnn.avg_pool3d)[nsp - 1]
    return [pool(args[0], pool_size=a["kernel"], strides=a["strides"], padding=a["pads"],
                 dilation=(1,) * nsp, ceil_mode=False,
                 count_include_pad=a["count_include_pad"])]


def _channel(low: _Lowerer, vector: relax.Expr, rank: int) -> relax.Expr:
    return low.emit(relax.op.reshape(vector, (-1,) + (1,) * (rank - 2)), "channel")


def _batchnorm_lower(low: _Lowerer, node: Node, args: list) -> list:
    rank = len(low.shape(node.inputs[0]))
    scaled = low.emit(relax.op.multiply(args[0], _channel(low, args[1], rank)), node.outputs[0])
    return [relax.op.add(scaled, _channel(low, args[2], rank))]


def _split_lower(low: _Lowerer, node: Node, args: list) -> list:
    sizes = node.attrs["sizes"]
    if len(sizes) == 1:
        return [args[0]]
    cuts = [int(c) for c in np.cumsum(sizes)[:-1]]
    parts = low.emit(relax.op.split(args[0], cuts, axis=node.attrs["axis"]), node.outputs[0])
    return [relax.TupleGetItem(parts, k) for k in range(len(sizes))]


def _slice_expr(x: relax.Expr, axis: int, begin: int, end: int, step: int = 1) -> relax.Expr:
    return relax.op.strided_slice(x, [axis], [begin], [end], [step])


def _slice_lower(low: _Lowerer, node: Node, args: list) -> list:
    a, shape = node.attrs, low.shape(node.inputs[0])
    axes = [d for d, (b, s, k) in enumerate(zip(a["starts"], a["steps"], a["sizes"]))
            if (b, s, k) != (0, 1, shape[d])]
    if not axes:
        return [args[0]]
    ends = [a["starts"][d] + (a["sizes"][d] - 1) * a["steps"][d] + 1 for d in axes]
    return [relax.op.strided_slice(args[0], axes, [a["starts"][d] for d in axes], ends,
                                   [a["steps"][d] for d in axes])]


def _pad_lower(low: _Lowerer, node: Node, args: list) -> list:
    pads, rank = node.attrs["pads"], len(low.shape(node.inputs[0]))
    width = [p for d in range(rank) for p in (pads[d], pads[rank + d])]  # (before, after) per axis
    return [rnn.pad(args[0], width, pad_value=0.0)]


def _reshape_transpose_lower(low: _Lowerer, node: Node, args: list) -> list:
    a = node.attrs
    split = low.emit(relax.op.reshape(args[0], a["split_shape"]), f"{node.outputs[0]}_split")
    moved = low.emit(relax.op.permute_dims(split, a["perm"]), f"{node.outputs[0]}_moved")
    return [relax.op.reshape(moved, a["shape"])]


def _update_lower(low: _Lowerer, node: Node, args: list) -> list:
    """``base`` with a strided box overwritten by ``patch``, built from slices, reshapes and
    concats one axis at a time (every piece is static, so it legalizes on any target)."""
    base_shape, patch_shape = low.shape(node.inputs[0]), low.shape(node.inputs[1])
    return [_update_axis(low, args[0], base_shape, args[1], patch_shape, node.attrs["starts"],
                         node.attrs["steps"], 0, node.outputs[0])]


def _update_axis(low: _Lowerer, base: relax.Expr, shape: Shape, patch: relax.Expr,
                 patch_shape: Shape, starts, steps, d: int, hint: str) -> relax.Expr:
    """``base`` (the box's rows on axes < d) with the box's part on axes >= d replaced."""
    if d == len(shape):
        return patch
    n, k, b = shape[d], patch_shape[d], starts[d]
    s = steps[d] if k > 1 else 1
    inner = shape[:d] + (k,) + shape[d + 1:]
    if (b, k, s) == (0, n, 1):
        return _update_axis(low, base, shape, patch, patch_shape, starts, steps, d + 1, hint)
    span = k * s
    extra = max(0, b + span - n)  # a strided box may end before its last step does
    if extra:
        width = [0] * (2 * len(shape))
        width[2 * d + 1] = extra
        base = low.emit(rnn.pad(base, width, pad_value=0.0), f"{hint}_ext")
    total = n + extra
    region = low.emit(_slice_expr(base, d, b, b + span), f"{hint}_region")
    if s == 1:
        new = _update_axis(low, region, inner, patch, patch_shape, starts, steps, d + 1, hint)
    else:
        grouped = low.emit(relax.op.reshape(region, shape[:d] + (k, s) + shape[d + 1:]),
                           f"{hint}_grouped")
        picked = low.emit(relax.op.reshape(_slice_expr(grouped, d + 1, 0, 1), inner),
                          f"{hint}_picked")
        written = _update_axis(low, picked, inner, patch, patch_shape, starts, steps, d + 1, hint)
        column = low.emit(relax.op.reshape(written, shape[:d] + (k, 1) + shape[d + 1:]),
                          f"{hint}_column")
        rest = low.emit(_slice_expr(grouped, d + 1, 1, s), f"{hint}_rest")
        merged = low.emit(relax.op.concat([column, rest], axis=d + 1), f"{hint}_merged")
        new = low.emit(relax.op.reshape(merged, shape[:d] + (span,) + shape[d + 1:]),
                       f"{hint}_strided")
    parts = ([low.emit(_slice_expr(base, d, 0, b), f"{hint}_before")] if b > 0 else []) + [new]
    if b + span < total:
        parts.append(low.emit(_slice_expr(base, d, b + span, total), f"{hint}_after"))
    out = low.emit(relax.op.concat(parts, axis=d), f"{hint}_axis{d}") if len(parts) > 1 else new
    return low.emit(_slice_expr(out, d, 0, n), f"{hint}_trim") if extra else out


def _fill_lower(low: _Lowerer, node: Node, args: list) -> list:
    num, den = node.attrs["value"]
    return [relax.const(np.full(node.attrs["shape"], num / den, dtype=np.float32))]


def _opaque_lower(low: _Lowerer, node: Node, args: list) -> list:
    binding = low.lifted.opaque.get(node.outputs[0]) if low.lifted else None
    if binding is not None and binding.fits(node):
        value = low.emit(binding.rebuild(args, low.renamed), node.outputs[0])
        if isinstance(binding.outputs, str):
            return [value]
        getters = unflatten(binding.outputs, iter(range(len(node.outputs))), tuple)
        return [relax.TupleGetItem(_path(value, p[:-1]), p[-1]) for p in _paths(getters)]
    kind = node.attrs["kind"]
    if kind not in OPAQUE_LOWERING:
        raise UnsupportedOperator(f"no Relax lowering for the opaque operator {kind!r} without "
                                  f"its original expression; tvm_pet lowers "
                                  f"{sorted(OPAQUE_LOWERING)}")
    shapes = [low.shape(i) for i in node.inputs]
    return [OPAQUE_LOWERING[kind](node.attrs["params"], args, shapes)]


def _paths(tree, prefix=()) -> Iterator[tuple[int, ...]]:
    for k, t in enumerate(tree):
        yield from (_paths(t, prefix + (k,)) if isinstance(t, tuple) else (prefix + (k,),))


def _path(value: relax.Expr, path: tuple[int, ...]) -> relax.Expr:
    for k in path:
        value = relax.TupleGetItem(value, k)
    return value


#: How each tvm_pet operator is emitted in Relax: ``rule(lowerer, node, input exprs) -> one
#: expression per output`` (a rule may emit intermediate bindings itself).
LOWER_RULES: dict[Op, LowerRule] = {
    Op.ADD: lambda low, n, x: [relax.op.add(x[0], x[1])],
    Op.MUL: lambda low, n, x: [relax.op.multiply(x[0], x[1])],
    Op.CONV: _conv_lower,
    Op.MATMUL: lambda low, n, x: [relax.op.matmul(x[0], x[1])],
    Op.BATCHNORM: _batchnorm_lower,
    Op.AVGPOOL: _avgpool_lower,
    Op.CONCAT: lambda low, n, x: [relax.op.concat(x, axis=n.attrs["axis"]) if len(x) > 1
                                  else x[0]],
    Op.SPLIT: _split_lower,
    Op.SLICE: _slice_lower,
    Op.PAD: _pad_lower,
    Op.TRANSPOSE: lambda low, n, x: [relax.op.permute_dims(x[0], n.attrs["perm"])],
    Op.RESHAPE: lambda low, n, x: [relax.op.reshape(x[0], n.attrs["shape"])],
    Op.RESHAPE_TRANSPOSE: _reshape_transpose_lower,
    Op.UPDATE: _update_lower,
    Op.FILL: _fill_lower,
    Op.OPAQUE: _opaque_lower,
}


# ------------------------------------------------------- opaque operators from tvm_pet's importer
def _maxpool_lower(params: Mapping, args: list, shapes: list[Shape]) -> relax.Expr:
    nsp = len(shapes[0]) - 2
    ones = (1,) * nsp
    maxpool_ceil_pads(params, shapes[0][2:])  # refuses what TVM computes otherwise than ONNX
    pool = (rnn.max_pool1d, rnn.max_pool2d, rnn.max_pool3d)[nsp - 1]
    return pool(args[0], pool_size=params["kernel_shape"], strides=params.get("strides", ones),
                padding=params.get("pads", (0,) * 2 * nsp), dilation=ones,
                ceil_mode=bool(params.get("ceil_mode", 0)))


def _layernorm_lower(params: Mapping, args: list, shapes: list[Shape]) -> relax.Expr:
    rank = len(shapes[0])
    axis = params.get("axis", -1) % rank
    bias = args[2] if len(args) > 2 else relax.const(np.zeros(shapes[1], np.float32))
    return rnn.layer_norm(args[0], args[1], bias, axes=list(range(axis, rank)),
                          epsilon=params.get("epsilon", 1e-5))


def _gelu_lower(params: Mapping, args: list, shapes: list[Shape]) -> relax.Expr:
    approximate = params.get("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise UnsupportedOperator(f"Gelu with approximate={approximate!r}")
    return (rnn.gelu if approximate == "none" else rnn.gelu_tanh)(args[0])


#: Relax forms of the OPAQUE kinds that tvm_pet's ONNX importer makes, by kind.
OPAQUE_LOWERING: dict[str, Callable[[Mapping, list, list[Shape]], relax.Expr]] = {
    "Relu": lambda p, x, s: rnn.relu(x[0]),
    "Sigmoid": lambda p, x, s: relax.op.sigmoid(x[0]),
    "Tanh": lambda p, x, s: relax.op.tanh(x[0]),
    "Exp": lambda p, x, s: relax.op.exp(x[0]),
    "Erf": lambda p, x, s: relax.op.erf(x[0]),
    "Identity": lambda p, x, s: x[0],
    "Softmax": lambda p, x, s: rnn.softmax(x[0], axis=p.get("axis", -1)),
    "Gelu": _gelu_lower,
    "MaxPool": _maxpool_lower,
    "LayerNormalization": _layernorm_lower,
}

