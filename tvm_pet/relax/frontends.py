"""A model file in through TVM's own frontends, lifted for PET, and lowered back into that module.

Where it sits: the first step of ``tvm-pet optimize``, ``tune`` and ``explore``
(:mod:`tvm_pet.pipeline.load` reaches it through the TVM toolchain). Whatever TVM imports and
runs goes through: the imported module's ``main`` is lifted with
:func:`~tvm_pet.relax.adapter.from_relax` (bindings PET cannot represent stay OPAQUE with their
Relax expression), and a candidate program is lowered with
:func:`~tvm_pet.relax.adapter.to_relax` into a copy of the imported module, so the parts PET
did not rewrite stay exactly as TVM imported them (:class:`ModuleLowering`).

=================  ===================================================  =======================
file               frontend                                             needs
=================  ===================================================  =======================
``*.onnx``         ``tvm.relax.frontend.onnx.from_onnx``                onnx (any opset TVM
                   (initializers as constants)                          imports)
``*.pt2``          ``torch.export.load`` then                           ``pip install
                   ``tvm.relax.frontend.torch.from_exported_program``   tvm-pet[torch]``
an ``IRModule``    taken as it is                                       \\-
=================  ===================================================  =======================

An ONNX model is first made ready for ``from_onnx`` by :mod:`tvm_pet.relax.onnx_prepare` (the
input shapes asked for set, its shape arithmetic folded into constants, what TVM 0.27 reads
wrongly mended); onnxruntime's reference outputs come from the model with its shapes set. Where
a tensor's shape is known only at run time, the error names the operator that makes it so.

Before lifting, TVM's own graph rewrites (:func:`~tvm_pet.relax.rewrites.tvm_rewrites`) run on
the imported module unless turned off: the baseline and PET then start from the same module.
With a ``layout`` other than NCHW, every program is lowered into that layout
(:func:`~tvm_pet.relax.rewrites.convert_layout`), the original as much as PET's candidates.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import os
import pathlib
import re
import sys
import warnings

import tvm
from tvm import relax

from tvm_pet.errors import ModelError, PetError
from tvm_pet.ir.node import Program
from tvm_pet.relax.adapter import Lifted, from_relax, region_to_module, to_relax
from tvm_pet.relax.onnx_prepare import (dynamic_shape_cause, fold_shape_computations,
                                        mend_onnx_model, set_input_shapes)
from tvm_pet.relax.relax_types import known_shape
from tvm_pet.relax.rewrites import LAYOUTS, REWRITES, convert_layout, fast_math, tvm_rewrites

#: The TVM frontend used for each kind of model, in words for the report.
FRONTENDS = {"onnx": "tvm.relax.frontend.onnx.from_onnx",
             "torch.export": "tvm.relax.frontend.torch.from_exported_program",
             "relax": "the Relax module as given"}
#: What to install for ``.pt2`` files.
TORCH_EXTRA = "pip install tvm-pet[torch]"


@dataclasses.dataclass(frozen=True)
class Imported:
    """A model as TVM imported it (and rewrote it), and its ``main`` lifted.

    Args:
        module: the imported module after the rewrites.
        lifted: ``module["main"]`` lifted for PET.
        kind: ``"onnx"``, ``"torch.export"`` or ``"relax"``.
        rewrites: the TVM rewrites that ran (empty when turned off), and the layout conversion
            that runs when a program is lowered (when there is one).
        onnx_model: the ONNX model, for onnxruntime's reference outputs (None otherwise).
        layout: the convolutions' layout programs are lowered into (a key of
            :data:`~tvm_pet.relax.rewrites.LAYOUTS`).
        fast_math: lower programs with TVM's ``FastMathTransform``
            (:func:`~tvm_pet.relax.rewrites.fast_math`).
    """

    module: tvm.IRModule
    lifted: Lifted
    kind: str
    rewrites: tuple[str, ...]
    onnx_model: object | None = None
    layout: str = "NCHW"
    fast_math: bool = False

    @functools.cached_property
    def lowering(self) -> "ModuleLowering":
        """Program -> IRModule into this module, in ``layout`` (:class:`ModuleLowering`)."""
        return ModuleLowering(self.module, self.lifted, self.layout, self.fast_math)

    @property
    def frontend(self) -> str:
        """The frontend, in words."""
        return FRONTENDS[self.kind]

    def in_layout(self, layout: str) -> "Imported":
        """The same import, its programs lowered into ``layout`` (the original's lowering
        checked: a failure of TVM's ``ConvertLayout`` is a :class:`ModelError`)."""
        if layout not in LAYOUTS:
            raise PetError(f"layout {layout!r}: choose one of {', '.join(LAYOUTS)}")
        rewrites = tuple(r for r in self.rewrites if r not in _when_lowered(self.layout,
                                                                            self.fast_math))
        other = dataclasses.replace(self, layout=layout,
                                    rewrites=rewrites + _when_lowered(layout, self.fast_math))
        other.lowering(self.lifted.program)
        return other

    def inputs(self) -> tuple[tuple[str, tuple[int, ...], str], ...]:
        """``(name, shape, dtype)`` of each parameter of ``main``, in signature order."""
        specs = []
        for param in self.module["main"].params:
            ty = param.ty
            if not isinstance(ty, relax.TensorType) or ty.shape is None:
                raise PetError(f"input {param.name!r} of the imported model is not a tensor of "
                               f"known shape ({ty}); tvm-pet optimizes static-shape models")
            try:
                shape = tuple(int(d) for d in ty.shape)
            except TypeError:
                raise PetError(f"input {param.name!r} has a symbolic shape {list(ty.shape)}; "
                               f"export the model with static input shapes") from None
            specs.append((param.name, shape, str(ty.dtype)))
        return tuple(specs)


class ModuleLowering:
    """Program -> IRModule: the imported module with ``main`` replaced by the program.

    The original program lowers to the imported module itself (the baseline is exactly what TVM
    imported), unless :meth:`lower_original_as_candidates` replaced it; any other program is
    emitted with :func:`~tvm_pet.relax.adapter.to_relax`, its OPAQUE nodes as their kept Relax
    expressions. Both then go into ``layout``
    (:func:`~tvm_pet.relax.rewrites.convert_layout`; nothing to do for NCHW) and, with
    ``fast_math``, through TVM's ``FastMathTransform``, and so do the regions the measured cost
    lowers on their own.
    """

    def __init__(self, module: tvm.IRModule, lifted: Lifted, layout: str = "NCHW",
                 fast_math: bool = False):
        self.module, self.lifted, self.layout = module, lifted, layout
        self.fast_math = fast_math
        self._original: tvm.IRModule | None = None
        #: TVM's import, in ``layout``, once :meth:`lower_original_as_candidates` replaced it
        #: as the original's module; else None.
        self.imported: tvm.IRModule | None = None

    def round_trip(self) -> tvm.IRModule:
        """The original program lowered as any candidate is (:func:`to_relax`), in ``layout``.
        Where the lift dropped an operator that does nothing (``broadcast_to`` its own shape,
        ``astype`` to its own dtype) or merged a chain of reshapes, its kernels differ from the
        import's: transformers' attention kernels do."""
        lowered = self.module.clone()
        lowered[self.lifted.name] = to_relax(self.lifted.program, self.lifted)
        return self._converted(lowered)

    def lower_original_as_candidates(self, round_trip: tvm.IRModule) -> None:
        """From now on the original program lowers to ``round_trip`` (:meth:`round_trip`), so
        that a candidate's unchanged operators compile to the baseline's own kernels; the
        import stays in :attr:`imported`."""
        self.imported = self(self.lifted.program)
        self._original = round_trip

    def __call__(self, program: Program) -> tvm.IRModule:
        if program is self.lifted.program:
            if self._original is None:
                self._original = self._converted(self.module)
            return self._original
        func = to_relax(program, self.lifted)
        lowered = self.module.clone()
        lowered[self.lifted.name] = func
        return self._converted(lowered)

    def region(self, program: Program) -> tvm.IRModule:
        """A region of a candidate (:mod:`tvm_pet.search.region`) as a module of its own, its
        OPAQUE nodes as their kept expressions (:func:`~tvm_pet.relax.adapter.region_to_module`),
        with the imported functions those call (the ``call_tir`` of MobileNetV2's ``Clip``: its
        regions failed without them, and every candidate was costed in the whole model), in
        ``layout``."""
        return self._converted(region_to_module(program, self.lifted, self.module))

    def _converted(self, module: tvm.IRModule) -> tvm.IRModule:
        """``module`` in ``layout``, and after ``FastMathTransform`` with ``fast_math``; a
        failure of TVM's passes is a :class:`ModelError`."""
        module = _run(lambda m: convert_layout(m, self.layout), module,
                      f"TVM's ConvertLayout to {self.layout}")
        if self.fast_math:
            module = _run(fast_math, module, "TVM's FastMathTransform")
        return module


def import_model(model, *, rewrites: bool = True, layout: str = "NCHW",
                 fast_math: bool = False, input_shapes: dict | None = None) -> Imported:
    """Import a model with TVM's frontend, run TVM's rewrites, and lift its ``main``.

    Args:
        model: an ONNX file path or ``ModelProto``, a ``.pt2`` file saved with
            ``torch.export.save``, or a Relax ``IRModule``.
        rewrites: run :func:`~tvm_pet.relax.rewrites.tvm_rewrites` first.
        layout: the convolutions' layout programs are lowered into (a key of
            :data:`~tvm_pet.relax.rewrites.LAYOUTS`): PET lifts the model as imported, and
            :class:`ModuleLowering` converts what it lowers.
        fast_math: lower every program with TVM's ``FastMathTransform`` (fast ``erf``, ``exp``,
            ``tanh`` and ``softmax``), the original's too.
        input_shapes: the shapes of an ONNX model's inputs with dynamic dimensions, by input
            name (the key None: the model's only input); see :func:`set_input_shapes`.

    Returns:
        The :class:`Imported` model.

    Raises:
        ModelError: a file that cannot be read, or that TVM's frontend cannot import.
        PetError: a ``.pt2`` file without torch installed (the message names the extra).
    """
    if layout not in LAYOUTS:
        raise PetError(f"layout {layout!r}: choose one of {', '.join(LAYOUTS)}")
    module, kind, onnx_model = _read(model, input_shapes)
    try:
        return _lifted(module, kind, onnx_model, model, rewrites, layout, fast_math)
    except PetError:
        binding = _unknown_shape(module) if onnx_model is not None else None
        if binding is None:
            raise
        error = _shape_error(onnx_model, _name(model), binding)
    raise error


def _lifted(module: tvm.IRModule, kind: str, onnx_model, model, rewrites: bool, layout: str,
            fast_math: bool) -> Imported:
    """The rest of :func:`import_model` once TVM imported the model: the rewrites, the lift,
    and the original lowered in its layout."""
    if rewrites:
        module = _run(tvm_rewrites, module, "TVM's graph rewrites")
    if "main" not in [gv.name_hint for gv in module.functions]:
        raise ModelError(f"{_name(model)}: the imported module has no 'main' function")
    try:
        lifted = from_relax(module["main"], module)
    except PetError as e:
        raise _non_float_inputs(module["main"], e) or e
    done = (REWRITES if rewrites else ()) + _when_lowered(layout, fast_math)
    imported = Imported(module, lifted, kind, done, onnx_model, layout, fast_math)
    imported.lowering(lifted.program)  # the original in its layout: a failure shows here
    return imported


def _when_lowered(layout: str, fast_math: bool) -> tuple[str, ...]:
    """The rewrites that run on every program as it is lowered, in words."""
    return (((f"ConvertLayout({layout}, when lowered)",) if LAYOUTS[layout] else ())
            + (("FastMathTransform (when lowered)",) if fast_math else ()))


def _unknown_shape(module: tvm.IRModule) -> str | None:
    """The first binding of ``main`` in ``module`` whose tensor shape is not static, in words
    (``'lv55' (R.dynamic_strided_slice)``); None when every one is static or there is no
    ``main``."""
    if "main" not in [gv.name_hint for gv in module.functions]:
        return None
    main = module["main"]
    for block in getattr(main.body, "blocks", ()):
        for binding in block.bindings:
            ty = binding.var.ty
            if isinstance(ty, relax.TensorType) and known_shape(ty) is None:
                op = getattr(getattr(binding.value, "op", None), "name", None)
                return f"{binding.var.name!r}" + (f" ({op})" if op else "")
    return None


def _shape_error(onnx_model, name: str, binding: str | None = None) -> ModelError | None:
    """The error for an ONNX model with a tensor whose shape cannot be made static: the
    operator and why (:func:`~tvm_pet.relax.onnx_prepare.dynamic_shape_cause`), else the
    binding of TVM's import without a static shape; None when neither is known."""
    cause = dynamic_shape_cause(onnx_model)
    if cause is None and binding is not None:
        cause = (f"TVM's import leaves {binding} without a static shape, and folding the "
                 f"model's shape arithmetic does not make it static; tvm-pet compiles tensors "
                 f"of static shapes only: export the model with its shapes written as constants")
    return ModelError(f"{name}: {cause}") if cause else None


def _non_float_inputs(func: relax.Function, error: PetError) -> ModelError | None:
    """The error to give when a model cannot be lifted because none of its inputs is float32:
    it names them and their dtypes (None when some input is float32)."""
    dtypes = {p.name: getattr(p.ty, "dtype", None) for p in func.params}
    if any(d == "float32" for d in dtypes.values()):
        return None
    named = ", ".join(f"{n!r} is {d}" for n, d in dtypes.items())
    return ModelError(f"input {named}: PET rewrites float32 computation only, and this model "
                      f"computes nothing in float32 ({error})")


def _read(model, input_shapes: dict | None = None) -> tuple[tvm.IRModule, str, object | None]:
    """The model as TVM imports it: (module, kind, ONNX model or None), the ONNX model's
    dynamic input dimensions set from ``input_shapes`` first (:func:`set_input_shapes`)."""
    if hasattr(model, "SerializeToString"):
        return _from_onnx_with_shapes(model, input_shapes, "the ONNX model")
    if input_shapes and (isinstance(model, tvm.IRModule)
                         or pathlib.Path(os.fspath(model)).suffix == ".pt2"):
        raise ModelError(f"{_name(model)}: input shapes can be set for an ONNX model only; a "
                         f"torch.export program or a Relax module has the shapes it was made with")
    if isinstance(model, tvm.IRModule):
        return model, "relax", None
    path = pathlib.Path(os.fspath(model))
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    if path.suffix == ".pt2":
        return _from_pt2(path), "torch.export", None
    return _from_onnx_with_shapes(_load_onnx(path), input_shapes, str(path))


def _from_onnx_with_shapes(onnx_model, input_shapes: dict | None, name: str):
    """(module, "onnx", the ONNX model with its input shapes set).

    With every input's shape static (set from ``input_shapes`` where it was dynamic), the
    model's shape arithmetic is folded first
    (:func:`~tvm_pet.relax.onnx_prepare.fold_shape_computations`): TVM 0.27 imports a ``Shape``
    of a static tensor as a computation it cannot make static again. torchvision's
    shufflenet_v2 through ``torch.onnx`` splits its channels with ``chunk``, a ``Slice`` whose
    ends are computed from ``Shape``: the import leaves a ``dynamic_strided_slice`` of unknown
    shape, then TVM's graph rewrites fail in ``emit_te`` and ``tvm.compile`` at VM code
    generation (``R.concat``); swin_t fails in ``from_onnx`` itself.

    Where the folded model does not import, the model as given is tried; where neither does, a
    tensor whose shape cannot be made static is named (:func:`_shape_error`), else TVM's error
    on the folded model is given.
    """
    fixed = set_input_shapes(onnx_model, input_shapes or {}, name)
    _check_onnx_inputs(fixed, name)
    folded = fold_shape_computations(fixed)
    try:
        return _from_onnx(folded, name), "onnx", fixed
    except ModelError as e:
        error = e
    if folded is not fixed:
        try:
            return _from_onnx(fixed, name), "onnx", fixed
        except ModelError:
            pass
    raise _shape_error(fixed, name) or error


def _load_onnx(path: pathlib.Path):
    import onnx
    try:
        return onnx.load(str(path))
    except Exception as e:  # protobuf raises DecodeError and others for a file that is not ONNX
        raise ModelError(f"{path}: not a valid ONNX model ({type(e).__name__}: "
                         f"{_first_line(e)}); for a torch.export program, save it with the .pt2 "
                         f"suffix") from None


def _check_onnx_inputs(onnx_model, name: str) -> None:
    """Refuse graph inputs without static positive dimensions (TVM would make them symbolic,
    and a symbolic shape cannot be timed or searched); the error names every input with dynamic
    dimensions and the ``--input-shape`` flags that would set them."""
    initializers = {t.name for t in onnx_model.graph.initializer}
    dynamic = []
    for vi in onnx_model.graph.input:
        if vi.name in initializers or not vi.type.HasField("tensor_type"):
            continue
        shape = vi.type.tensor_type.shape if vi.type.tensor_type.HasField("shape") else None
        if shape is None:
            raise ModelError(f"{name}: input {vi.name!r} has no shape; tvm-pet needs static "
                             f"input shapes: give them with --input-shape {vi.name}:D0,D1,...")
        for axis, d in enumerate(shape.dim):
            if d.HasField("dim_value") and d.dim_value < 1:
                raise ModelError(f"{name}: input {vi.name!r} has a zero-size dimension at axis "
                                 f"{axis}; tvm-pet optimize needs positive static dimensions")
        labels = [repr(d.dim_param) if d.dim_param else "unknown" for d in shape.dim
                  if not d.HasField("dim_value")]
        if labels:
            dynamic.append((vi.name, shape, labels))
    if dynamic:
        which = "; ".join(f"input {n!r} has dynamic dimension(s) {', '.join(labels)}"
                          for n, _, labels in dynamic)
        flags = " ".join(f"--input-shape {n}:{_example_dims(shape)}" for n, shape, _ in dynamic)
        raise ModelError(f"{name}: {which}; tvm-pet needs static input shapes: give them with "
                         f"--input-shape, e.g. {flags} (each dynamic dimension 1 here)")


def _example_dims(shape) -> str:
    """A static example of an ONNX shape for an error message: each dynamic dimension 1."""
    return ",".join(str(d.dim_value) if d.HasField("dim_value") else "1" for d in shape.dim)


def _from_onnx(onnx_model, name: str) -> tvm.IRModule:
    """``from_onnx`` on the mended model. As it fails, TVM's frontend prints the operator it
    could not convert with its inputs as Relax, lines long: that print is dropped, and the
    operator is named in the error."""
    from tvm.relax.frontend.onnx import from_onnx
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            module = _run(lambda m: from_onnx(m, keep_params_in_input=False),
                          mend_onnx_model(onnx_model), f"TVM's ONNX frontend on {name}")
    except ModelError as e:
        failed = re.search(r"Error converting operator (\w+)", printed.getvalue())
        if failed is None:
            sys.stdout.write(printed.getvalue())
            raise
        raise ModelError(str(e).replace(" failed: ", f" failed converting {failed[1]}: ", 1)
                         ) from None
    sys.stdout.write(printed.getvalue())
    return module


def _from_pt2(path: pathlib.Path) -> tvm.IRModule:
    try:
        import torch
    except ImportError:
        raise PetError(f"{path} is a torch.export program: reading it needs torch "
                       f"({TORCH_EXTRA})") from None
    from tvm.relax.frontend.torch import from_exported_program
    try:
        program = torch.export.load(str(path))
    except Exception as e:  # torch raises several kinds for a file it did not write
        raise ModelError(f"{path}: torch.export.load cannot read it ({type(e).__name__}: "
                         f"{_first_line(e)}); save it with torch.export.save") from None
    with warnings.catch_warnings():  # torch 2.13 warns of its own LeafSpec as it copies one
        warnings.filterwarnings("ignore", category=FutureWarning, message=".*LeafSpec")
        return _run(lambda p: from_exported_program(p, keep_params_as_input=False),
                    prepare_exported_program(program), f"TVM's torch frontend on {path}")


def prepare_exported_program(program):
    """Mend, in place, what TVM 0.27's torch frontend reads wrongly in a ``torch.export``
    program, and return it; ``tvm-pet`` does this to every ``.pt2`` file before
    ``from_exported_program`` (call it yourself before giving one to TVM for :class:`PETPass`).

    - A cumsum of a bool or integer tensor gets torch's dtype (:func:`_promote_cumsum`).
    - Empty 1-D tensors leave concatenations (:func:`_skip_empty_concat_inputs`).

    With both, transformers' GPT-2 and Llama import and compute what torch computes.
    """
    _promote_cumsum(program)
    _skip_empty_concat_inputs(program)
    return program


def _promote_cumsum(program) -> None:
    """Give every ``aten.cumsum`` without a ``dtype`` the one torch computes it in.

    torch sums a bool or integer tensor in int64; TVM 0.27's frontend keeps the input's dtype,
    so a bool cumsum (transformers' GPT-2 and Llama masks) stays bool (wrong values) and then
    fails LLVM's code generation (its compare of two bools, or the sum itself).
    """
    import torch
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.aten.cumsum.default:
            continue
        out, src = node.meta.get("val"), getattr(node.args[0], "meta", {}).get("val")
        if "dtype" not in node.kwargs and out is not None and src is not None \
                and out.dtype != src.dtype:
            node.kwargs = {**node.kwargs, "dtype": out.dtype}


def _skip_empty_concat_inputs(program) -> None:
    """Drop the empty 1-D tensors from every ``aten.cat``, as torch itself skips them.

    transformers' key-value caches start as ``torch.tensor([])`` and are concatenated with the
    first keys (GPT-2, Llama with ``use_cache`` on); TVM 0.27's frontend refuses to concatenate
    tensors of different ranks.
    """
    import torch
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.aten.cat.default:
            continue
        tensors = node.args[0]
        kept = [t for t in tensors if not _empty_1d(t)]
        if kept and len(kept) < len(tensors):
            node.args = (kept, *node.args[1:])


def _empty_1d(arg) -> bool:
    val = getattr(arg, "meta", {}).get("val")
    return val is not None and tuple(val.shape) == (0,)


def _run(step, value, what: str):
    """``step(value)``, with any failure of TVM's code turned into a :class:`ModelError` that
    names the step (TVM raises its own error types, Python's, and asserts)."""
    try:
        return step(value)
    except PetError:
        raise
    except Exception as e:
        raise ModelError(f"{what} failed: {type(e).__name__}: {_first_line(e)}") from None


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"


def _name(model) -> str:
    if isinstance(model, tvm.IRModule):
        return "the Relax module"
    return "the model" if hasattr(model, "SerializeToString") else str(model)

