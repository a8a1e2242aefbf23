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
"""
from __future__ import annotations

import enum


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
