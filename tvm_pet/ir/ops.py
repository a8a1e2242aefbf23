"""The closed set of operator kinds, and the properties of each as sets of kinds.

Grammar of a program (written out before the data types, as Autodidax does)::

    program  ::= inputs weights node* outputs
    input    ::= name : shape                      runtime data
    weight   ::= name : shape = array              a constant with values
    node     ::= (out, ...) = Op(in, ...; attrs)   every `in` is defined earlier
    outputs  ::= name ...

Attributes of each kind (all tuples are per axis, spatial axes for CONV and AVGPOOL):

    ADD, MUL          -                                   NumPy broadcasting
    CONV              strides, pads (begins + ends), dilations, groups
    MATMUL            -                                   NumPy matmul, rank >= 2, batch broadcast
    BATCHNORM         -                                   x * scale[c] + shift[c], c = axis 1
    AVGPOOL           kernel, strides, pads, count_include_pad
    CONCAT            axis
    SPLIT             axis, sizes                          one output per size
    SLICE             starts, steps, sizes                 one entry per axis, steps > 0
    PAD               pads (begins + ends)                 zero padding, pads >= 0
    TRANSPOSE         perm
    RESHAPE           shape
    RESHAPE_TRANSPOSE split_shape, perm, shape             reshape, transpose, reshape (paper 4.2)
    UPDATE            starts, steps                        base with a strided box overwritten by patch
    FILL              shape, value (num, den)              a constant tensor, every element num/den
    OPAQUE            kind, shapes, params                 a non-linear operator: never mutated

An OPAQUE node's ``params`` may hold :data:`ONNX_INPUTS`: its ONNX inputs that are not program
tensors (see :func:`onnx_operands`).
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

import numpy as np


class Op(enum.Enum):
    """Every operator kind tvm_pet knows. Rule tables are keyed by these."""

    ADD = "Add"
    MUL = "Mul"
    CONV = "Conv"
    MATMUL = "MatMul"
    BATCHNORM = "BatchNorm"
    AVGPOOL = "AvgPool"
    CONCAT = "Concat"
    SPLIT = "Split"
    SLICE = "Slice"
    PAD = "Pad"
    TRANSPOSE = "Transpose"
    RESHAPE = "Reshape"
    RESHAPE_TRANSPOSE = "ReshapeTranspose"
    UPDATE = "Update"
    FILL = "Fill"
    OPAQUE = "Opaque"


#: Operators whose output is a multi-linear (polynomial) function of their inputs.
MULTILINEAR = frozenset(Op) - {Op.OPAQUE}
#: Operators that only move data: each output element is one input element or zero.
LAYOUT = frozenset({Op.CONCAT, Op.SPLIT, Op.SLICE, Op.PAD, Op.TRANSPOSE, Op.RESHAPE,
                    Op.RESHAPE_TRANSPOSE, Op.UPDATE})
#: Operators that reorganise data without dropping or adding any element.
BIJECTIVE_LAYOUT = frozenset({Op.TRANSPOSE, Op.RESHAPE, Op.RESHAPE_TRANSPOSE})
#: Operators applied element by element (with broadcasting).
ELEMENTWISE = frozenset({Op.ADD, Op.MUL, Op.BATCHNORM})
#: Operators that sum products over a reduction (the expensive ones).
REDUCING = frozenset({Op.CONV, Op.MATMUL, Op.AVGPOOL})
#: Operators with more than one output.
MULTI_OUTPUT = frozenset({Op.SPLIT, Op.OPAQUE})
#: Operators where swapping the two inputs does not change the result.
COMMUTATIVE = frozenset({Op.ADD, Op.MUL})


#: ``params`` key of an OPAQUE node: one entry per ONNX input, ``("tensor",)`` (the next IR
#: input), ``("absent",)`` or ``("const", dtype, shape, values)``. Present only when needed.
ONNX_INPUTS = "onnx_inputs"


def onnx_operands(layout: Sequence[tuple] | None, tensors: Sequence, *, absent,
                  const: Callable[[np.ndarray], object]) -> list:
    """An OPAQUE node's ONNX inputs in order, from its :data:`ONNX_INPUTS` ``layout``: the next
    of ``tensors`` for each ``("tensor",)``, ``absent`` for each ``("absent",)``, and
    ``const(array)`` for each constant; ``tensors`` as they are when there is no layout.

    >>> onnx_operands((("tensor",), ("absent",), ("const", "int64", (2,), (3, 4))), ["x"],
    ...               absent="", const=lambda a: a.tolist())
    ['x', '', [3, 4]]
    """
    if layout is None:
        return list(tensors)
    remaining, operands = iter(tensors), []
    for entry in layout:
        if entry[0] == "tensor":
            operands.append(next(remaining))
        elif entry[0] == "absent":
            operands.append(absent)
        else:
            _, dtype, shape, values = entry
            operands.append(const(np.array(values, dtype=dtype).reshape(shape)))
    return operands
