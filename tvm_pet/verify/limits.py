"""The size limit that keeps the verifier and the search bounded in memory.

The verifier draws ``tests`` random residues (int64) for every element of every input and
weight; the search's float self-check and post-optimizations evaluate whole tensors. Both are
linear in tensor size, so one bound on the largest tensor bounds them: a program with a larger
tensor is refused up front (by :class:`~tvm_pet.relax.PETPass`, ``tvm-pet optimize``,
``tvm-pet verify`` and :func:`~tvm_pet.verify.verifier.random_env`) instead of exhausting memory.

The bound, 2**27 elements (512 MiB as float32), admits the largest tensors of common models
(VGG's 25088 x 4096 fully connected weight has about 1.03e8 elements).

>>> from tvm_pet.ir import ProgramBuilder
>>> b = ProgramBuilder(); x = b.input("x", (1 << 20, 1 << 20)); p = b.build([b.add(x, x)])
>>> try:
...     check_tensor_sizes(p)
... except ShapeError as e:
...     print(str(e).split(";")[0])
tensor 'x' has shape [1048576, 1048576] (1099511627776 elements)
"""
from __future__ import annotations

import math

from tvm_pet.errors import ShapeError
from tvm_pet.ir.node import Program

#: The most elements of any one tensor of a program that tvm_pet verifies or searches.
MAX_TENSOR_ELEMENTS = 1 << 27


def check_tensor_sizes(program: Program, limit: int = MAX_TENSOR_ELEMENTS) -> None:
    """Raise :class:`ShapeError` naming the largest tensor of ``program`` if it has more than
    ``limit`` elements (inputs, weights, intermediates and outputs are all counted)."""
    name, shape = max(program.shapes.items(), key=lambda item: math.prod(item[1]),
                      default=(None, ()))
    size = math.prod(shape)
    if name is not None and size > limit:
        raise ShapeError(f"tensor {name!r} has shape {list(shape)} ({size} elements); tvm_pet "
                         f"verifies and searches tensors of at most {limit} elements: use "
                         f"smaller shapes (e.g. a smaller batch or image) or leave this part of "
                         f"the model to TVM alone")
