"""Small tuning tasks and hand-written record databases, for the tests of records and tuning.

The records are written with MetaSchedule's own ``JSONDatabase`` (empty traces, chosen times), so
no test needs to tune to have records.
"""
from __future__ import annotations

import pathlib
import re

import numpy as np
import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from tvm_pet.tune import extract_tasks, resolve_target

F32 = "float32"
TARGET = resolve_target("llvm")


def matmul_module(m: int, k: int, n: int, copies: int = 1) -> tvm.IRModule:
    """a[m,k] @ W[k,n] with a constant W; ``copies`` chained shapes give distinct tasks."""
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((m, k), F32))
    with bb.function("main", [a]):
        with bb.dataflow():
            out, width = a, k
            for i in range(copies):
                weight = rng.standard_normal((width, n * (i + 1))).astype(F32)
                out = bb.emit(relax.op.matmul(out, relax.const(weight)))
                width = n * (i + 1)
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.finalize()


def embedding_module() -> tvm.IRModule:
    """BERT's word embedding: a ``take`` (TVM's frontends emit it in "fast" mode, unchecked) of
    token ids from a 30522 x 64 table; random ids read out of bounds."""
    from tvm.script import relax as R

    @tvm.script.ir_module
    class Embedding:
        @R.function
        def main(ids: R.Tensor((1, 128), "int64"), w: R.Tensor((30522, 64), "float32")):
            with R.dataflow():
                y = R.take(w, ids, axis=0, mode="fast")
                R.output(y)
            return y

    return Embedding


def task_mods(count: int = 2, target=TARGET) -> list[tvm.IRModule]:
    """Distinct small tasks (MetaSchedule ``main`` PrimFunc modules)."""
    return [extract_tasks(matmul_module(8, 8, 8 * (i + 1)), target)[0].mod for i in range(count)]


def write_records(directory: pathlib.Path, mods, per_task: int = 3, base: float = 1e-3,
                  target=TARGET, valid: bool = False) -> None:
    """Commit ``per_task`` records (distinct times) per task with MetaSchedule.

    Their traces are empty, which MetaSchedule's lookups (``get_top_k``) skip as invalid; with
    ``valid`` each trace gets one instruction that changes nothing (it looks a block up), so that
    costing finds the records as a tuned task's.
    """
    directory.mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(work_dir=str(directory))
    for t, mod in enumerate(mods):
        workload = db.commit_workload(mod)
        schedule = tvm.s_tir.Schedule(mod)
        if valid:
            schedule.get_sblock(re.findall(r'T\.sblock\("([^"]+)"\)', mod.script())[-1])
        trace = schedule.trace
        args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        for r in range(per_task):
            secs = [base * (1 + 10 * t + r)]
            db.commit_tuning_record(ms.database.TuningRecord(trace, workload, secs, target, args))


