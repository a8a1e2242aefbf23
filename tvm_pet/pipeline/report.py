"""The report and the written artifacts of ``tvm-pet optimize``.

A :class:`Report` is built from the stages' values (:class:`~tvm_pet.pipeline.tune.TuneSummary`,
:class:`~tvm_pet.pipeline.search.Found`, :class:`~tvm_pet.pipeline.confirm.Confirmation`) and
the accuracy checks (:func:`make_report`); :meth:`Report.to_json` is ``report.json``. :func:`write_artifacts` writes
``baseline.so``, ``optimized.so``, ``optimized.onnx``, ``optimized.py`` and ``report.json``.

The report says what a reader needs to trust it: where the model came from and which TVM
rewrites both sides had (``source``, ``tvm_rewrites``), how much of it PET saw (``coverage``),
how many of the baseline's kernels had tuning records (``kernels``: a decision on untuned
kernels is said so; ``records_counts``: the records plan's own, borrowed and untuned kernels
before the run), the confirmation's budget (``confirmation``), and whether
``optimized.onnx`` could be written (``optimized_onnx``: its path, or why not).
"""
from __future__ import annotations

import collections
import dataclasses
import json
import pathlib
from collections.abc import Mapping, Sequence

import numpy as np

from tvm_pet.errors import PetError
from tvm_pet.io import atomic_write
from tvm_pet.ir.node import Program
from tvm_pet.ir.ops import Op
from tvm_pet.onnx.exporter import export_model, input_signature, lowest_opset
from tvm_pet.pipeline.baseline import BaselineLowering
from tvm_pet.pipeline.confirm import Confirmation, check_outputs
from tvm_pet.pipeline.kinds import kind_of
from tvm_pet.pipeline.layout import LayoutChoice
from tvm_pet.pipeline.load import LoadedModel
from tvm_pet.pipeline.search import Found
from tvm_pet.pipeline.toolchain import RecordsPlan, Toolchain
from tvm_pet.pipeline.tune import TuneSummary
from tvm_pet.search.optimizer import Applied
from tvm_pet.search.partition import searchable_subprograms

#: The files :func:`write_artifacts` writes.
ARTIFACTS = ("report.json", "optimized.so", "baseline.so", "optimized.onnx", "optimized.py")


