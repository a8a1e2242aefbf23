"""The records plan: before anything slow, which of a module's kernels have schedules, and whose.

``tvm-pet optimize`` states this first, so that nobody waits on untuned kernels without being
told. Each task of the module is looked up in the target's own records, then in compatible
targets' (:func:`tvm_pet.tune.records.record_sources`). A borrowed record is applied under this
target (measured: 15-37x faster than untuned kernels, and 6-24 % slower than records tuned for
the target itself, benchmarks/results/compatible_records*.md); a kernel with records of two or
more targets is built with whichever runs fastest here
(:func:`tvm_pet.tune.kernels.chosen_record`: Haswell records at 32 trials ran x0.75-x3.78 of
the borrowed ones), and the rest stay TVM's untuned loop nests unless a tuning budget is
given.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import tvm

from tvm_pet.tune import records
from tvm_pet.tune.compile import extract_tasks, reduces
from tvm_pet.tune.targets import resolve_target, target_dir


@dataclass(frozen=True)
class RecordsPlan:
    """Where the kernels of one module get their schedules.

    Attributes:
        target: the target's key (``target_dir``).
        records_dir: the target's own records directory.
        lenders: the compatible targets' keys whose records fill in, the one with the most
            records first (none: no compatible target has records).
        tasks: distinct kernels (tuning tasks) of the module.
        own: kernels scheduled by the target's own records.
        borrowed: kernels scheduled by the borrowed records.
        unowned_spatial: kernels without a record of the target's own that do not reduce
            (:func:`~tvm_pet.tune.compile.reduces`: pads, copies), whose tuning holds about a
            trial (MetaSchedule exhausts a pad's search space at one).
        own_trials: the trials the module's kernels hold in the target's own records (a
            whole-model budget in trials counts them).
        tuned_s: seconds earlier whole-model runs tuned this module on these records for (a
            budget in minutes counts them: :class:`~tvm_pet.tune.tuner.MinutesSpent`).
        both: kernels with records of two or more targets (the own and a lender's, or two
            lenders'), none known to be wrong: each is built with whichever runs fastest here
            (timed once, when the kernel is first built or costed).
    """

    target: str
    records_dir: str
    lenders: tuple[str, ...]
    tasks: int
    own: int
    borrowed: int
    unowned_spatial: int = 0
    own_trials: int = 0
    tuned_s: float = 0.0
    both: int = 0

    @property
    def borrowed_from(self) -> str | None:
        """The lenders in words (``" and "`` between them), or ``None`` when there are none."""
        return " and ".join(self.lenders) or None

    @property
    def untuned(self) -> int:
        """Kernels with no record anywhere: TVM's untuned loop nests."""
        return self.tasks - self.own - self.borrowed

    def summary(self, trials: int = 0, budget=None, *, by_default: bool = False,
                default_cap: int | None = None, inside_share: float | None = None) -> str:
        """One line for the plan: what was found, and what the run will do about the rest.

        Args:
            trials: trials per kernel tuned for this target first (0: none).
            budget: a whole-model budget (``WholeBudget``), tuned instead of ``trials`` per
                kernel; what earlier runs on these records spent of one is said.
            by_default: ``trials`` (or, where more kernels than ``default_cap`` have no
                record, the whole-model ``budget``) were chosen by default, because kernels
                have no record.
            default_cap: the most untuned kernels tuned by default at ``trials`` each, when
                there were more (with a ``budget`` chosen by default, the line says why; with
                none, the run keeps them untuned and says how to tune them).
            inside_share: with ``budget``, the part of it kept for PET's mutants when they are
                charged inside it (``--charge inside``).
        """
        parts = [f"{self.own} from its own records"]
        if self.lenders:
            parts.append(f"{self.borrowed} borrowed from {self.borrowed_from}")
        parts.append(f"{self.untuned} untuned")
        line = (f"records for {self.target}: {self.tasks} kernels, " + ", ".join(parts)
                + (f" ({self.both} with records of more than one target: each built with "
                   "the one that runs fastest here)" if self.both else ""))
        if budget is not None:
            spent, left = self._spent(budget)
            words = str(budget) + ("" if inside_share is None else
                                   f" (PET's mutants inside it: {inside_share:.0%} kept for them)")
            if spent and not left:
                return line + (f"; the whole-model budget of {words} was spent by earlier runs "
                               f"on these records ({spent}): the original's kernels are not "
                               "tuned again")
            first = ("one batch per kernel" if inside_share is not None else
                     self._first_round(budget))
            why = ("" if not by_default else
                   f", by default since {self.untuned} have no record anywhere (more than the "
                   f"{default_cap} tuned kernel by kernel by default; --budget sets another, "
                   "--trials 0 keeps the records only)")
            return line + (f"; tuning the whole model within {words} for this target first{why} "
                           + (f"({spent} of it spent by earlier runs on these records, {left} "
                              "left) " if spent else "")
                           + "(MetaSchedule's task scheduler shares it across the kernels, "
                           f"after a first round that it does not cut short: {first})")
        if trials > 0 and by_default:
            return line + (f"; tuning {trials} trials per kernel for this target first, by "
                           f"default since {self.untuned} have no record anywhere (about a "
                           f"minute per kernel on 2 cores; --trials 0 keeps the records only)")
        if trials > 0:
            return line + f"; tuning {trials} trials per kernel for this target first"
        if self.untuned and default_cap is not None:
            return line + (f"; the untuned ones stay naive loops: more than the {default_cap} "
                           f"tuned by default (give --trials 32, about a minute per kernel on "
                           f"2 cores, or --budget 30m, to tune them for this target)")
        if self.untuned:
            return line + ("; the untuned ones stay naive loops (give --trials N, or run "
                           "tvm-pet tune, to tune them for this target)")
        return line

    def _spent(self, budget) -> tuple[str, str]:
        """What earlier runs on these records spent of a whole-model ``budget`` (its ``trials``
        or ``minutes``), and what is left, in words (``""``: nothing); ``("", "")`` when they
        spent none.

        >>> import types
        >>> plan = RecordsPlan("t", "d", (), 3, 3, 0, own_trials=90, tuned_s=1805.7)
        >>> plan._spent(types.SimpleNamespace(trials=None, minutes=30.0))
        ('30m05s', '')
        >>> plan._spent(types.SimpleNamespace(trials=200, minutes=None))
        ('90 trials', '110 trials')
        """
        from tvm_pet.tune.tuner import clock
        minutes, trials = getattr(budget, "minutes", None), getattr(budget, "trials", None)
        if minutes is not None and self.tuned_s > 0:
            left = minutes * 60 - self.tuned_s
            return (clock(self.tuned_s),
                    clock(left) if left >= 1 else "")
        if trials is not None and self.own_trials > 0:
            left = trials - self.own_trials
            return (f"{self.own_trials} trials",
                    f"{left} trials" if left > 0 else "")
        return "", ""

    def _first_round(self, budget) -> str:
        """The task scheduler's first round under a whole-model ``budget``, in words: one batch
        per kernel, and for the kernels with no records of their own its size (drawn at random)
        and, in minutes, its time at the prior rate (:func:`~tvm_pet.tune.tuner.first_round`).

        >>> import types
        >>> plan = RecordsPlan("t", "d", (), 62, 0, 0)
        >>> plan._first_round(types.SimpleNamespace(trials=None, minutes=3.0))[22:]
        '1 trial for each of the 62 kernels, at random (about 1m45s at 1.7 s a trial)'
        >>> RecordsPlan("t", "d", (), 62, 60, 0)._first_round(
        ...     types.SimpleNamespace(trials=2000, minutes=None))
        'one batch per kernel, 16 trials for each of the 2 kernels without records of their own'
        """
        from tvm_pet.tune.tuner import (PRIOR_TRIAL_S, STEP_PER_TASK, clock, first_round,
                                        scheduler_batch)
        minutes, trials = getattr(budget, "minutes", None), getattr(budget, "trials", None)
        new = self.tasks - self.own
        if not new or (minutes is None and trials is None):
            return "one batch per kernel"
        drawn = None  # a smaller first batch, drawn at random (tuner._WholeModelSearch)
        if minutes is not None:
            drawn = first_round(self.tasks, minutes * 60 - self.tuned_s)
            each = STEP_PER_TASK // 2 if drawn is None else drawn
        else:
            each = scheduler_batch(trials - self.own_trials, self.tasks)
        words = (f"one batch per kernel, {each} trial{'s' if each > 1 else ''} for "
                 + ("its one kernel" if self.tasks == 1 else f"each of the {new} kernels")
                 + ("" if new == self.tasks else " without records of their own"))
        if minutes is None:
            return words
        if drawn is not None:
            words += ", at random"
        return words + f" (about {clock(each * new * PRIOR_TRIAL_S)} at " \
            f"{PRIOR_TRIAL_S:g} s a trial)"

    def to_json(self) -> dict:
        return {**asdict(self), "lenders": list(self.lenders), "borrowed_from": self.borrowed_from,
                "untuned": self.untuned}


def records_plan(mod: tvm.IRModule, target=None, records_dir: str | Path | None = None,
                 opened: records.OpenRecords | None = None,
                 prepack: bool | None = None) -> RecordsPlan:
    """Look up every task of ``mod`` in the target's records, own then borrowed.

    Args:
        mod: a Relax module.
        target: a target or spec.
        records_dir: the records root or the target's directory (``None``: no records).
        opened: those records as the caller opened them (``records.costing_sources``); opened
            here when None.
        prepack: the form of the module's kernels (``compile.prepare``); a prepacked kernel
            has the records of its plain twin too (:mod:`tvm_pet.tune.prepack`).
    """
    target = resolve_target(target)
    tasks = extract_tasks(mod, target, prepack)
    if records_dir is None:
        return RecordsPlan(target_dir(target), "", (), len(tasks), 0, 0,
                           sum(not reduces(t) for t in tasks))
    sources = records.record_sources(records_dir, target)
    opened = sources.open() if opened is None else opened
    # per task, the sources holding a record not known to be wrong; the first is its best's
    # (``OpenRecords.best``): None for the own, else a lender's key
    held = [opened.sources_of(t.mod) for t in tasks]
    found = [srcs[0] is not None for srcs in held if srcs]
    spatial = sum(not reduces(t) for t, srcs in zip(tasks, held) if not srcs or srcs[0])
    from tvm_pet.tune.tuner import earlier_tuning
    own_trials, tuned_s = earlier_tuning(tasks, opened.own, sources.own)
    both = sum(len(srcs) > 1 for srcs in held)
    lenders = tuple(lender.name for lender in sources.lenders)
    return RecordsPlan(target_dir(target), str(sources.own), lenders, len(tasks),
                       found.count(False), found.count(True), spatial, own_trials, tuned_s, both)
