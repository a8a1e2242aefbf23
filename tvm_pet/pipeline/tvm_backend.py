"""TVM as the application's toolchain (:class:`tvm_pet.pipeline.toolchain.Toolchain`).

The one module of the application that imports TVM (``tvm_toolchain`` in
:mod:`tvm_pet.pipeline.toolchain` imports it on first use). Each operation is one call into the
TVM side: lowering through the Relax adapter (:func:`~tvm_pet.relax.adapter.program_to_module`),
building with the records (:func:`~tvm_pet.tune.compile.apply_records`, then
:func:`~tvm_pet.tune.compile.build_applied`), tuning
(:func:`~tvm_pet.tune.tuner.tune`), interleaved timing
(:func:`~tvm_pet.tune.timing.time_interleaved`), running on the Relax VM, and the measured cost
model (:class:`~tvm_pet.tune.measured_cost.MeasuredCost`). Loading a model through TVM's
frontends (:func:`load_with_tvm`, :mod:`tvm_pet.relax.frontends`) is here too; a toolchain made
:meth:`~TVMToolchain.with_lowering` a loaded model's lowering lowers, costs and tunes every
program into the module TVM imported.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from tvm_pet.errors import KernelBuildError, PetError
from tvm_pet.io import quiet_native_stderr
from tvm_pet.ir.node import Program
from tvm_pet.onnx.exporter import Prelude
from tvm_pet.pipeline.load import InputSpec, LoadedModel
from tvm_pet.relax.adapter import program_to_module
from tvm_pet.relax.coverage import coverage as relax_coverage
from tvm_pet.relax.frontends import Imported, ModuleLowering, import_model
from tvm_pet.relax.onnx_outside import outside_prelude
from tvm_pet.tune.compile import apply_records, build_applied, extract_tasks
from tvm_pet.tune.contention import CpuWatch
from tvm_pet.tune.measured_cost import MeasuredCost, kernel_change
from tvm_pet.tune.prepack import fold_packing, prepacks
from tvm_pet.tune.process_timing import time_in_processes
from tvm_pet.tune.records import costing_sources, default_records_dir
from tvm_pet.tune.records_plan import RecordsPlan, records_plan
from tvm_pet.tune.targets import require_runs_here, resolve_target
from tvm_pet.tune.threads import size_thread_pool
from tvm_pet.tune.timing import Timing, time_interleaved
from tvm_pet.tune.tuner import TuneStats, tune, tune_budget, tune_minutes


#: Builds whose kernel counts a toolchain remembers (:meth:`TVMToolchain.kernel_records`).
BUILDS_COUNTED = 4
#: Executables a toolchain keeps exported, to time and run (:class:`Libraries`).
LIBRARIES_KEPT = 4


def device_for(target: tvm.target.Target) -> tvm.runtime.Device:
    """The device that runs ``target``'s code, or a clear error when this machine has none."""
    kind = target.kind.name
    if kind == "llvm":
        require_runs_here(target)
        return tvm.cpu()
    if kind == "cuda":
        if not tvm.runtime.enabled("cuda") or not tvm.cuda(0).exist:
            raise PetError("target cuda needs a CUDA GPU and TVM's CUDA runtime; this machine has "
                           "none (use --target llvm, or --rpc to measure on a GPU machine)")
        return tvm.cuda(0)
    raise PetError(f"tvm-pet optimize runs on llvm or cuda targets, not {kind!r}")


