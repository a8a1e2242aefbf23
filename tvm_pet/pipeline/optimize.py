"""``tvm-pet optimize``: PET on an ONNX model, end to end, with a compiler toolchain (TVM).

Five steps, one stage each (tuning every candidate is unaffordable on a CPU: 1-3 minutes per
kernel at 64 trials):

1. **Tune the original** and 2. **screen cheaply, tune the promising few**
   (:mod:`tvm_pet.pipeline.tune`, choices in :mod:`tvm_pet.pipeline.plan`; only with
   ``trials > 0``);
3. **search with measured costs** (:mod:`tvm_pet.pipeline.search`);
4. **confirm end to end** and 5. **look again at close calls** (:mod:`tvm_pet.pipeline.confirm`);

then the report and the artifacts (:mod:`tvm_pet.pipeline.report`). The stages reach TVM only
through a :class:`~tvm_pet.pipeline.toolchain.Toolchain`, and share one generator cache
(:class:`~tvm_pet.search.mutant_cache.MutantCache`) made for the run.
"""
from __future__ import annotations

import pathlib

import numpy as np

from tvm_pet.cost.model import CostModel
from tvm_pet.errors import PetError, UnsupportedOperator
from tvm_pet.ir.node import Program
from tvm_pet.onnx import import_model
from tvm_pet.pipeline.confirm import confirm
from tvm_pet.pipeline.options import DriverOptions
from tvm_pet.pipeline.report import Report, make_report, write_artifacts
from tvm_pet.pipeline.search import cost_model, search
from tvm_pet.pipeline.toolchain import Toolchain, tvm_toolchain
from tvm_pet.pipeline.tune import TuneSummary, tune_model
from tvm_pet.search.config import SearchConfig
from tvm_pet.search.mutant_cache import MutantCache
from tvm_pet.verify.limits import check_tensor_sizes


def optimize(model, out_dir, config: SearchConfig = SearchConfig(),
             options: DriverOptions = DriverOptions(), *, toolchain: Toolchain | None = None,
             cost: CostModel | None = None, tuning: TuneSummary | None = None) -> Report:
    """Optimize an ONNX model with PET for a target, confirm it end to end, write artifacts.

    Args:
        model: an ONNX file path or ``ModelProto``.
        out_dir: where ``report.json``, ``optimized.so``, ``baseline.so``, ``optimized.onnx``
            and ``optimized.py`` go (created).
        config: the search's budgets.
        options: target, tuning budget, timing and confirmation options.
        toolchain: the compiler (default: TVM for ``options.target``).
        cost: the search's cost model (default: chosen by ``options.cost``).
        tuning: the tune stage's summary when the caller ran it (default: run here when
            ``options.trials > 0``).

    Returns:
        The :class:`~tvm_pet.pipeline.report.Report` (``report.json`` is its ``to_json``).
    """
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if options.confirm < 1:
        raise PetError(f"confirm={options.confirm}: at least one candidate must be timed")
    program = import_model(model)
    check_tensor_sizes(program)
    if toolchain is None:
        toolchain = tvm_toolchain(options.target, options.records_dir, options.rpc)
    _check_lowerable(program, toolchain)
    mutants = MutantCache()  # one generator cache for the run: tune and search share it
    if tuning is None:  # 1-2. tune the original and the promising mutants
        tuning = (tune_model(program, config, options, toolchain, mutants)
                  if options.trials > 0 else TuneSummary(str(toolchain.records_dir)))
    # 3. search with the measured (or analytic) cost
    found = search(program, config, cost or cost_model(options, toolchain), mutants,
                   options.confirm)
    # 4-5. time the candidates end to end, with a second look at close calls
    inputs = random_inputs(program, options.seed)
    confirmation = confirm(program, found.candidates, toolchain, options, list(inputs.values()))
    # the report, and the artifacts that were checked
    report = make_report(model, toolchain, tuning, found, confirmation, inputs)
    final = confirmation.chosen.program if confirmation.keep else program
    write_artifacts(out, report, final, toolchain)
    return report


def optimize_model(model, out_dir, config: SearchConfig = SearchConfig(),
                   options: DriverOptions = DriverOptions(), **stages) -> dict:
    """:func:`optimize`, returning ``report.json`` as a dict (``stages``: its keyword
    arguments)."""
    return optimize(model, out_dir, config, options, **stages).to_json()


def random_inputs(program: Program, seed: int) -> dict[str, np.ndarray]:
    """Standard normal float32 inputs for ``program``, by name, in its input order."""
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in program.inputs}


def _check_lowerable(program: Program, toolchain: Toolchain) -> None:
    """Refuse, before any tuning or search, a program that cannot be emitted for the compiler
    (an operator tvm_pet imports as opaque but cannot lower)."""
    try:
        toolchain.lower(program)
    except UnsupportedOperator as e:
        raise UnsupportedOperator(
            f"{e}. tvm-pet optimize rebuilds the whole model from tvm_pet's own import; to keep "
            f"such operators as they are, run PETPass on TVM's import instead "
            f"(relax.frontend.onnx.from_onnx, then relax_pipeline=\"pet\")") from None
