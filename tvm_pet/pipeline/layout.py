"""The layout both sides' convolutions are built in, chosen by timing the tuned original.

TVM imports convolutions channels-first (NCHW). Its ``ConvertLayout`` puts them channels-last
(conv2d NHWC with HWIO kernels, conv3d NDHWC with DHWIO; :func:`tvm_pet.relax.rewrites.convert_layout`),
whose CPU schedules ran whole convnets x1.3-x1.8 faster on some machines and no faster on
others (``docs/benchmarks.md``). Which one wins is a property of the model, the CPU and the
records, so ``layout="auto"`` (the default) measures it:

1. a model without convolutions, or one lowered in a single layout (a tvm_pet Program), stays
   in NCHW, and nothing is timed;
2. with ``trials``, the original is tuned in both layouts first (a kernel with records costs no
   trial);
3. where every kernel of the original has records in both layouts, both are built, their
   outputs compared, and both timed interleaved (as a first look is, within half the
   confirmation's share of ``time_limit``); NHWC is chosen only when the keep-or-not rule
   of the confirm stage (:func:`tvm_pet.pipeline.confirm.decide`) keeps it over NCHW, so a tie
   stays as imported;
4. where one layout's kernels lack records, the other is chosen untimed (NCHW where both lack
   some), and the line says which kernels and how to tune them.

PET then searches, tunes and confirms in the chosen layout: its gain is measured above TVM's
faster layout, not above its slower one. ``report.json`` holds the choice (``layout``).
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping

from tvm_pet.errors import PetError
from tvm_pet.ir.ops import Op
from tvm_pet.pipeline.baseline import BaselineLowering
from tvm_pet.pipeline.load import LoadedModel
from tvm_pet.pipeline.options import DriverOptions
from tvm_pet.pipeline.progress import Progress
from tvm_pet.pipeline.toolchain import Toolchain
from tvm_pet.verify.agree import outputs_agree

@dataclasses.dataclass(frozen=True)
class LayoutChoice:
    """The layout both sides were built in, and why.

    Args:
        layout: the layout chosen ("NCHW" or "NHWC").
        asked: what was asked ("auto", or a layout).
        reason: why, in words.
        times_ms: the tuned original's median milliseconds in each layout timed.
        ratio: NCHW's time over NHWC's (the rule's ratio; above 1: NHWC faster); None when not
            timed.
        new_trials: trials spent tuning the original in the layouts before the choice.
        tuning_s: seconds of that tuning.
    """

    layout: str
    asked: str
    reason: str
    times_ms: Mapping[str, float] = dataclasses.field(default_factory=dict)
    ratio: float | None = None
    new_trials: int = 0
    tuning_s: float = 0.0

    def line(self) -> str:
        """The choice in one line."""
        if self.asked != "auto":
            return f"layout: {self.layout}, as asked"
        return f"layout: {self.layout} ({self.reason})"

    def to_json(self) -> dict:
        return {"layout": self.layout, "asked": self.asked, "reason": self.reason,
                "times_ms": dict(self.times_ms), "nchw_over_nhwc": self.ratio,
                "new_trials": self.new_trials, "tuning_s": self.tuning_s}


@dataclasses.dataclass(frozen=True)
class InLayout:
    """The model and its toolchain in the chosen layout, and the choice."""

    loaded: LoadedModel
    toolchain: Toolchain
    baseline: BaselineLowering | None
    choice: LayoutChoice


def choose_layout(loaded: LoadedModel, options: DriverOptions, toolchain: Toolchain,
                  progress: Progress = Progress(), *, measure: bool = True) -> InLayout:
    """The model in the layout ``options.layout`` asks, or, for ``"auto"``, in the faster one
    (the module's docstring says how it is measured).

    Args:
        loaded: the model as loaded (in NCHW for ``"auto"``).
        options: the run's options (``layout``, ``trials``, ``seed``, the timing's).
        toolchain: the compiler, before it lowers into the model
            (:func:`~tvm_pet.pipeline.optimize.toolchain_for` is run here for each layout;
            None: TVM's, made once for both).
        progress: where the steps' lines go.
        measure: time the layouts (off where the toolchain cannot run here: the records then
            decide, NCHW where both layouts have them).

    Returns:
        The :class:`InLayout`.
    """
    from tvm_pet.pipeline.optimize import base_toolchain, toolchain_for
    if toolchain is None and options.layout == "auto":
        toolchain = base_toolchain(options)  # one for both layouts: the records opened once
    first, first_base = toolchain_for(loaded, options, toolchain, progress)
    if options.layout != "auto":
        return InLayout(loaded, first, first_base,
                        LayoutChoice(loaded.layout, options.layout, "asked"))
    kept = InLayout(loaded, first, first_base, LayoutChoice("NCHW", "auto", ""))
    if not any(n.op is Op.CONV for n in loaded.program.nodes):
        return _because(kept, "no convolutions: nothing to choose")
    try:
        other = loaded.in_layout("NHWC")
    except PetError as e:
        return _because(kept, f"NHWC failed: {e}")
    if other is None:
        return _because(kept, "a model lowered in one layout only")
    second, second_base = toolchain_for(other, options, toolchain, progress)
    sides = {"NCHW": kept, "NHWC": InLayout(other, second, second_base, kept.choice)}
    modules = {name: side.toolchain.lower(side.loaded.program) for name, side in sides.items()}
    trials, tuning_s = _tune_both(sides, modules, options, progress)
    spent = {"new_trials": trials, "tuning_s": tuning_s}
    missing = {name: side.toolchain.records_plan(modules[name])
               for name, side in sides.items()}
    missing = {name: plan for name, plan in missing.items() if plan.untuned}
    if missing or not measure:
        name = "NHWC" if set(missing) == {"NCHW"} else "NCHW"
        return _because(sides[name], _untimed(name, missing, measure), **spent)
    return _timed(sides, modules, options, progress, spent)


def _because(side: InLayout, reason: str, **facts) -> InLayout:
    choice = LayoutChoice(side.loaded.layout, "auto", reason, **facts)
    return dataclasses.replace(side, choice=choice)


def _tune_both(sides: Mapping[str, InLayout], modules: Mapping, options: DriverOptions,
               progress: Progress) -> tuple[int, float]:
    """With ``options.trials``, the original tuned in each layout: (new trials, seconds)."""
    if options.trials <= 0:
        return 0, 0.0
    start, trials = time.perf_counter(), 0
    for name, side in sides.items():
        progress.note(f"tuning the original in {name} (to choose the layout)")
        trials += side.toolchain.tune(modules[name], options.trials, seed=options.seed,
                                      progress=progress.note).new_trials
    return trials, time.perf_counter() - start


def _untimed(name: str, missing: Mapping, measure: bool) -> str:
    """Why ``name`` was chosen without timing."""
    if not measure:
        return "as imported: not timed where the target does not run here"
    lacking = ", ".join(f"{layout} {plan.untuned} of {plan.tasks}"
                        for layout, plan in missing.items())
    return (f"untimed: kernels without records in {lacking}; --trials N tunes both and times "
            "them")


def _timed(sides: Mapping[str, InLayout], modules: Mapping, options: DriverOptions,
           progress: Progress, spent: dict) -> InLayout:
    """Both layouts built, checked against each other and timed interleaved; the rule decides."""
    from tvm_pet.pipeline.confirm import decide
    inputs = list(sides["NCHW"].loaded.random_inputs(options.seed).values())
    built, outputs = {}, {}
    for name, side in sides.items():
        with progress.step(f"building the original in {name}"):
            built[name] = side.toolchain.build(modules[name])
        outputs[name] = side.toolchain.run(built[name], inputs)
    if not all(outputs_agree(a, b) for a, b in zip(outputs["NCHW"], outputs["NHWC"])):
        return _because(sides["NCHW"], "NHWC's build computes other values than NCHW's: NCHW "
                                       "kept (a compiler fault: please report it)", **spent)
    start = time.perf_counter()
    sides["NCHW"].toolchain.run(built["NCHW"], inputs)
    plan = layout_timing(options, time.perf_counter() - start)
    with progress.step(f"timing the original in NCHW and NHWC: {plan.rounds} rounds"):
        timings = sides["NCHW"].toolchain.time(
            {"baseline": built["NCHW"], "optimized": built["NHWC"]}, inputs,
            rounds=plan.rounds, number=plan.number, repeat=plan.repeat)
    decision = decide(timings)
    times = {"NCHW": timings["baseline"].median * 1e3, "NHWC": timings["optimized"].median * 1e3}
    name = "NHWC" if decision.keep else "NCHW"
    if decision.keep:
        reason = f"timed x{decision.ratio:.2f} faster than NCHW on the tuned original"
    elif decision.ratio < 1:
        reason = f"NHWC timed x{1 / decision.ratio:.2f} slower on the tuned original"
    else:
        reason = (f"NHWC timed x{decision.ratio:.2f} faster on the tuned original, but not "
                  f"surely: p = {decision.p_value:.2g}")
    return _because(sides[name], reason, times_ms=times, ratio=decision.ratio, **spent)


def layout_timing(options: DriverOptions, call_s: float):
    """How the two layouts are timed: as a first look is (``timing_rounds``, ``_number``,
    ``_repeat``), within half the confirmation's share of ``time_limit`` where one is set
    (:func:`~tvm_pet.pipeline.confirm.plan_timing`: fewer calls per sample, then fewer rounds,
    never fewer samples than the rule needs), given ``call_s``, the seconds of one call.

    >>> layout_timing(DriverOptions(), 2.0)  # no time limit: the first look's timing
    TimingPlan(rounds=5, number=3, repeat=3)
    >>> layout_timing(DriverOptions(time_limit=120), 2.0)  # 15 s for two 2-second modules
    TimingPlan(rounds=2, number=1, repeat=3)
    """
    from tvm_pet.pipeline.confirm import ALPHA, fewest_samples, plan_timing
    budget = options.confirm_budget(0.0)
    return plan_timing(call_s, math.inf if budget is None else budget / 2,
                       options.timing_rounds, options.timing_number, options.timing_repeat,
                       fewest=fewest_samples(ALPHA))
