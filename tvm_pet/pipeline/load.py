"""The load stage: a model in, as TVM imports it, lifted for PET (step 0 of ``optimize``).

``tvm-pet optimize``, ``tune`` and ``explore`` import through TVM's own frontends (ONNX with
``from_onnx``, ``.pt2`` files with ``from_exported_program``), run TVM's graph rewrites, and lift
``main`` (:mod:`tvm_pet.relax.frontends`, reached through the TVM toolchain module). The stages
then work on :attr:`LoadedModel.program`; a candidate is lowered back with
:attr:`LoadedModel.lower`, into the imported module, so what PET does not rewrite stays as TVM
imported it. tvm_pet's own ONNX importer stays for ``verify`` and for writing ``optimized.onnx``.

A :class:`~tvm_pet.ir.node.Program` is a model too (:meth:`LoadedModel.from_program`): the
toolchain lowers it on its own, and nothing imports TVM here.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from tvm_pet.errors import PetError
from tvm_pet.ir.node import Program


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One input of the model's ``main``: its name, shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"

    def random(self, rng: np.random.Generator) -> np.ndarray:
        """A random value: standard normal floats, or integers 0 and 1 (valid token ids, masks
        and indices for any model)."""
        if self.dtype.startswith("float"):
            return rng.standard_normal(self.shape).astype(self.dtype)
        return rng.integers(0, 2, self.shape).astype(self.dtype)


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    """A model as the stages see it.

    Args:
        program: the lifted program the search works on.
        lower: Program -> compiler module (the imported module with ``main`` replaced); None
            when the toolchain lowers programs on its own.
        source: where it came from (a path, or what was given).
        kind: ``"onnx"``, ``"torch.export"``, ``"relax"`` or ``"program"``.
        frontend: the importer, in words.
        inputs: the inputs of the compiled module, in order.
        rewrites: TVM's graph rewrites that ran on the imported module (both sides start there).
        onnx_model: the ONNX model, for onnxruntime's reference outputs (None when not ONNX).
        load_time_s: seconds the import took.
        layout: the convolutions' layout every program is lowered into ("NCHW": as imported).
        relayout: layout -> the same import lowered into that layout (None: a model lowered
            in one layout only, as a Program is).
    """

    program: Program
    lower: Callable[[Program], Any] | None
    source: str
    kind: str
    frontend: str
    inputs: tuple[InputSpec, ...]
    rewrites: tuple[str, ...] = ()
    onnx_model: Any = None
    load_time_s: float = 0.0
    layout: str = "NCHW"
    relayout: Callable[[str], "LoadedModel"] | None = None

    def in_layout(self, layout: str) -> "LoadedModel | None":
        """This model with its programs lowered into ``layout`` (itself when it is lowered so
        already; None when it cannot be lowered into another layout). A failure of the layout
        change is a :class:`~tvm_pet.errors.PetError`."""
        if layout == self.layout:
            return self
        return None if self.relayout is None else self.relayout(layout)

    @classmethod
    def from_program(cls, program: Program, source: str | None = None) -> "LoadedModel":
        """A tvm_pet program as a model (no import; the toolchain lowers it on its own)."""
        return cls(program, None, source or program.name, "program", "a tvm_pet Program",
                   tuple(InputSpec(t.name, tuple(t.shape)) for t in program.inputs))

    def random_inputs(self, seed: int) -> dict[str, np.ndarray]:
        """Random inputs of the compiled module by name, in its input order (see
        :meth:`InputSpec.random`)."""
        rng = np.random.default_rng(seed)
        return {spec.name: spec.random(rng) for spec in self.inputs}

    def to_json(self) -> dict:
        """Where the model came from, for ``report.json`` (``source``)."""
        return {"path": self.source, "kind": self.kind, "frontend": self.frontend,
                "load_time_s": self.load_time_s,
                "inputs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype}
                           for s in self.inputs]}


def load(model, *, rewrites: bool = True, layout: str = "NCHW",
         fast_math: bool = False, input_shapes: dict | None = None) -> LoadedModel:
    """Load a model for the stages.

    Args:
        model: an ONNX file path or ``ModelProto``, a ``.pt2`` file (``torch.export.save``), a
            Relax ``IRModule``, a :class:`~tvm_pet.ir.node.Program`, or a :class:`LoadedModel`
            (returned as it is).
        rewrites: run TVM's graph rewrites on the imported module first
            (:mod:`tvm_pet.relax.rewrites`).
        layout: the convolutions' layout every program is lowered into, by TVM's
            ``ConvertLayout`` (:func:`tvm_pet.relax.rewrites.convert_layout`): "NCHW" (as
            imported) or "NHWC". A Program is lowered by the toolchain on its own: "NCHW" only.
        fast_math: lower every program with TVM's ``FastMathTransform``
            (:func:`tvm_pet.relax.rewrites.fast_math`); not for a Program.
        input_shapes: an ONNX model's input shapes by name, for its dynamic dimensions
            (:func:`tvm_pet.relax.frontends.set_input_shapes`); for an ONNX model only.

    Returns:
        The :class:`LoadedModel`.

    Raises:
        ModelError: a file that cannot be read or imported.
        PetError: a ``.pt2`` file without torch (the message names ``tvm-pet[torch]``).
            Also a ``layout`` other than NCHW, or ``fast_math``, for a Program.
    """
    if isinstance(model, LoadedModel):
        return model
    if isinstance(model, Program):
        if layout != "NCHW":
            raise PetError(f"layout {layout!r} is for a model imported through TVM (an ONNX "
                           "file, a .pt2 file or a Relax module), not a tvm_pet Program")
        if fast_math:
            raise PetError("fast math is for a model imported through TVM (an ONNX file, a "
                           ".pt2 file or a Relax module), not a tvm_pet Program")
        if input_shapes:
            raise PetError("input shapes are set for an ONNX model, not a tvm_pet Program")
        return LoadedModel.from_program(model)
    from tvm_pet.pipeline.tvm_backend import load_with_tvm
    return load_with_tvm(model, rewrites=rewrites, layout=layout, fast_math=fast_math,
                         input_shapes=input_shapes)


def describe(model) -> str:
    """The model in words: its path, or its kind."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    if isinstance(model, LoadedModel):
        return model.source
    return "the ONNX model" if hasattr(model, "SerializeToString") else type(model).__name__
