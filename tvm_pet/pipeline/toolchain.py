"""The toolchain seam: the TVM operations the application needs, behind one small interface.

The stages (:mod:`~tvm_pet.pipeline.tune`, :mod:`~tvm_pet.pipeline.confirm`, ...) talk to TVM
only through a :class:`Toolchain`: lower a program (into the module the model was imported as:
:meth:`Toolchain.with_lowering`), build it with the tuning records, count the kernels the
records schedule, tune it, time executables interleaved, run one, write one out, and make the
measured cost models. The
TVM implementation is :class:`tvm_pet.pipeline.tvm_backend.TVMToolchain`; tests pass a fake one.

This module does not import TVM: :func:`tvm_toolchain` is the application's one way to it.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from tvm_pet.cost.model import CostModel, RewriteScreen
from tvm_pet.ir.node import Program


class Timed(Protocol):
    """One executable's timing samples in seconds (:class:`tvm_pet.tune.timing.Timing`; when its
    rounds were spread over fresh processes, each process's samples are in ``groups``)."""

    median: float
    samples: tuple[float, ...]


class Tuned(Protocol):
    """What one tuning call did (:class:`tvm_pet.tune.tuner.TuneStats`)."""

    tasks: int
    new_trials: int
    wall_s: float
    #: Records per task after the call, on average (the trials each task has had).
    records_per_task: float
    #: Per task: its ``workload`` (the same in every module with the kernel),
    #: ``records_before`` and ``new_trials`` (:class:`tvm_pet.tune.tuner.TaskStats`).
    per_task: tuple


class RecordsPlan(Protocol):
    """Where a module's kernels get their schedules
    (:class:`tvm_pet.tune.records_plan.RecordsPlan`)."""

    #: Distinct kernels (tuning tasks).
    tasks: int
    #: Kernels scheduled by the target's own records.
    own: int
    #: Kernels scheduled by a compatible target's records.
    borrowed: int
    #: The compatible targets whose records fill in, the one with the most records first.
    lenders: tuple[str, ...]
    #: Kernels with no record anywhere, own or borrowed.
    untuned: int
    #: Kernels without a record of the target's own that do not reduce (pads, copies): their
    #: tuning holds about a trial.
    unowned_spatial: int

    def summary(self, trials: int = 0, budget: Any = None, *, by_default: bool = False,
                default_cap: int | None = None) -> str:
        """The plan in one line, with what the run does: tune ``trials`` per kernel (chosen
        ``by_default`` for untuned kernels), or within a whole-model ``budget`` (chosen
        ``by_default`` where more than ``default_cap`` kernels are untuned), or nothing (more
        untuned kernels than the ``default_cap`` tuned by default, and no default budget)."""
        ...


class ScreeningCost(CostModel, Protocol):
    """A cost model that can screen a rewrite from its fusion region (the tune stage's screen)."""

    def screen(self, before: Program, after: Program,
               by_flops: bool = False) -> RewriteScreen | None:
        """The replaced kernels' time, the untuned ratio of the new kernels to the replaced
        ones (``by_flops``: their floating-point operations' instead, nothing timed untuned),
        and whether the new ones have records; None when it cannot tell."""
        ...