@dataclasses.dataclass(frozen=True)
class RecordsCounts:
    """The records plan's counts, before the run: where the original's kernels get their
    schedules (``report.json``'s ``records_counts``; ``records_plan`` says the same in words).

    Args:
        kernels: distinct kernels (tuning tasks) of the original.
        own: kernels scheduled by the target's own records.
        borrowed: kernels scheduled by a compatible target's records.
        untuned: kernels with no record anywhere.
        lenders: the compatible targets whose records fill in, the one with the most records
            first.

    >>> plan = RecordsCounts(kernels=5, own=3, borrowed=1, untuned=1, lenders=("llvm-haswell-c2",))
    >>> plan.to_json()["lenders"]
    ['llvm-haswell-c2']
    """

    kernels: int
    own: int
    borrowed: int
    untuned: int
    lenders: tuple[str, ...] = ()

    @classmethod
    def of(cls, plan: RecordsPlan) -> "RecordsCounts":
        """The counts of a toolchain's records plan."""
        return cls(plan.tasks, plan.own, plan.borrowed, plan.untuned, tuple(plan.lenders))

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "lenders": list(self.lenders)}


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
            without onnxruntime, or for a model that is not ONNX).
        loaded: the model as loaded (source, frontend, rewrites, inputs).
        kernels: ``(kernels, kernels scheduled from the records)`` of the baseline as built.
        kept_kernels: the same of the kept candidate's module (None when the original is kept):
            a kernel whose every record computes something else is built untuned.
        optimized_onnx: the path of ``optimized.onnx``, or why it was not written (set by
            :func:`write_artifacts`).
        total_time_s: the run's wall time up to the report.
        records_plan: the records plan stated before the run (own, borrowed, untuned kernels).
        records_counts: its counts.
        flops_coverage: linear FLOPs inside the searched subprograms over all
            (``Toolchain.coverage``), merged into ``coverage``.
        build: the build both sides got (``Toolchain.build_name``): "TVM best: weights
            prepacked" or "TVM default".
        layout: the convolutions' layout both sides were built in, and why
            (:class:`~tvm_pet.pipeline.layout.LayoutChoice`).
    """

    model: str
    target: str
    tuning: TuneSummary
    found: Found
    confirmation: Confirmation
    max_abs_err: float
    max_abs_err_vs_onnxruntime: float | None
    loaded: LoadedModel | None = None
    kernels: tuple[int, int] | None = None
    kept_kernels: tuple[int, int] | None = None
    optimized_onnx: str | None = None
    total_time_s: float | None = None
    records_plan: str | None = None
    records_counts: RecordsCounts | None = None
    flops_coverage: Mapping | None = None
    baseline_lowering: BaselineLowering | None = None
    build: str | None = None
    layout: LayoutChoice | None = None

    @property
    def untuned(self) -> bool:
        """Whether the decision was made on (partly) untuned kernels, the original's or the
        kept candidate's."""
        return any(k is not None and k[1] < k[0] for k in (self.kernels, self.kept_kernels))

    def kernels_line(self) -> str:
        """The baseline's kernels and records (and the kept candidate's, when some of its
        kernels are untuned), and the build both sides got, in words."""
        built = f"; both sides built as {self.build}" if self.build else ""
        if self.kernels is None:
            return "kernels: not counted" + built
        total, tuned = self.kernels
        line = (f"decided on untuned kernels ({tuned} of {total} had records)" if tuned < total
                else f"decided on tuned kernels (all {total} had records)")
        if self.kept_kernels is not None and self.kept_kernels[1] < self.kept_kernels[0]:
            kept_total, kept_tuned = self.kept_kernels
            line += (f"; the kept module's: {kept_tuned} of {kept_total} had a record that "
                     f"computes what its kernel does")
        return line + built

    @property
    def kept(self) -> str:
        """``"optimized"`` or ``"original"``."""
        return "optimized" if self.confirmation.keep else "original"

    @property
    def baseline_time_s(self) -> float:
        """The baseline's median in the deciding look."""
        return self.confirmation.timings["baseline"].median

    @property
    def candidate_time_s(self) -> float:
        """The deciding look's candidate's median (kept or not)."""
        return self.confirmation.timings["optimized"].median

    @property
    def optimized_time_s(self) -> float:
        """The median of what ``optimized.so`` holds."""
        return self.candidate_time_s if self.confirmation.keep else self.baseline_time_s

    @property
    def speedup(self) -> float:
        """Baseline over what ``optimized.so`` holds (1.0 when the original is kept)."""
        return self.measured_speedup_of_candidate if self.confirmation.keep else 1.0

    @property
    def measured_speedup_of_candidate(self) -> float:
        """Baseline over the deciding look's candidate, kept or not: the rule's ratio (the
        medians' ratio; timed in several processes, the geometric mean of theirs)."""
        return self.confirmation.look.decision.ratio

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

    def _mutants_of(self, candidate: int | None) -> dict:
        """A look's candidate's rewrites and their kinds (:mod:`tvm_pet.pipeline.kinds`): which
        kinds were timed against the original, and which won."""
        if candidate is None or candidate >= len(self.found.candidates):
            return {}
        ops = [a.mutant_ops for a in self.found.candidates[candidate].applied]
        return {"mutants": [" -> ".join(o) for o in ops],
                "kinds": sorted({kind_of(o) for o in ops})}

    def to_json(self) -> dict:
        """``report.json``."""
        c = self.confirmation
        return {
            "model": self.model, "target": self.target, "cost_model": self.found.cost_model,
            "baseline_time_s": self.baseline_time_s, "optimized_time_s": self.optimized_time_s,
            "speedup": self.speedup,
            "measured_speedup_of_candidate": self.measured_speedup_of_candidate,
            "timings": {k: dataclasses.asdict(v) for k, v in c.timings.items()},
            "decision_rule": c.rule, "kept": self.kept,
            "looks": [k.to_json() | self._mutants_of(k.candidate) for k in c.looks],
            # which candidate replaced the original: the kept look's (None: the original stays)
            "kept_candidate": c.look.candidate if c.keep else None,
            "search_time_s": self.found.seconds, "tuning_time_s": self.tuning_time_s,
            "new_trials": self.new_trials, "tuning": self.tuning.to_json(),
            "max_abs_err": self.max_abs_err,
            "max_abs_err_vs_onnxruntime": self.max_abs_err_vs_onnxruntime,
            "applied": [_applied_json(a) for a in self.applied],
            "candidates_confirmed": len({k.candidate for k in c.looks} - {None}),
            "search": self.found.result.to_json() | {
                "set_aside_untuned": self.found.set_aside,
                "set_aside_unbuildable": self.found.unbuildable,
                "near_ties_confirmed": self.found.near_ties},
        } | self._trust_json()

    def _trust_json(self) -> dict:
        """The keys that say where the figures come from: what was loaded, which kernels were
        tuned, how much of the model PET saw."""
        loaded = self.loaded
        kernels = None if self.kernels is None else {
            "total": self.kernels[0], "tuned": self.kernels[1], "untuned_decision": self.untuned,
            "kept_total": None if self.kept_kernels is None else self.kept_kernels[0],
            "kept_tuned": None if self.kept_kernels is None else self.kept_kernels[1],
            "summary": self.kernels_line()}
        return {
            "source": loaded.to_json() if loaded else None,
            "tvm_rewrites": list(loaded.rewrites) if loaded else [],
            "coverage": ({**coverage(loaded.program), **(self.flops_coverage or {})}
                         if loaded else None),
            "records_plan": self.records_plan,
            "records_counts": (None if self.records_counts is None
                               else self.records_counts.to_json()),
            "build": self.build,
            "layout": None if self.layout is None else self.layout.to_json(),
            "baseline_lowering": (None if self.baseline_lowering is None
                                  else self.baseline_lowering.to_json()),
            "kernels": kernels, "confirmation": self.confirmation.to_json(),
            "optimized_onnx": self.optimized_onnx, "total_time_s": self.total_time_s,
        }


