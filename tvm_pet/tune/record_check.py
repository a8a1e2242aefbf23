"""Records checked against their kernels: a schedule that computes something else is never applied.

MetaSchedule measures what its candidates cost, never what they compute. A tuned schedule can be
wrong: on a 2-core AVX-512 CPU every record of CSRNet's ``fused_conv2d8_add3_relu3_pad`` (a
conv, bias and ReLU with a pad fused in as the epilogue, [1,512,28,28] -> [1,512,30,30]) left the
two padded rows and columns of its output unwritten, so the model read whatever memory held there
(up to 4.0 off on random data, 1.57 off end to end). Tuning cannot catch that, and the end-to-end
output check catches it only when the memory happens not to hold zeros.

So before a record's schedule is applied, it is run once on random inputs beside the kernel as
it is (the naive loop nest, the kernel's meaning) and compared output for output; the output
buffers start as random values, so an element a schedule does not write is caught. A prepacked
schedule (:mod:`tvm_pet.tune.prepack`) runs with its packing block, on the weights as the
kernel takes them, so the packing is checked with the rest. The verdict is
cached per task and schedule (``record_checks.json`` in the target's records directory), so each
record is checked once. The shipped records' verdicts ship with them, and a target that borrows a
compatible target's records reads that target's verdicts too (a schedule computes the same values
whatever CPU level LLVM compiles it for). A wrong record is skipped: the task's next record is
taken (and checked), and when no record agrees the kernel is built untuned.

Where it runs: :func:`tvm_pet.tune.compile.apply_records` checks the record each kernel would take;
:class:`tvm_pet.tune.records.OpenRecords` skips the records known to be wrong everywhere else
(costing, the records plan).
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_pet.tune import dbfile
from tvm_pet.tune.targets import require_runs_here
from tvm_pet.verify.agree import outputs_agree

#: The file of record verdicts inside a target's records directory.
CHECKS_FILE = "record_checks.json"


def record_key(shash: int | str, record: ms.database.TuningRecord) -> str:
    """The verdict key of one record: its task's structural hash and a digest of its schedule's
    trace (the same schedule of the same task has one key, whatever database holds it)."""
    digest = hashlib.sha1(str(record.trace).encode()).hexdigest()[:16]
    return f"{shash}:{digest}"


def schedule_agrees(task_mod: tvm.IRModule, scheduled: tvm.IRModule, target, *,
                    seed: int = 0) -> bool:
    """Run a task's kernel as it is and as ``scheduled`` on the same random arguments (outputs
    included, so that an unwritten element differs) and compare every argument after the call.

    Args:
        task_mod: the task (MetaSchedule's ``main`` PrimFunc module), unscheduled.
        scheduled: the same task with a record's schedule applied.
        target: the llvm target both are built for.
        seed: the random arguments' seed.

    Returns:
        True when every argument agrees after both calls; False when the scheduled kernel does
        not build or run.

    Raises:
        RuntimeError, ValueError, TypeError: TVM's errors, when the kernel as it is does not
            build or run (then nothing can be checked).
        PetError: when this CPU cannot run the target's code (``require_runs_here``).
    """
    require_runs_here(target)
    reference = _run(task_mod, task_mod, target, seed)
    try:
        outputs = _run(scheduled, task_mod, target, seed)
    except (RuntimeError, ValueError, TypeError):  # TVM's errors are these builtins
        return False
    return all(outputs_agree(a, b) for a, b in zip(reference, outputs))


def _run(mod: tvm.IRModule, task_mod: tvm.IRModule, target, seed: int) -> list[np.ndarray]:
    """Every argument of ``mod``'s ``main`` after one call on the task's random arguments."""
    built = tvm.tirx.build(mod, target=target)  # layout-rewrite blocks kept: same arguments
    args = random_args(task_mod, tvm.cpu(), seed)
    built["main"](*args)
    return [a.numpy() for a in args]


def scheduled(record: ms.database.TuningRecord) -> tvm.IRModule:
    """The record's kernel with its schedule applied (its trace replayed, postprocessing kept).

    The trace is replayed on the record's own workload, as MetaSchedule's ``ApplyDatabase``
    does: a record is found by structural hash and equality, which ignore names, and the trace
    looks its blocks up by name (a global pool's reduction is named after its input, so another
    model's pool is the same kernel under another block name). The result computes what every
    task the record was found for computes, on the same arguments.
    """
    schedule = tvm.s_tir.Schedule(record.workload.mod)
    record.trace.apply_to_schedule(schedule, remove_postproc=False)
    return schedule.mod


def random_args(task_mod: tvm.IRModule, device, seed: int = 0, *, packed: bool = False) -> list:
    """Arguments for a task's ``main`` on ``device``: standard normal floats, and zeros for
    integer arguments (indices of take or gather: zeros are always in bounds).

    ``packed``: a prepacked schedule's weights in their packed shapes, as the kernel takes them
    once its packing blocks are taken out (``builder.fast_build``, MetaSchedule's runner);
    otherwise in the shapes the kernel's parameters have (the packing blocks kept)."""
    rng = np.random.default_rng(seed)
    args = []
    infos = (ms.arg_info.ArgInfo.from_entry_func(task_mod, remove_preproc=True) if packed
             else ms.arg_info.ArgInfo.from_prim_func(task_mod["main"]))
    for info in infos:
        shape, dtype = [int(d) for d in info.shape], str(info.dtype)
        value = (rng.standard_normal(shape) if dtype.startswith(("float", "bfloat"))
                 else np.zeros(shape))
        args.append(tvm.runtime.tensor(value.astype(dtype), device))
    return args


class RecordChecks(dbfile.SidecarCache):
    """Verdicts on records, ``record_key -> agrees``: in memory, and in a JSON file when ``path``
    is given, shared by concurrent processes; a damaged file is set aside with a
    ``CorruptDatabaseWarning`` and its records checked again
    (:class:`tvm_pet.tune.dbfile.SidecarCache`).
    """

    WHAT = "record checks"
    AFTER = "the records will be checked again"
    _value = staticmethod(bool)

    def __init__(self, path: str | Path | None = None, also: Sequence[str | Path] = ()) -> None:
        """``also``: other verdict files, read only (a borrowed directory's: a schedule that
        computes the right values does so whatever CPU level LLVM compiles it for). The own
        verdicts win, then the first file of ``also`` that has one; only the own verdicts are
        written to ``path`` (a borrowing target's file had grown to hold all of its lender's)."""
        super().__init__(path)
        self._lent: dict = {}
        for other in also:
            if Path(other).exists():
                self._lent = {**RecordChecks(other)._entries, **self._lent}

    def _known(self, key: str) -> bool | None:
        """The verdict on one record key: the own one, else a lender's, else None."""
        return self._entries.get(key, self._lent.get(key))

    def verdict(self, shash: int | str, record: ms.database.TuningRecord) -> bool | None:
        """Whether the record computes what its kernel does; None when it was never checked."""
        return self._known(record_key(shash, record))

    def known_wrong(self, shash: int | str, record: ms.database.TuningRecord) -> bool:
        """True when the record was checked and computes something else than its kernel."""
        return self.verdict(shash, record) is False

    def agrees(self, task_mod: tvm.IRModule, shash: int | str,
               record: ms.database.TuningRecord, target) -> bool:
        """The record's verdict: from the cache, else checked now (:func:`schedule_agrees`) and
        cached. Only llvm kernels run here; on another target a record is taken unchecked."""
        key = record_key(shash, record)
        known = self._known(key)
        if known is not None:
            return known
        if target.kind.name != "llvm":
            return True
        try:
            applied = scheduled(record)
        except (RuntimeError, ValueError, TypeError):  # its trace does not replay on the task
            verdict = False
        else:
            verdict = schedule_agrees(task_mod, applied, target)
        self._store(key, verdict)
        return verdict

    def wrong(self) -> list[str]:
        """The keys of the records found wrong."""
        return sorted(k for k, v in {**self._lent, **self._entries}.items() if not v)