class TVMToolchain:
    """Lower, build, tune, time and run with TVM for one target and one records folder.

    Args:
        target: a target spec (``"llvm"``, ``"cuda"``, a dict, or a ``tvm.target.Target``).
        records_dir: the records folder (default ``tuning_logs/<target>``, see
            :func:`~tvm_pet.tune.records.default_records_dir`).
        rpc: ``"host:port:key"`` of an RPC tracker to tune on.
        run_here: check now that this machine can run the target's code (``optimize`` runs
            and times it; ``tune`` over ``rpc`` needs no local device, and checks on first use;
            a CPU target without ``rpc`` is tuned here, and checked now whatever this says).
        timing_processes: fresh processes a CPU timing of two or more executables is spread
            over (:mod:`tvm_pet.tune.process_timing`: each is one draw of the address layout,
            which sets some binaries' speed for a whole process); 1 times in this process.
        prepack: build, cost and tune every module with its weights prepacked, TVM's best CPU
            build (:mod:`tvm_pet.tune.prepack`; on llvm targets only); off, TVM's default
            build, weights in the layouts the model gives them.

    Raises:
        PetError: for an unknown target, or (``run_here``) one this machine cannot run: a
            CUDA target without a GPU, or a CPU target with vector instructions this CPU lacks
            (:func:`~tvm_pet.tune.targets.missing_cpu_features`).
    """

    def __init__(self, target="llvm", records_dir: str | None = None, rpc: str | None = None,
                 *, run_here: bool = True, timing_processes: int = 1, prepack: bool = True):
        self.target = resolve_target(target)
        self.prepack = prepacks(self.target, prepack)
        if self.target.kind.name == "llvm":
            size_thread_pool()  # every physical core, before the first kernel runs or is tuned
        self.records_dir = str(records_dir or default_records_dir(self.target))
        self.rpc = rpc
        # a local runner runs the code here too: a CPU target checked now, not its first kernel
        here = run_here or (rpc is None and self.target.kind.name == "llvm")
        self._device = device_for(self.target) if here else None
        self._lower: Callable[[Program], tvm.IRModule] = program_to_module
        self._sources: tuple | None = None  # the records, opened on first use (_records)
        # (module, the records it was built with, its kernel counts) of the latest builds, so
        # that the report counts what was built without applying the records again
        self._built: list[tuple[tvm.IRModule, tuple, tuple[int, int]]] = []
        # the same, with the executable, of the latest builds: a module built again from the
        # same records (the original, built to choose the layout and again to confirm) is not
        # compiled twice
        self._executables: list[tuple[tvm.IRModule, tuple, tuple[int, int],
                                      relax.VMExecutable]] = []
        self.timing_processes = timing_processes
        # the latest executables timed in fresh processes or run here, exported; shared with
        # this toolchain's copies (with_lowering)
        self._libraries = Libraries()

    @property
    def device(self) -> tvm.runtime.Device:
        """The device that runs the target's code on this machine (:func:`device_for`)."""
        if self._device is None:
            self._device = device_for(self.target)
        return self._device

    @property
    def target_name(self) -> str:
        """The target in full, for the report."""
        return str(self.target)

    @property
    def build_name(self) -> str:
        """The build both sides get, for the report."""
        return "TVM best: weights prepacked" if self.prepack else "TVM default"

    def with_lowering(self, lower: Callable[[Program], tvm.IRModule] | None) -> "TVMToolchain":
        """A copy that lowers (and so builds, costs and tunes) programs with ``lower``: a loaded
        model's lowering into the module TVM imported (None: each program on its own)."""
        chained = copy.copy(self)
        chained._lower = lower or program_to_module
        return chained

    def lower(self, program: Program) -> tvm.IRModule:
        """The program as a Relax module (into the imported module, for a loaded model)."""
        return self._lower(program)

    def records_plan(self, module: tvm.IRModule) -> RecordsPlan:
        """The records plan of ``module`` (:func:`~tvm_pet.tune.records_plan.records_plan`)."""
        return records_plan(module, self.target, self.records_dir, self._records()[0],
                            prepack=self.prepack)

    def lower_original_as_candidates(self, program: Program) -> tuple[int, int] | None:
        """Lower the original ``program`` as its candidates are from now on, where that gives
        other kernels than TVM's import (:mod:`tvm_pet.pipeline.baseline`): the import's kernel
        calls the lowering lacks and the other way round; None where the import stays."""
        lowering = self._lower
        if not isinstance(lowering, ModuleLowering):
            return None
        try:
            round_trip = lowering.round_trip()
        except PetError:  # no candidate lowers either; the search finds that out
            return None
        lost, gained = kernel_change(self._kernels(lowering(program)), self._kernels(round_trip))
        if not lost and not gained:
            return None
        lowering.lower_original_as_candidates(round_trip)
        return sum(n for _, n in lost), sum(n for _, n in gained)

    def imported(self) -> tvm.IRModule | None:
        """TVM's import, where :meth:`lower_original_as_candidates` replaced it."""
        return getattr(self._lower, "imported", None)

    def _kernels(self, module: tvm.IRModule) -> dict:
        return {t.shash: t for t in extract_tasks(module, self.target, self.prepack)}

    def coverage(self, program: Program, searched: frozenset[str]) -> dict:
        """Linear FLOPs searched over all, from the imported module (:mod:`tvm_pet.relax.coverage`);
        ``{}`` for a program lowered on its own."""
        if not isinstance(self._lower, ModuleLowering):
            return {}
        lifted = self._lower.lifted
        cov = relax_coverage(self._lower.module[lifted.name], lifted.name, lifted, searched)
        return {**cov.to_json(), "summary": cov.summary_line()}

    def kernel_records(self, module: tvm.IRModule) -> tuple[int, int]:
        """``(kernels, kernels scheduled from the records)`` of the module as it is built: as
        :meth:`build` counted them when it built this module with the same records, else
        counted now."""
        sources = self._records()
        for built, with_sources, counts in self._built:
            if built is module and with_sources is sources:
                return counts
        return self._apply(module)[1]

    def build(self, module: tvm.IRModule) -> relax.VMExecutable:
        """Compile with the tuned schedules where the records have them (a module this
        toolchain built last, or the one before, from the same records opened: that build)."""
        sources = self._records()
        found = next(((counts, executable) for built, opened, counts, executable
                      in self._executables
                      if opened is sources and tvm_ffi.structural_equal(built, module)), None)
        if found is None:
            found = self._compile(module)
            self._executables = [(module, sources, *found), *self._executables[:1]]
        counts, executable = found
        self._built = [(module, sources, counts), *self._built[:BUILDS_COUNTED - 1]]
        return executable

    def _compile(self, module: tvm.IRModule) -> tuple[tuple[int, int], relax.VMExecutable]:
        """``module`` with the records applied and compiled: its kernel counts, executable."""
        applied, counts = self._apply(module)
        try:
            return counts, build_applied(applied, self.target)
        except PetError:
            raise
        except Exception as e:  # TVM's own error types: its code generation failed
            raise KernelBuildError.compiling(self.target.kind.name, e) from None

    def compiled_form(self, module: tvm.IRModule) -> tvm.IRModule:
        """``module`` as ``tvm.compile(mod, target)`` takes it after a tuning pipeline:
        prepared, the records' schedules applied, and a prepacked module's weights packed into
        constants (:func:`~tvm_pet.tune.prepack.fold_packing`)."""
        applied, _ = self._apply(module)
        with self.target, tvm.transform.PassContext(opt_level=3):
            return fold_packing(applied)

    def _apply(self, module: tvm.IRModule) -> tuple[tvm.IRModule, tuple[int, int]]:
        """The module with the records applied, and ``(kernels, kernels scheduled)``."""
        applied, tuned = apply_records(module, self.target, self.records_dir,
                                       sources=self._records(), prepack=self.prepack)
        total = sum(1 for _, f in applied.functions.items() if isinstance(f, tvm.tirx.PrimFunc))
        return applied, (total, tuned)

    def _records(self) -> tuple:
        """The records and the untuned-time cache (``records.costing_sources``), opened once
        for all builds and cost models, and again after tuning has added records."""
        if self._sources is None:
            self._sources = costing_sources(self.records_dir, self.target)
        return self._sources

    def tune(self, module: tvm.IRModule, trials: int, *, seed: int,
             progress: Callable[[str], None] | None = None,
             skip: frozenset[str] = frozenset()) -> TuneStats:
        """Tune every task of ``module`` up to ``trials`` records, into the records folder.

        The tuner counts the tasks' trials in the records this toolchain opens for costing and
        builds (opening them reads every line, and a rerun tunes nothing); when
        it adds records, they are opened again when next asked."""
        sources = self._records()
        self._sources = None  # new records, or an interrupt: open again when next asked
        opened = sources[0]
        stats = tune(module, self.target, trials, self.records_dir, seed=seed, rpc=self.rpc,
                     progress=progress, database=None if opened is None else opened.own,
                     skip=skip, prepack=self.prepack)
        if not stats.new_trials:
            self._sources = sources
        return stats

    def tune_whole(self, module: tvm.IRModule, budget, *, seed: int,
                   progress: Callable[[str], None] | None = None) -> TuneStats:
        """Tune ``module`` within a whole-model budget: ``budget.trials`` in all with
        MetaSchedule's gradient task scheduler (``tune_budget``), or for ``budget.minutes``
        (``tune_minutes``)."""
        self._sources = None
        if budget.trials is not None:
            return tune_budget(module, self.target, budget.trials, self.records_dir, seed=seed,
                               rpc=self.rpc, progress=progress, prepack=self.prepack)
        return tune_minutes(module, self.target, budget.minutes, self.records_dir, seed=seed,
                            rpc=self.rpc, progress=progress, prepack=self.prepack)

    def time(self, executables: Mapping[str, relax.VMExecutable], inputs: Sequence[np.ndarray],
             *, rounds: int, number: int, repeat: int) -> dict[str, Timing]:
        """Time the executables interleaved on this machine's device: on a CPU, two or more of
        them with their rounds spread over ``timing_processes`` fresh processes, else in this
        process (on a CPU each from its library, exported once: :class:`Libraries`). Each
        timing carries the share of the CPU that other processes used meanwhile
        (``Timing.others_share``)."""
        with CpuWatch() as watch:
            if (self.timing_processes > 1 and len(executables) > 1
                    and self.target.kind.name == "llvm"):
                libraries = {name: self._libraries.path(ex) for name, ex in executables.items()}
                timings = time_in_processes(libraries, inputs, processes=self.timing_processes,
                                            rounds=rounds, number=number, repeat=repeat)
            else:
                runnable = {name: self._runnable(ex) for name, ex in executables.items()}
                timings = time_interleaved(runnable, inputs, self.device, rounds=rounds,
                                           number=number, repeat=repeat)
        share = watch.share if self.target.kind.name == "llvm" else None  # a GPU's: not told
        return {name: dataclasses.replace(t, others_share=share) for name, t in timings.items()}

    def run(self, executable: relax.VMExecutable,
            inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The outputs of ``main`` on ``inputs``."""
        vm = relax.VirtualMachine(self._runnable(executable), self.device)
        res = vm["main"](*[tvm.runtime.tensor(x, self.device) for x in inputs])
        return [res.numpy()] if hasattr(res, "numpy") else [r.numpy() for r in res]

    def _runnable(self, executable: relax.VMExecutable):
        """What a virtual machine runs ``executable`` from: on a CPU its exported library,
        loaded. A VM started on an executable adds an empty memory scope per constant to it
        (TVM's executable), and a library exported afterwards prints "Scope Loaded" once per
        constant each time it is loaded; exporting first keeps the written builds clean."""
        if self.target.kind.name != "llvm":
            return executable
        return self._libraries.loaded(executable)

    def export(self, executable: relax.VMExecutable, path: str) -> None:
        """Write a shared library (TVM's per-function export warnings silenced); one already
        exported to be timed or run is copied."""
        kept = self._libraries.kept(executable)
        if kept is not None:
            shutil.copyfile(kept, path)
        else:
            _export_library(executable, path)

    def script(self, module: tvm.IRModule) -> str:
        """The module as TVMScript."""
        return module.script()

    def onnx_prelude(self, program: Program, opset: int) -> Prelude | None:
        """What ``program`` needs written around it as ONNX, for ``opset``: what the loaded
        model keeps outside it, and its operators kept under their Relax names
        (:func:`~tvm_pet.relax.onnx_outside.outside_prelude`); None for a program lowered on
        its own or one that needs neither."""
        if not isinstance(self._lower, ModuleLowering):
            return None
        return outside_prelude(self._lower.lifted, program, opset)

    def cost_model(self) -> MeasuredCost:
        """The measured cost: record times where they exist, from the records opened once."""
        return MeasuredCost(self.target, self.records_dir, lower=self._lower,
                            sources=self._records(), prepack=self.prepack)


class Libraries:
    """Executables exported as shared libraries in one temporary folder, the latest
    :data:`LIBRARIES_KEPT` kept, each loaded once when run here. One instance serves a
    toolchain and its copies, so that no two builds are written to one path."""

    def __init__(self):
        self._kept: list[tuple[relax.VMExecutable, str]] = []  # newest first
        self._loaded: dict[str, tvm.runtime.Module] = {}
        self._folder: tempfile.TemporaryDirectory | None = None
        self._count = 0

    def __iter__(self):
        """(executable, library path) of the kept ones, newest first."""
        return iter(list(self._kept))

    def kept(self, executable: relax.VMExecutable) -> str | None:
        """The library ``executable`` was exported to, if it is kept."""
        return next((path for kept, path in self._kept if kept is executable), None)

    def path(self, executable: relax.VMExecutable) -> str:
        """The library of ``executable``, exported on first use."""
        kept = self.kept(executable)
        if kept is not None:
            return kept
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="tvm-pet-libraries-")
        self._count += 1
        path = os.path.join(self._folder.name, f"{self._count}.so")
        _export_library(executable, path)
        self._kept.insert(0, (executable, path))
        for _, dropped in self._kept[LIBRARIES_KEPT:]:
            os.remove(dropped)
            self._loaded.pop(dropped, None)
        del self._kept[LIBRARIES_KEPT:]
        return path

    def loaded(self, executable: relax.VMExecutable) -> tvm.runtime.Module:
        """The library of ``executable``, loaded into this process."""
        path = self.path(executable)
        if path not in self._loaded:
            self._loaded[path] = tvm.runtime.load_module(path)
        return self._loaded[path]


def _export_library(executable: relax.VMExecutable, path: str) -> None:
    """Write ``executable`` as a shared library, TVM's per-function export warnings silenced."""
    with quiet_native_stderr():
        executable.export_library(path)


def load_with_tvm(model, *, rewrites: bool = True, layout: str = "NCHW",
                  fast_math: bool = False, input_shapes: dict | None = None) -> LoadedModel:
    """A model imported with TVM's frontend, rewritten, and lifted
    (:func:`tvm_pet.relax.frontends.import_model`; :func:`tvm_pet.pipeline.load.load` calls it).

    Args:
        model: an ONNX file path or ``ModelProto``, a ``.pt2`` file, or a Relax ``IRModule``.
        rewrites: run TVM's graph rewrites first.
        layout: the convolutions' layout every program is lowered into, the original's too.
        fast_math: lower every program with TVM's ``FastMathTransform``, the original's too.
        input_shapes: an ONNX model's input shapes by name, for its dynamic dimensions.

    Returns:
        The :class:`~tvm_pet.pipeline.load.LoadedModel`; its ``lower`` emits a program into the
        imported module.
    """
    start = time.perf_counter()
    imported = import_model(model, rewrites=rewrites, layout=layout, fast_math=fast_math,
                            input_shapes=input_shapes)
    source = "the ONNX model" if hasattr(model, "SerializeToString") else str(model)
    if isinstance(model, tvm.IRModule):
        source = "a Relax module"
    return _loaded(imported, source, time.perf_counter() - start)


def _loaded(imported: Imported, source: str, load_time_s: float) -> LoadedModel:
    """The :class:`~tvm_pet.pipeline.load.LoadedModel` of an import; its ``relayout`` lowers the
    same import into another layout."""
    return LoadedModel(imported.lifted.program, imported.lowering,
                       source, imported.kind, imported.frontend,
                       tuple(InputSpec(*spec) for spec in imported.inputs()), imported.rewrites,
                       imported.onnx_model, load_time_s, layout=imported.layout,
                       relayout=lambda layout: _loaded(imported.in_layout(layout), source,
                                                       load_time_s))