def coverage(program: Program) -> dict:
    """How much of the model PET saw: its multi-linear subprograms with a conv, matmul or pool
    (those the search rewrites), the operators it lifted, and
    the operators it left opaque, by kind."""
    opaque = collections.Counter(n.attrs["kind"] for n in program.nodes if n.op is Op.OPAQUE)
    lifted = collections.Counter(n.op.value for n in program.nodes if n.op is not Op.OPAQUE)
    return {"subprograms": len(searchable_subprograms(program)),
            "lifted": dict(sorted(lifted.items())), "opaque": dict(sorted(opaque.items()))}


def make_report(loaded: LoadedModel, toolchain: Toolchain, tuning: TuneSummary, found: Found,
                confirmation: Confirmation, inputs: Mapping[str, np.ndarray],
                **facts) -> Report:
    """The report of a run: the stages' values, and the accuracy of what ``optimized.so`` holds.

    Args:
        loaded: the model as loaded.
        toolchain: the compiler that built and ran the executables.
        tuning: the tune stage's summary.
        found: the search stage's result.
        confirmation: the confirm stage's result.
        inputs: the inputs the executables were checked on, by name, in the module's order.
        facts: the :class:`Report`'s other fields (``kernels``, ``total_time_s``).

    Returns:
        The :class:`Report`: ``max_abs_err`` compares the kept executable's outputs with the
        original's (both compiled; 0 when the original is kept), and
        ``max_abs_err_vs_onnxruntime`` with onnxruntime on the ONNX model.
    """
    reference = confirmation.baseline.outputs
    outputs = (toolchain.run(confirmation.final, list(inputs.values())) if confirmation.keep
               else reference)
    onnx_model = loaded.onnx_model if loaded.kind == "onnx" else None
    ort = onnxruntime_error(onnx_model, list(inputs.values()), outputs) if onnx_model else None
    return Report(loaded.source, toolchain.target_name, tuning, found, confirmation,
                  max_abs_err(reference, outputs), ort, loaded, build=toolchain.build_name,
                  **facts)


def _applied_json(a: Applied) -> dict:
    return {"mutant": " -> ".join(a.mutant_ops), "subprogram": a.subprogram,
            "partially_equivalent": a.partially_equivalent,
            "corrected_boxes": a.corrected_boxes, "cost_before_s": a.cost_before,
            "cost_after_s": a.cost_after}


