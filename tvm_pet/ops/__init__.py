"""Rule tables, one per meaning, each keyed by :class:`~tvm_pet.ir.Op`.

- :mod:`~tvm_pet.ops.float_eval`: NumPy evaluation of whole tensors (``FLOAT_RULES``);
- :mod:`~tvm_pet.ops.gather`: each operator as sums of products of gathered input elements
  (``GATHER_RULES``), from which exact mod-p evaluation (:mod:`~tvm_pet.ops.modp`) is derived;
- :mod:`~tvm_pet.ops.labels`: box (split-point) propagation (``LABEL_RULES``);
- :mod:`~tvm_pet.ops.restrict`: computing an operator on a sub-box of its output (``RESTRICT_RULES``).
"""
