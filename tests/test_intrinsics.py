"""MetaSchedule's tensor intrinsics loaded with a stack that skips inspect's module scan
(tvm_pet.tune.intrinsics): the same frames and source lines as inspect.stack, the same
intrinsics registered as a plain import, and used wherever tvm_pet makes a TuneContext."""
from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

pytest.importorskip("tvm")

from tvm_pet.tune import intrinsics  # noqa: E402


def _both():
    return intrinsics._stack(), inspect.stack()  # one line: the same line number in this frame


def test_the_cheap_stack_has_inspects_frames_and_source_lines():
    cheap, real = _both()
    assert len(cheap) == len(real) > 3
    for mine, theirs in zip(cheap, real):
        assert mine.frame is theirs.frame
        assert (mine.lineno, mine.function) == (theirs.lineno, theirs.function)
        if os.path.exists(mine.filename):
            assert mine.filename == theirs.filename
            assert (mine.code_context, mine.index) == (theirs.code_context, theirs.index)
        else:  # no file, no source lines
            assert mine.code_context is None and mine.index is None
    assert cheap[1].code_context == ["    cheap, real = _both()\n"]  # the caller's line
    assert intrinsics._stack(context=0)[0].code_context is None


def test_inspect_stack_is_put_back_even_when_the_import_fails():
    real = inspect.stack
    with pytest.raises(ImportError), intrinsics._cheap_stack():
        assert inspect.stack is intrinsics._stack
        __import__("tvm_pet.no_such_module")
    assert inspect.stack is real


def test_loading_registers_the_intrinsics_a_plain_import_does():
    """In a fresh process (the package may be imported here already): x86 and CUDA intrinsics
    are registered, and inspect.stack is TVM's again."""
    code = ("import inspect; real = inspect.stack\n"
            "from tvm_pet.tune import intrinsics; intrinsics.load()\n"
            "from tvm.s_tir import TensorIntrin\n"
            "for name in ('dot_16x4_vnni', 'dot_16x4_avx512', 'wmma_sync_16x16x16_f16f16f32'):\n"
            "    assert TensorIntrin.get(name) is not None, name\n"
            "assert inspect.stack is real and intrinsics.MODULE in __import__('sys').modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_every_tune_context_tvm_pet_makes_loads_them_first():
    from tvm_pet.tune.tuner import TuningSearch
    assert TuningSearch.__dataclass_fields__["new_context"].default is intrinsics.tune_context
    import tvm_pet.contrib.cuda_offline.batch as cuda_batch
    assert cuda_batch.tune_context is intrinsics.tune_context