def max_abs_err(reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> float:
    """The largest absolute difference between two lists of outputs."""
    return max(float(np.abs(a - b).max()) for a, b in zip(reference, outputs))


def onnxruntime_error(model, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray],
                      outputs: Sequence[np.ndarray]) -> float | None:
    """The largest difference of ``outputs`` from onnxruntime's on the ONNX ``model``.

    Args:
        model: an ONNX file path or ``ModelProto``.
        inputs: the inputs in the model's input order (or by the model's input names).
        outputs: the outputs to compare, in the model's order.

    Returns:
        The largest absolute difference, or None when onnxruntime is not installed.
    """
    want = onnxruntime_outputs(model, inputs)
    return None if want is None else max_abs_err(want, outputs)


def onnxruntime_outputs(model, inputs) -> list[np.ndarray] | None:
    """onnxruntime's outputs of the ONNX ``model`` (None without onnxruntime); ``inputs`` as in
    :func:`onnxruntime_error`."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    path = str(model) if not hasattr(model, "SerializeToString") else None
    session = ort.InferenceSession(path or model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    values = ([inputs[n] for n in names] if isinstance(inputs, Mapping) else list(inputs))
    return session.run(None, dict(zip(names, values)))


def write_artifacts(out: pathlib.Path, report: Report, final: Program,
                    toolchain: Toolchain, inputs: Sequence[np.ndarray] = ()) -> Report:
    """Write the executables that were checked, the optimized model, and ``report.json``.

    ``optimized.onnx`` is written by tvm_pet's exporter when it can express every operator of
    ``final``, and (with onnxruntime) only when onnxruntime's outputs on it match what
    ``optimized.so`` computes; otherwise the report says why it is missing.

    Args:
        out: the output folder (it exists).
        report: the report.
        final: the program ``optimized.so`` holds (the original when it is kept).
        toolchain: the compiler that built the executables.
        inputs: the inputs ``optimized.so`` was checked on (to check ``optimized.onnx``).

    Returns:
        The report, with ``optimized_onnx`` set: what was written.
    """
    c = report.confirmation
    toolchain.export(c.baseline.executable, str(out / "baseline.so"))
    toolchain.export(c.final, str(out / "optimized.so"))
    written = _write_onnx(out / "optimized.onnx", final, inputs,
                          toolchain.run(c.final, list(inputs)) if len(inputs) else (), toolchain)
    report = dataclasses.replace(report, optimized_onnx=written)
    atomic_write(out / "optimized.py", toolchain.script(toolchain.lower(final)))
    atomic_write(out / "report.json", json.dumps(report.to_json(), indent=2, default=str) + "\n")
    return report


def _shapes(typed) -> str:
    return ", ".join(f"{dtype}{list(shape)}" for shape, dtype in typed)


def _write_onnx(path: pathlib.Path, final: Program, inputs: Sequence[np.ndarray],
                expected: Sequence[np.ndarray], toolchain: Toolchain) -> str:
    """Write ``final`` as ONNX when tvm_pet can, with what the model keeps outside it written
    first (``toolchain.onnx_prelude``), checked against ``expected`` with onnxruntime; the path
    written, or ``"not written: <why>"``."""
    if path.exists():
        path.unlink()  # a file from an earlier run must not pass for this one
    try:
        opset = lowest_opset(final)
        model = export_model(final, opset, toolchain.onnx_prelude(final, opset))
    except PetError as e:
        return f"not written: tvm_pet's ONNX exporter cannot express this model ({e})"
    given = [(tuple(np.shape(a)), str(np.asarray(a).dtype)) for a in inputs]
    takes = input_signature(model)
    if len(inputs) and given != takes:
        return (f"not written: the exported model takes {_shapes(takes)}, the model "
                f"{_shapes(given)}")
    if len(expected):
        try:
            got = onnxruntime_outputs(model, inputs)
        except Exception as e:  # onnxruntime's own error types: it cannot run the export
            return f"not written: onnxruntime cannot run the exported model ({type(e).__name__})"
        try:
            if got is not None:
                check_outputs(expected, got, 0)
        except PetError:
            return (f"not written: onnxruntime's outputs on the exported model differ from "
                    f"optimized.so's by {max_abs_err(expected, got):.3g}")
    atomic_write(path, model.SerializeToString())
    return str(path)
