"""Options of the application: what ``tvm-pet optimize`` and ``tvm-pet tune`` are asked to do.

:class:`DriverOptions` holds the end-to-end choices (target, tuning budget, screen, timing,
confirmation); the search's own budgets stay in :class:`~tvm_pet.search.config.SearchConfig`,
re-exported here so that a caller of the application needs one import.

>>> DriverOptions(trials=8).second_look_budget()
Budget(trials_per_task=16, seed=1)
>>> str(WholeBudget.parse("2000")), str(WholeBudget.parse("20m"))
('2000 trials', '20 minutes')
"""
from __future__ import annotations

import dataclasses
import re

from tvm_pet.errors import PetError
from tvm_pet.search.config import SearchConfig


@dataclasses.dataclass(frozen=True)
class Budget:
    """A tuning budget: MetaSchedule trials per task, and the tuning seed."""

    trials_per_task: int
    seed: int


@dataclasses.dataclass(frozen=True)
class WholeBudget:
    """A tuning budget for the whole model (``--budget``): trials in all, allocated across the
    model's tasks by MetaSchedule's gradient task scheduler, or minutes of tuning."""

    trials: int | None = None
    minutes: float | None = None

    @classmethod
    def parse(cls, text: str) -> "WholeBudget":
        """``"2000"`` (trials), ``"20m"`` or ``"20min"`` (minutes), ``"90s"`` (seconds)."""
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(m|min|s)?\s*", text)
        if match is None or float(match.group(1)) <= 0:
            raise PetError(f"--budget {text!r}: give trials for the whole model (2000), or a "
                           f"time: 20m, 90s")
        value, unit = float(match.group(1)), match.group(2)
        if unit is None:
            if not value.is_integer():
                raise PetError(f"--budget {text!r}: trials are a whole number")
            return cls(trials=int(value))
        return cls(minutes=value if unit in ("m", "min") else value / 60)

    def __str__(self) -> str:
        if self.trials is not None:
            return f"{self.trials} trials"
        return f"{self.minutes:g} minutes"


#: The layouts ``--layout`` takes: ``auto`` times the two others (:mod:`tvm_pet.pipeline.layout`).
LAYOUT_CHOICES = ("auto", "NCHW", "NHWC")


