"""The report and the written artifacts of ``tvm-pet optimize``.

A :class:`Report` is built from the stages' values (:class:`~tvm_pet.pipeline.tune.TuneSummary`,
:class:`~tvm_pet.pipeline.search.Found`, :class:`~tvm_pet.pipeline.confirm.Confirmation`) and
the accuracy checks (:func:`make_report`); :meth:`Report.to_json` is ``report.json``. :func:`write_artifacts` writes
``baseline.so``, ``optimized.so``, ``optimized.onnx``, ``optimized.py`` and ``report.json``.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Mapping, Sequence

import numpy as np

from tvm_pet.io import atomic_write
from tvm_pet.ir.node import Program
from tvm_pet.onnx import export_model
from tvm_pet.pipeline.confirm import Confirmation
from tvm_pet.pipeline.search import Found
from tvm_pet.pipeline.toolchain import Toolchain
from tvm_pet.pipeline.tune import TuneSummary
from tvm_pet.search.optimizer import Applied

#: The files :func:`write_artifacts` writes.
ARTIFACTS = ("report.json", "optimized.so", "baseline.so", "optimized.onnx", "optimized.py")


@dataclasses.dataclass(frozen=True)
class Report:
    """What ``tvm-pet optimize`` did and measured.

    Args:
        model: the model's path (or what was given).
        target: the target, in words.
        tuning: the tune stage's summary.
        found: the search stage's result.
        confirmation: the confirm stage's looks and decision.
        max_abs_err: largest difference between the written ``optimized.so``'s outputs and the
            original's (both compiled), on random inputs.
        max_abs_err_vs_onnxruntime: the same against onnxruntime running the ONNX model (None
            without onnxruntime).
    """

    model: str
    target: str
    tuning: TuneSummary
    found: Found
    confirmation: Confirmation
    max_abs_err: float
    max_abs_err_vs_onnxruntime: float | None

    @property
    def kept(self) -> str:
        """``"optimized"`` or ``"original"``."""
        return "optimized" if self.confirmation.keep else "original"

    @property
    def baseline_time_s(self) -> float:
        """The baseline's median in the last look."""
        return self.confirmation.timings["baseline"].median

    @property
    def candidate_time_s(self) -> float:
        """The last candidate's median in the last look (kept or not)."""
        return self.confirmation.timings["optimized"].median

    @property
    def optimized_time_s(self) -> float:
        """The median of what ``optimized.so`` holds."""
        return self.candidate_time_s if self.confirmation.keep else self.baseline_time_s

    @property
    def speedup(self) -> float:
        """Baseline over what ``optimized.so`` holds (1.0 when the original is kept)."""
        return self.baseline_time_s / self.candidate_time_s if self.confirmation.keep else 1.0

    @property
    def measured_speedup_of_candidate(self) -> float:
        """Baseline over the last candidate timed, kept or not."""
        return self.baseline_time_s / self.candidate_time_s

    @property
    def tuning_time_s(self) -> float:
        """Seconds of tuning: the tune stage's and the looks'."""
        return self.tuning.tuning_time_s + sum(k.tuning_time_s or 0.0
                                               for k in self.confirmation.looks)

    @property
    def new_trials(self) -> int:
        """Trials measured: by the tune stage and by the looks."""
        return self.tuning.new_trials + sum(k.new_trials or 0 for k in self.confirmation.looks)

    @property
    def applied(self) -> tuple[Applied, ...]:
        """The mutants in ``optimized.so`` (none when the original is kept)."""
        chosen = self.confirmation.chosen
        return tuple(chosen.applied) if chosen is not None else ()

    def to_json(self) -> dict:
        """``report.json``."""
        c = self.confirmation
        return {
            "model": self.model, "target": self.target, "cost_model": self.found.cost_model,
            "baseline_time_s": self.baseline_time_s, "optimized_time_s": self.optimized_time_s,
            "speedup": self.speedup,
            "measured_speedup_of_candidate": self.measured_speedup_of_candidate,
            "timings": {k: dataclasses.asdict(v) for k, v in c.timings.items()},
            "decision_rule": c.rule, "kept": self.kept, "looks": [k.to_json() for k in c.looks],
            "search_time_s": self.found.seconds, "tuning_time_s": self.tuning_time_s,
            "new_trials": self.new_trials, "tuning": self.tuning.to_json(),
            "max_abs_err": self.max_abs_err,
            "max_abs_err_vs_onnxruntime": self.max_abs_err_vs_onnxruntime,
            "applied": [_applied_json(a) for a in self.applied],
            "candidates_confirmed": len({k.candidate for k in c.looks} - {None}),
            "search": self.found.result.to_json(),
        }


