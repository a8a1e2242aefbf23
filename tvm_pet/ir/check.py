"""Whole-program checks: topological order, single assignment, shape agreement."""
from __future__ import annotations

from tvm_pet.errors import PetError, ProgramError, ShapeError
from tvm_pet.ir.node import Program, Shape
from tvm_pet.ir.shapes import ARITY, SHAPE_RULES


def infer_shapes(program: Program) -> dict[str, Shape]:
    """Infer the shape of every tensor, checking order, single assignment and arity on the way.

    Raises:
        ProgramError: a tensor used before it is defined, or defined twice; a wrong input count.
        ShapeError: shapes that do not fit an operator; the message names the node.
    """
    shapes: dict[str, Shape] = {}
    for t in program.inputs:
        _define(shapes, t.name, t.shape, "input")
    for name, value in program.weights.items():
        _define(shapes, name, tuple(value.shape), "weight")
    for node in program.nodes:
        missing = [i for i in node.inputs if i not in shapes]
        if missing:
            raise ProgramError(f"while checking `{node.describe()}`: {missing} not defined before "
                               f"use (nodes must be in topological order)")
        arity = ARITY[node.op]
        if (arity is not None and len(node.inputs) != arity) or (arity is None and not node.inputs):
            raise ProgramError(f"`{node.describe()}` takes {arity or 'at least 1'} inputs, "
                               f"got {len(node.inputs)}")
        try:
            outs = SHAPE_RULES[node.op](node.attrs, [shapes[i] for i in node.inputs])
        except ShapeError as e:
            raise ShapeError(f"while checking `{node.describe()}`: {e}") from None
        except (KeyError, TypeError) as e:
            raise ProgramError(f"`{node.describe()}` has missing or malformed attributes: {e!r}") from None
        if len(outs) != len(node.outputs):
            raise ProgramError(f"`{node.describe()}` defines {len(node.outputs)} outputs, "
                               f"its operator makes {len(outs)}")
        for name, shape in zip(node.outputs, outs):
            if any(d < 1 for d in shape):
                raise ShapeError(f"while checking `{node.describe()}`: zero-size result {list(shape)}")
            _define(shapes, name, tuple(shape), f"`{node.describe()}`")
    for o in program.outputs:
        if o not in shapes:
            raise ProgramError(f"program output {o!r} is never defined")
    return shapes


def _define(shapes: dict[str, Shape], name: str, shape: Shape, where: str) -> None:
    if name in shapes:
        raise ProgramError(f"tensor {name!r} is defined twice (again by {where})")
    if any(int(d) < 1 for d in shape):
        raise ShapeError(f"tensor {name!r} of {where} has a zero-size or negative dimension "
                         f"{list(shape)}")
    shapes[name] = tuple(int(d) for d in shape)


def check_program(program: Program) -> Program:
    """Check a program again from scratch and return it; raise a :class:`PetError` if malformed."""
    if not program.outputs:
        raise ProgramError("a program needs at least one output")
    infer_shapes(program)
    return program


__all__ = ["check_program", "infer_shapes", "PetError"]
