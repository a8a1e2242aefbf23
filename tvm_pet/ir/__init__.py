"""tvm_pet's tensor-program IR: operator kinds, immutable nodes and programs, shape rules, and
structural keys (:func:`~tvm_pet.ir.keys.canonical`)."""
from tvm_pet.ir.check import check_program, infer_shapes
from tvm_pet.ir.node import Attrs, Node, Program, Shape, TensorSpec, weight_key
from tvm_pet.ir.ops import (BIJECTIVE_LAYOUT, COMMUTATIVE, ELEMENTWISE, LAYOUT, MULTI_OUTPUT,
                            MULTILINEAR, REDUCING, Op)
from tvm_pet.ir.shapes import broadcast_shapes, conv_out_size
from tvm_pet.ir.builder import ProgramBuilder
from tvm_pet.ir.keys import canonical

__all__ = ["ProgramBuilder", "Attrs", "Node", "Op", "Program", "Shape", "TensorSpec", "check_program",
           "infer_shapes", "weight_key", "broadcast_shapes", "conv_out_size", "MULTILINEAR",
           "LAYOUT", "BIJECTIVE_LAYOUT", "ELEMENTWISE", "REDUCING", "MULTI_OUTPUT", "COMMUTATIVE",
           "canonical"]