def make_report(model, toolchain: Toolchain, tuning: TuneSummary, found: Found,
                confirmation: Confirmation, inputs: Mapping[str, np.ndarray]) -> Report:
    """The report of a run: the stages' values, and the accuracy of what ``optimized.so`` holds.

    Args:
        model: the ONNX model (path or ``ModelProto``).
        toolchain: the compiler that built and ran the executables.
        tuning: the tune stage's summary.
        found: the search stage's result.
        confirmation: the confirm stage's result.
        inputs: the inputs the executables were checked on, by name.

    Returns:
        The :class:`Report`: ``max_abs_err`` compares the kept executable's outputs with the
        original's (both compiled; 0 when the original is kept), and
        ``max_abs_err_vs_onnxruntime`` with onnxruntime on the ONNX model.
    """
    reference = confirmation.baseline.outputs
    outputs = (toolchain.run(confirmation.final, list(inputs.values())) if confirmation.keep
               else reference)
    return Report(str(model), toolchain.target_name, tuning, found, confirmation,
                  max_abs_err(reference, outputs), onnxruntime_error(model, inputs, outputs))


def _applied_json(a: Applied) -> dict:
    return {"mutant": " -> ".join(a.mutant_ops), "subprogram": a.subprogram,
            "partially_equivalent": a.partially_equivalent,
            "corrected_boxes": a.corrected_boxes, "cost_before_s": a.cost_before,
            "cost_after_s": a.cost_after}


def max_abs_err(reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> float:
    """The largest absolute difference between two lists of outputs."""
    return max(float(np.abs(a - b).max()) for a, b in zip(reference, outputs))


def onnxruntime_error(model, inputs: Mapping[str, np.ndarray],
                      outputs: Sequence[np.ndarray]) -> float | None:
    """The largest difference of ``outputs`` from onnxruntime's on the ONNX ``model``.

    Args:
        model: an ONNX file path or ``ModelProto``.
        inputs: the inputs by name.
        outputs: the outputs to compare, in the model's order.

    Returns:
        The largest absolute difference, or None when onnxruntime is not installed.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    path = str(model) if not hasattr(model, "SerializeToString") else None
    session = ort.InferenceSession(path or model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, {i.name: inputs[i.name] for i in session.get_inputs()})
    return max_abs_err(want, outputs)


def write_artifacts(out: pathlib.Path, report: Report, final: Program,
                    toolchain: Toolchain) -> None:
    """Write the executables that were checked, the optimized model, and ``report.json``.

    Args:
        out: the output folder (it exists).
        report: the report.
        final: the program ``optimized.so`` holds (the original when it is kept).
        toolchain: the compiler that built the executables.
    """
    c = report.confirmation
    toolchain.export(c.baseline.executable, str(out / "baseline.so"))
    toolchain.export(c.final, str(out / "optimized.so"))
    atomic_write(out / "optimized.onnx", export_model(final).SerializeToString())
    atomic_write(out / "optimized.py", toolchain.script(toolchain.lower(final)))
    atomic_write(out / "report.json", json.dumps(report.to_json(), indent=2, default=str) + "\n")