class Toolchain(Protocol):
    """The compiler operations of the optimize and tune stages.

    ``Module`` and ``Executable`` are whatever the toolchain uses (for TVM a Relax IRModule and
    a ``relax.VMExecutable``); the stages only pass them back to it.
    """

    #: The target, in words, for the report.
    target_name: str
    #: The build both sides get, in words, for the report ("TVM best: weights prepacked").
    build_name: str
    #: The tuning records folder.
    records_dir: str

    def with_lowering(self, lower: Callable[[Program], Any] | None) -> "Toolchain":
        """This toolchain lowering every program with ``lower`` (a loaded model's: into the
        module its frontend imported), for building, costing and tuning; None: on its own."""
        ...

    def lower(self, program: Program) -> Any:
        """The program as a module the toolchain compiles."""
        ...

    def records_plan(self, module: Any) -> RecordsPlan:
        """Before anything slow: which of ``module``'s kernels have records (the target's own,
        borrowed from a compatible target, none)."""
        ...

    def coverage(self, program: Program, searched: frozenset[str]) -> dict:
        """How much of the model's linear FLOPs lie in the searched subprograms (``searched``:
        their names), for the report; ``{}`` when the toolchain cannot tell."""
        ...

    def kernel_records(self, module: Any) -> tuple[int, int]:
        """``(kernels, kernels the records schedule)`` of ``module`` as :meth:`build` builds it."""
        ...

    def build(self, module: Any) -> Any:
        """Compile a module, with the tuned schedules where records exist."""
        ...

    def tune(self, module: Any, trials: int, *, seed: int,
             progress: Callable[[str], None] | None = None,
             skip: frozenset[str] = frozenset()) -> Tuned:
        """Tune the module's kernels up to ``trials`` records each, with ``seed``, except the
        ``skip`` workloads (left as they are); ``progress`` gets a line per task with an
        ETA."""
        ...

    def tune_whole(self, module: Any, budget: Any, *, seed: int,
                   progress: Callable[[str], None] | None = None) -> Tuned:
        """Tune the module's kernels within a whole-model budget
        (:class:`~tvm_pet.pipeline.options.WholeBudget`: trials in all, or minutes), the tasks
        sharing it as the compiler's task scheduler allocates it; ``progress`` gets a line with
        trials done and an ETA as it goes."""
        ...

    def time(self, executables: Mapping[str, Any], inputs: Sequence[np.ndarray], *,
             rounds: int, number: int, repeat: int) -> dict[str, Timed]:
        """Time the executables interleaved (A B A B ...) on ``inputs``; name -> timing."""
        ...

    def run(self, executable: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The outputs of one run of ``executable`` on ``inputs``."""
        ...

    def export(self, executable: Any, path: str) -> None:
        """Write ``executable`` as a shared library at ``path``."""
        ...

    def script(self, module: Any) -> str:
        """The module as source text (TVMScript)."""
        ...

    def onnx_prelude(self, program: Program, opset: int) -> Any:
        """What ``program`` needs written around it as ONNX of ``opset``: what the model keeps
        outside it (token ids, masks), and its operators kept under their Relax names
        (:class:`tvm_pet.onnx.exporter.Prelude`); None when it needs neither. Raises
        :class:`~tvm_pet.errors.PetError` when it cannot be written."""
        ...

    def cost_model(self) -> ScreeningCost:
        """The measured cost model: record times where they exist (kernels without records are
        timed untuned, or set aside against tuned ones)."""
        ...


def tvm_toolchain(target: str = "llvm", records_dir: str | None = None,
                  rpc: str | None = None, *, run_here: bool = True,
                  timing_processes: int = 1, prepack: bool = True) -> Toolchain:
    """The TVM toolchain for a target (imports TVM, here and nowhere else in the application).

    Args:
        target: a target spec.
        records_dir: the records folder (default ``tuning_logs/<target>``).
        rpc: ``"host:port:key"`` of an RPC tracker to tune on.
        run_here: fail now when this machine cannot run the target's code (``optimize`` runs
            it; ``tune`` may tune over ``rpc`` alone).
        timing_processes: fresh processes a CPU timing is spread over (1: this process).
        prepack: both sides built with their weights prepacked, TVM's best CPU build (llvm
            targets only); off, TVM's default build.

    Returns:
        A :class:`tvm_pet.pipeline.tvm_backend.TVMToolchain`.
    """
    from tvm_pet.pipeline.tvm_backend import TVMToolchain
    return TVMToolchain(target, records_dir, rpc, run_here=run_here,
                        timing_processes=timing_processes, prepack=prepack)
