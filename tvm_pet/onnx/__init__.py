"""ONNX import and export: the model-file edge of tvm_pet.

Only this package imports :mod:`onnx`. :func:`import_model` reads a static-shape float32 model as a
:class:`~tvm_pet.ir.Program` (multi-linear operators as IR ops, the rest OPAQUE);
:func:`export_model` and :func:`save_model` write a program back as an ONNX model.

>>> from tvm_pet.ir import ProgramBuilder
>>> b = ProgramBuilder(); x = b.input("x", (1, 4)); y = b.mul(x, x, out="y")
>>> import_model(export_model(b.build([y]))).outputs
('y',)
"""
from tvm_pet.onnx.exporter import export_model, save_model
from tvm_pet.onnx.importer import LINEAR_CONVERTERS, SUPPORTED_OPSETS, import_model

__all__ = ["import_model", "export_model", "save_model", "LINEAR_CONVERTERS", "SUPPORTED_OPSETS"]
