"""How much of a Relax function PET saw: linear FLOPs searched, subprograms, opaque operators.

:class:`PETPass` computes one :class:`Coverage` per function and puts it in its report; the CLI's
human summary prints :meth:`Coverage.summary_line`.

- **linear FLOPs**: the multiply-adds (counted as 2 FLOPs) of every convolution, transposed
  convolution and matmul in the Relax function, whatever their dtype and whether they were lifted;
- **searched**: those of the CONV and MATMUL nodes that lie in a subprogram the search visited;
- **subprograms**: the multi-linear subprograms of the lifted program (before merging);
- **opaque**: the operators kept as OPAQUE nodes of the program, by kind, and the bindings kept
  outside it (integer, mask and shape computations), by Relax operator.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import types
from collections.abc import Mapping

import tvm
from tvm import relax

from tvm_pet.errors import ShapeError
from tvm_pet.ir.node import Program
from tvm_pet.ir.ops import Op
from tvm_pet.relax.lifted_function import Lifted
from tvm_pet.relax.relax_types import call_kind, static_shape
from tvm_pet.search.partition import searchable_subprograms

_CONVS = frozenset({"relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d"})
_CONV_TRANSPOSES = frozenset({"relax.nn.conv1d_transpose", "relax.nn.conv2d_transpose",
                              "relax.nn.conv3d_transpose"})


@dataclasses.dataclass(frozen=True)
class Coverage:
    """What PET saw of one function.

    Attributes:
        function: the function's name.
        linear_flops: FLOPs of every conv and matmul in the function.
        searched_flops: FLOPs of the convs and matmuls inside searched subprograms.
        subprograms: multi-linear subprograms of the lifted program with a reducing
            operator (conv, matmul): those the search rewrites.
        searched_subprograms: those the search visited.
        opaque: OPAQUE nodes of the program, by kind.
        outside: bindings kept outside the program, by Relax operator.
    """

    function: str
    linear_flops: int
    searched_flops: int
    subprograms: int = 0
    searched_subprograms: int = 0
    opaque: Mapping[str, int] = dataclasses.field(default_factory=dict)
    outside: Mapping[str, int] = dataclasses.field(default_factory=dict)

    @property
    def fraction(self) -> float:
        """Searched over all linear FLOPs (1.0 for a function without any)."""
        return self.searched_flops / self.linear_flops if self.linear_flops else 1.0

    def to_json(self) -> dict:
        return {"function": self.function, "linear_flops": self.linear_flops,
                "searched_flops": self.searched_flops, "coverage": self.fraction,
                "subprograms": self.subprograms,
                "searched_subprograms": self.searched_subprograms,
                "opaque": dict(self.opaque), "outside": dict(self.outside)}

    def summary_line(self) -> str:
        """One line for a human summary.

        >>> Coverage("main", 4_000_000, 3_000_000, 5, 5, {"Relu": 4}).summary_line()
        'main: 75.0% of linear FLOPs searched (3.0 of 4.0 MFLOP), 5 subprograms; opaque: Relu x4'
        """
        line = (f"{self.function}: {100 * self.fraction:.1f}% of linear FLOPs searched "
                f"({self.searched_flops / 1e6:.1f} of {self.linear_flops / 1e6:.1f} MFLOP), "
                f"{self.searched_subprograms} subprogram"
                f"{'' if self.searched_subprograms == 1 else 's'}")
        if self.searched_subprograms != self.subprograms:
            line += f" of {self.subprograms}"
        if self.opaque:
            line += "; opaque: " + _counts(self.opaque)
        if self.outside:
            line += "; outside the program: " + _counts(self.outside)
        return line


def _counts(counts: Mapping[str, int]) -> str:
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{k.removeprefix('relax.')} x{n}" for k, n in ordered)


def coverage(func: relax.Function, name: str, lifted: Lifted | None = None,
             searched: frozenset[str] | None = None) -> Coverage:
    """The coverage of ``func``.

    Args:
        func: the Relax function as it came in.
        name: its name in the report.
        lifted: its lifted form, or None when it could not be lifted (nothing searched).
        searched: names of the subprograms the search visited (``sub0``, ``sub1``, ... of the
            first partition; merged ones like ``sub2+sub3`` count for each part); None when the
            search did not run.

    Returns:
        The :class:`Coverage`.
    """
    total = sum(_relax_flops(call) for call in _calls(func))
    if lifted is None:
        return Coverage(name, total, 0)
    program = lifted.program
    # a subprogram without a reducing operator (a lone Pad: swin_t has five) has nothing the
    # search rewrites, and is not counted as left unsearched
    subs = searchable_subprograms(program)
    visited = {part for label in (searched or ()) for part in label.split("+")}
    done = [s for s in subs if s.name in visited]
    flops = sum(_node_flops(program, k) for s in done for k in s.nodes)
    opaque = collections.Counter(n.attrs["kind"] for n in program.nodes if n.op is Op.OPAQUE)
    outside = collections.Counter(call_kind(b.value) if isinstance(b.value, relax.Call)
                                  else type(b.value).__name__ for b in lifted.outside)
    return Coverage(name, total, flops, len(subs), len(done),
                    types.MappingProxyType(dict(opaque)), types.MappingProxyType(dict(outside)))


def _calls(func: relax.Function):
    body = func.body
    for block in (body.blocks if isinstance(body, relax.SeqExpr) else ()):
        for binding in block.bindings:
            if isinstance(binding.value, relax.Call) and isinstance(binding.value.op, tvm.ir.Op):
                yield binding.value


def _shape(expr: relax.Expr) -> tuple[int, ...] | None:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType):
        return None
    try:
        return static_shape(ty, "operand")
    except ShapeError:
        return None


def _relax_flops(call: relax.Call) -> int:
    """2 x the multiply-adds of a conv, transposed conv or matmul call (0 for anything else or
    a symbolic shape)."""
    kind = call.op.name
    if kind not in _CONVS | _CONV_TRANSPOSES | {"relax.matmul"}:
        return 0
    shapes = [_shape(call.args[0]), _shape(call.args[1]), _shape(call)]
    if any(s is None for s in shapes):
        return 0
    x, w, out = shapes
    if kind == "relax.matmul":
        return 2 * math.prod(out) * x[-1]
    if kind in _CONVS:
        return 2 * math.prod(out) * math.prod(w[1:])
    return 2 * math.prod(x) * math.prod(w[1:])  # each input element meets O/g x kernel weights


def _node_flops(program: Program, k: int) -> int:
    node = program.nodes[k]
    if node.op is Op.CONV:
        w = program.shapes[node.inputs[1]]
        return 2 * math.prod(program.shapes[node.outputs[0]]) * math.prod(w[1:])
    if node.op is Op.MATMUL:
        a = program.shapes[node.inputs[0]]
        return 2 * math.prod(program.shapes[node.outputs[0]]) * a[-1]
    return 0


__all__ = ["Coverage", "coverage"]
