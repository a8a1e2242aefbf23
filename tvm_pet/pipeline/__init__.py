"""The application: ``tvm-pet optimize`` and ``tvm-pet tune`` as stages, one per module.

=============================================  ====================================================
:mod:`~tvm_pet.pipeline.options`               ``DriverOptions`` (and ``SearchConfig``)
:mod:`~tvm_pet.pipeline.toolchain`             the ``Toolchain`` seam: lower, build, tune, time,
                                               run, export (tests pass a fake one)
:mod:`~tvm_pet.pipeline.tvm_backend`           TVM's toolchain: the only module here that imports
                                               TVM (``relax/`` and ``tune/``), on first use
:mod:`~tvm_pet.pipeline.plan`                  which mutants get tuned, and why (pure, no TVM)
:mod:`~tvm_pet.pipeline.tune`                  steps 1-2: tune the original and the promising few
:mod:`~tvm_pet.pipeline.mutant_budget`         what the tune stage's mutants get: trials per
                                               task, and an allowance inside a budget
:mod:`~tvm_pet.pipeline.search`                step 3: the search with the run's cost model
:mod:`~tvm_pet.pipeline.confirm`               steps 4-5: the decision rule, runners-up, looks
:mod:`~tvm_pet.pipeline.report`                the typed report and the written artifacts
:mod:`~tvm_pet.pipeline.optimize`              the five steps in order
=============================================  ====================================================

Importing this package does not import TVM; the TVM toolchain is made on first use.
The flow, as ``optimize`` reads::

    program ──► tune (original + plan's picks) ──► search (measured cost, shared generator
    cache) ──► confirm (looks: decision rule, runners-up, second look) ──► report + artifacts
"""
from tvm_pet.pipeline.optimize import optimize, optimize_model
from tvm_pet.pipeline.options import Budget, DriverOptions, SearchConfig
from tvm_pet.pipeline.toolchain import Toolchain, tvm_toolchain
from tvm_pet.pipeline.tune import TuneSummary, tune_model

__all__ = ["optimize", "optimize_model", "tune_model", "DriverOptions", "SearchConfig", "Budget",
           "Toolchain", "tvm_toolchain", "TuneSummary"]
