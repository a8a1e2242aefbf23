"""The Relax edge of tvm_pet: lift a Relax function into a :class:`Program`, lower one back.

Where it sits: between TVM and the engine. The Relax pass lifts each ``main`` with
:func:`from_relax`, optimizes ``lifted.program`` and emits the result with :func:`to_relax`; the
measurement helper compiles standalone programs with :func:`program_to_module`. This is the only
module that spells Relax operator names.

Lifting (one rule per Relax op name in :data:`LIFT_RULES`):

- float32 parameters become program inputs, ``relax.const`` data becomes weights (constants only
  reshaped or transposed are folded into new weights);
- other parameters (token ids, masks) and bindings that read no tensor the program computes
  (integer, mask and shape computations, embedding lookups) are kept outside the program and
  emitted first, verbatim; a float32 value of theirs that the program reads is a program input;
- add, multiply, subtract, divide or negate by a constant, conv1d/2d/3d (NC* layouts), matmul,
  permute_dims, reshape-like ops, concat, split, strided_slice, zero nn.pad, avg_pool1d/2d/3d,
  spatial mean, adaptive average pooling whose output divides its input, broadcast_to and astype
  that change nothing, and inference batch_norm (a BATCHNORM with folded scale and shift) become
  tvm_pet ops;
- any other call becomes an OPAQUE node whose original expression is kept in
  :class:`Lifted` and re-emitted unchanged. Its ``kind`` is the ONNX name where tvm_pet can
  evaluate it (:data:`EVALUABLE_OPAQUE`: Relu, Softmax, MaxPool, LayerNormalization, ...), so
  that lifted programs run in :func:`~tvm_pet.verify.interpreter.evaluate`; else the Relax name.

Lowering is :data:`LOWER_RULES`, one rule per :class:`Op`; OPAQUE nodes from tvm_pet's ONNX
importer lower through :data:`OPAQUE_LOWERING` by kind.

>>> import numpy as np
>>> from tvm_pet.ir import ProgramBuilder
>>> b = ProgramBuilder(); x = b.input("x", (1, 4)); y = b.mul(x, b.weight("w", np.ones((1, 4))))
>>> lifted = from_relax(to_relax(b.build([y])))
>>> [n.op.value for n in lifted.program.nodes]
['Mul']
"""
from __future__ import annotations

import tvm
from tvm import relax

from tvm_pet.errors import UnsupportedOperator
from tvm_pet.ir.node import Program
from tvm_pet.relax.lifting import EVALUABLE_OPAQUE, LIFT_RULES, _Lifter
from tvm_pet.relax.lifted_function import Lifted, OpaqueBinding
from tvm_pet.relax.lower import LOWER_RULES, OPAQUE_LOWERING, _Lowerer

__all__ = ["from_relax", "to_relax", "program_to_module", "Lifted", "OpaqueBinding", "LIFT_RULES",
           "LOWER_RULES", "OPAQUE_LOWERING", "EVALUABLE_OPAQUE"]


# ------------------------------------------------------------------------------------ public API
def from_relax(func: relax.Function, module: tvm.IRModule | None = None) -> Lifted:
    """Lift a Relax function into a tvm_pet program, keeping what rebuilding it needs.

    Args:
        func: a Relax function with static-shape float32 tensor parameters, e.g. ``mod["main"]``
            of ``relax.frontend.onnx.from_onnx(model)`` (initializers as constants) or one
            written with a BlockBuilder or TVMScript.
        module: the module holding ``func``, where its ``call_tir`` functions are looked up:
            those TVM's frontends emit for ONNX operators are then lifted as those operators
            (``Max``, ``Min``: :data:`~tvm_pet.relax.lifting.CALL_TIR_KINDS`).

    Returns:
        The :class:`Lifted` program; calls no rule maps are OPAQUE nodes with their expression.

    Raises:
        UnsupportedOperator: a non-tensor or non-float32 parameter, or a binding tvm_pet cannot
            represent (a non-tensor value, an operator with no float32 tensor input).
        ShapeError: a symbolic or zero-size shape.
    """
    if not isinstance(func, relax.Function):
        raise UnsupportedOperator(f"from_relax takes a relax.Function, got {type(func).__name__} "
                                  f"(for a module, pass mod['main'])")
    return _Lifter(func, module).run()


def to_relax(program: Program, lifted: Lifted | None = None) -> relax.Function:
    """Emit ``program`` as a Relax function (one dataflow block).

    Args:
        program: the program to emit.
        lifted: the lift it came from, if any: its parameter Vars, signature order, attributes
            and result structure are kept, and OPAQUE nodes re-emit their original expressions.

    Returns:
        The function, named like the lifted one (``"main"`` otherwise).

    Raises:
        UnsupportedOperator: an OPAQUE node without a kept expression whose kind has no entry in
            :data:`OPAQUE_LOWERING`.
        ProgramError: program inputs that are not parameters of the lifted function.
    """
    mod = _Lowerer(program, lifted).module()
    return mod[lifted.name if lifted else "main"]


def program_to_module(program: Program) -> tvm.IRModule:
    """A module whose ``main`` computes ``program`` (its inputs as parameters, in order).

    >>> from tvm_pet.ir import ProgramBuilder
    >>> b = ProgramBuilder(); x = b.input("x", (2, 3)); y = b.add(x, x)
    >>> [p.name for p in program_to_module(b.build([y]))["main"].params]
    ['x']
    """
    return _Lowerer(program, None).module()


def region_to_module(program: Program, lifted: Lifted | None = None,
                     functions: tvm.IRModule | None = None) -> tvm.IRModule:
    """A module whose ``main`` computes ``program``, a region cut out of a lifted model
    (:func:`tvm_pet.search.region.fusion_region`): its inputs become parameters, its OPAQUE nodes
    their kept expressions, and nothing the model computes outside the program is emitted. The
    functions those expressions call (a ``call_tir``'s, as TVM's ONNX frontend makes of ``Clip``)
    are taken from ``functions``, the module the model was imported as.

    Raises:
        UnsupportedOperator: an OPAQUE expression reads a value computed outside the program
            (a mask, a shape), which a region cannot give it.
    """
    mod = _Lowerer(program, lifted, standalone=True).module()
    if functions is not None:
        for gv in relax.analysis.all_global_vars(mod["main"]):
            if gv.name_hint not in mod.global_var_map_ and gv in functions.functions:
                mod[gv] = functions[gv]
    try:
        relax.analysis.well_formed(mod)  # raises on a Var that is not defined in the module
    except ValueError as e:
        raise UnsupportedOperator(f"{program.name} reads a value computed outside it "
                                  f"({e}); it is costed in the whole model instead") from None
    return mod
