"""The original's module: TVM's import, or tvm_pet's lowering of the unchanged model where that
gives other kernels.

A candidate is lowered from the lifted program (:func:`~tvm_pet.relax.adapter.to_relax`), and
the lift drops operators that do nothing (``broadcast_to`` its own shape, ``astype`` to its own
dtype) and merges chains of reshapes. Where the import has such operators (every attention
layer of a ``transformers`` BERT, of torchvision's ViT and Swin), a candidate's unchanged layers
compiled to other kernels than the import's: kernels with no records, costed and timed against
the import's tuned ones, so that no rewrite of BERT-base could win. Such a model's original is
lowered as its candidates are (:func:`align_baseline`), and that module is checked to compute
what the import computes (:func:`check_against_import`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from tvm_pet.errors import PetError
from tvm_pet.pipeline.load import LoadedModel
from tvm_pet.pipeline.toolchain import Toolchain

#: The largest difference between the two modules' outputs, relative to the outputs' largest
#: magnitude (at least 1), that is not a fault: they differ by operators that do nothing.
IMPORT_TOLERANCE = 1e-5


@dataclasses.dataclass(frozen=True)
class BaselineLowering:
    """The original lowered as its candidates are.

    Attributes:
        import_kernels: the import's kernel calls that the lowering does not have.
        lowered_kernels: the lowering's kernel calls that the import does not have.
        max_abs_err_vs_import: the largest difference between the two modules' outputs (None
            until checked).
    """

    import_kernels: int
    lowered_kernels: int
    max_abs_err_vs_import: float | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def line(self) -> str:
        """The summary line."""
        checked = ("" if self.max_abs_err_vs_import is None else
                   f"; its outputs within {self.max_abs_err_vs_import:.1e} of the import's")
        return (f"baseline: the model as tvm_pet lowers every candidate, not TVM's import as it "
                f"is ({self.import_kernels} kernel call(s) of the import differ: operators that "
                f"do nothing dropped, reshapes merged), so that the kernels a candidate leaves "
                f"alone are the baseline's own{checked}")


def align_baseline(loaded: LoadedModel, toolchain: Toolchain) -> BaselineLowering | None:
    """Lower the original as its candidates are when that gives other kernels than the import
    (None: the import stays the original's module, or the toolchain lowers on its own; a
    toolchain without ``lower_original_as_candidates`` keeps its lowering as it is)."""
    align = getattr(toolchain, "lower_original_as_candidates", None)
    counts = None if align is None else align(loaded.program)
    return None if counts is None else BaselineLowering(*counts)


def check_against_import(baseline: BaselineLowering, toolchain: Toolchain,
                         reference: Sequence[np.ndarray],
                         inputs: Sequence[np.ndarray]) -> BaselineLowering:
    """The import's outputs against ``reference``, the lowered original's on ``inputs``.

    Raises:
        PetError: they differ beyond :data:`IMPORT_TOLERANCE`: a fault of tvm_pet's lowering,
            and nothing of this run is written.
    """
    outputs = toolchain.run(toolchain.build(toolchain.imported()), list(inputs))
    err = max(float(np.abs(np.asarray(o, np.float64) - np.asarray(r, np.float64)).max())
              for o, r in zip(outputs, reference))
    scale = max([1.0] + [float(np.abs(r).max()) for r in reference])
    if err > IMPORT_TOLERANCE * scale:
        raise PetError(f"tvm_pet's lowering of the unchanged model computes other values than "
                       f"TVM's import (largest difference {err:.3g}, outputs up to {scale:.3g}): "
                       f"a fault of tvm_pet; please report it with the model")
    return dataclasses.replace(baseline, max_abs_err_vs_import=err)