@dataclasses.dataclass(frozen=True)
class DriverOptions:
    """Options of :func:`~tvm_pet.pipeline.optimize.optimize` and
    :func:`~tvm_pet.pipeline.tune.tune_model`.

    Args:
        target: a target spec (``"llvm"``, ``"cuda"``, ...).
        trials: MetaSchedule trials per task; 0 uses the records as they are.
        budget: a tuning budget for the whole model instead of ``trials`` per task: the
            original's tasks share it (the TVM baseline's tuning); PET's mutant kernels are
            then tuned at the trials per task the original got, reported beside the budget
            (``charge`` ``"beside"``), or within it (``"inside"``).
        charge: where PET's mutant trials are charged with a ``budget`` in trials:
            ``"beside"`` it (the original gets the whole budget, the mutants more), or
            ``"inside"`` it (the original first gets ``1 - mutant_share`` of it, the same
            trials per task; the mutants' new kernels that many each, while the reserve holds
            them; then the original the rest: the run measures the budget in all).
        mutant_share: the reserve of PET's mutants with ``charge`` ``"inside"``.
        untuned_trials: trials per task when no tuning is asked (``trials`` 0, no ``budget``)
            and the records plan finds kernels with no record anywhere, own or borrowed (the
            ``optimize`` command's default is 32; 0 leaves them untuned);
            :meth:`tuning_for`.
        untuned_cap: the most such kernels tuned at ``untuned_trials`` each (about a minute
            each at 32 trials on 2 cores).
        untuned_minutes: with more than ``untuned_cap`` such kernels, the whole model is tuned
            within this many minutes instead (a whole-model ``budget``, shared by MetaSchedule's
            task scheduler; the ``optimize`` command's default is 10); 0 leaves them untuned, and
            the run says how to tune them.
        records_dir: the tuning records folder (default ``tuning_logs/<target>``).
        rpc: ``"host:port:key"`` of an RPC tracker to measure on.
        cost: ``"measured"`` (TVM kernel times) or ``"analytic"``: the search's cost model.
        promising: mutants of the whole model tuned (the screen's best expected savings).
        screen_per_subset: mutants of each subset the screen times (the analytic model's
            cheapest).
        screen_ratio: largest untuned time of a mutant's new kernels over the replaced ones
            for it to be tuned.
        timing_rounds: interleaved rounds of a first look.
        timing_number: calls averaged into one timing sample.
        timing_repeat: samples per module per round.
        timing_processes: fresh processes each look's rounds are spread over, on a CPU
            (:mod:`tvm_pet.tune.process_timing`): a binary's speed can be drawn once per process,
            by its address layout, so a look in one process stands for one draw; 1 times in the
            optimizing process.
        seed: the tuning seed and the seed of the random inputs.
        second_look: look again at close calls.
        second_look_kernels: the most kernels a second look tunes again (twice the trials:
            about two minutes each at 32 trials on 2 cores); a close call on a model with more
            is timed again over more rounds on the same records, and the notes say so.
        replicate: time the kept candidate once more before it replaces the original, and keep
            it only if the rule keeps it again (:mod:`tvm_pet.pipeline.confirm`, step 6).
        confirm: candidates timed end to end, best first, before the original is kept.
        confirm_every: time every one of them (as the time allows) and keep the fastest the rule
            keeps; off, stop at the first one kept.
        time_limit: seconds for the whole run: import, search, builds and timing (None: the
            search's own limit, and the asked timings whatever they cost). The timing keeps to
            it but for the smallest useful look (``confirm.MIN_SAMPLES``).
        confirm_share: the part of ``time_limit`` for building and timing the candidates; the
            search gets the rest (:meth:`search_limit`, :meth:`confirm_budget`).
        tvm_rewrites: run TVM's own graph rewrites on the imported module before PET (both the
            baseline and PET start from the rewritten module).
        layout: the convolutions' layout, TVM's ``ConvertLayout`` run on every program as it
            is lowered, the original's as much as the candidates' ("NCHW": as imported; "NHWC":
            conv2d NHWC/HWIO and conv3d NDHWC/DHWIO; "auto": the faster of the two on the tuned
            original, :mod:`tvm_pet.pipeline.layout`). The records are per layout.
        fast_math: TVM's ``FastMathTransform`` run on every program as it is lowered, both sides
            alike (fast ``erf``, ``exp``, ``tanh`` and ``softmax``; their kernels are other
            workloads, with records of their own).
        prepack: build both sides as TVM's best CPU build does, the weights prepacked
            (:mod:`tvm_pet.tune.prepack`; llvm targets only, ignored on others); off, TVM's
            default build. Tuning tunes the prepacked kernels; a prepacked kernel without
            records of its own is built with its plain form's.
        progress: print a progress line for each long step on stderr.
        input_shapes: the shapes of an ONNX model's inputs with dynamic dimensions, as
            ``(name, dims)`` pairs (name None: the model's only input);
            :func:`~tvm_pet.relax.frontends.set_input_shapes`.
    """

    target: str = "llvm"
    trials: int = 0
    budget: WholeBudget | None = None
    charge: str = "beside"
    mutant_share: float = 0.25
    untuned_trials: int = 0
    untuned_cap: int = 8
    untuned_minutes: float = 0.0
    records_dir: str | None = None
    rpc: str | None = None
    cost: str = "measured"
    promising: int = 4
    screen_per_subset: int = 3
    screen_ratio: float = 2.0
    timing_rounds: int = 5
    timing_number: int = 3
    timing_repeat: int = 3
    timing_processes: int = 2
    seed: int = 0
    second_look: bool = True
    second_look_kernels: int = 8
    replicate: bool = True
    confirm: int = 3
    confirm_every: bool = True
    time_limit: float | None = None
    confirm_share: float = 0.25
    tvm_rewrites: bool = True
    layout: str = "auto"
    fast_math: bool = False
    prepack: bool = True
    progress: bool = False
    input_shapes: tuple = ()

    def search_limit(self, search_limit: float | None, elapsed_s: float = 0.0) -> float | None:
        """The search's time limit, ``elapsed_s`` into the run: its own, within ``time_limit``
        less the confirmation's share and what is spent already (at least one second).

        >>> DriverOptions(time_limit=600).search_limit(1000.0, elapsed_s=10.0)
        440.0
        """
        if self.time_limit is None:
            return search_limit
        mine = max(1.0, self.time_limit * (1 - self.confirm_share) - elapsed_s)
        return mine if search_limit is None else min(search_limit, mine)

    def confirm_budget(self, elapsed_s: float) -> float | None:
        """Seconds for building and timing the candidates, ``elapsed_s`` into the run: the
        confirmation's share of ``time_limit``, or what is left of it if less (None: unbounded).

        >>> DriverOptions(time_limit=600).confirm_budget(elapsed_s=500.0)
        100.0
        """
        if self.time_limit is None:
            return None
        return min(self.time_limit * self.confirm_share, max(0.0, self.time_limit - elapsed_s))

    def __post_init__(self) -> None:
        if self.layout not in LAYOUT_CHOICES:
            raise PetError(f"--layout {self.layout!r}: auto, NCHW or NHWC")
        if self.charge not in ("beside", "inside"):
            raise PetError(f"--charge {self.charge!r}: beside or inside")
        if not 0 < self.mutant_share < 1:
            raise PetError(f"--mutant-share {self.mutant_share}: a share between 0 and 1")
        if self.charge == "inside" and (self.budget is None or self.budget.trials is None):
            raise PetError("--charge inside charges PET's mutants within a --budget in trials "
                           "(2000); a budget in minutes or trials per task is charged beside")

    @property
    def tunes(self) -> bool:
        """Whether the run tunes (``trials`` above 0, or a whole-model ``budget``)."""
        return self.trials > 0 or self.budget is not None

    def tuning_for(self, untuned: int) -> "DriverOptions":
        """These options for a model with ``untuned`` kernels that have no record anywhere,
        when nothing was asked: ``untuned_trials`` per task where there are at most
        ``untuned_cap`` of them; with more, the whole model within ``untuned_minutes``; else
        (something was asked, every kernel has a record, or the defaults are 0) as they are.

        >>> DriverOptions(untuned_trials=32).tuning_for(untuned=2).trials
        32
        >>> DriverOptions(untuned_trials=32).tuning_for(untuned=0).trials
        0
        >>> str(DriverOptions(untuned_trials=32, untuned_minutes=10).tuning_for(untuned=9).budget)
        '10 minutes'
        >>> DriverOptions(untuned_trials=32).tuning_for(untuned=9).tunes
        False
        """
        if self.tunes or not self.untuned_trials or untuned <= 0:
            return self
        if untuned <= self.untuned_cap:
            return dataclasses.replace(self, trials=self.untuned_trials)
        if self.untuned_minutes > 0:
            return dataclasses.replace(self, budget=WholeBudget(minutes=self.untuned_minutes))
        return self

    def first_look_budget(self) -> Budget:
        """The tuning budget of the first look: ``trials`` per task with ``seed``."""
        return Budget(self.trials, self.seed)

    def second_look_budget(self) -> Budget:
        """The budget of a second look: twice the trials, the next seed (0 trials: no tuning)."""
        if self.trials > 0:
            return Budget(2 * self.trials, self.seed + 1)
        return Budget(0, self.seed)


__all__ = ["Budget", "DriverOptions", "SearchConfig", "WholeBudget"]
