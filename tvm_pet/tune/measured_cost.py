"""A cost model measured with TVM: the time of the kernels TVM builds (and tunes) for a program.

It implements the engine's :class:`~tvm_pet.cost.model.CostModel` protocol from the TVM side, so
that the engine (``tvm_pet.cost``, ``tvm_pet.search``) never imports TVM.

The whole program is costed, in the form the final build sees: it becomes a Relax module
(:func:`tvm_pet.relax.adapter.program_to_module`), is legalized and fused
(:func:`tvm_pet.tune.compile.prepare`), and each fused kernel is timed
(:func:`tvm_pet.tune.kernels.kernel_times`): the best tuning record's time when
``tuning_logs/<target>/`` has one, else a measured untuned time (cached per kernel).
Costing a subprogram on its own would be wrong here: TVM fuses a mutant's last kernel with the
non-linear operator after it (conv + bias + ReLU is one kernel), so a standalone subprogram's
kernels are not the ones the model runs, and their tuning records do not apply.

Because of that fusion the cost is not additive over subprograms (``additive = False``): the
optimizer costs every candidate as a whole program.

Untuned CPU kernels are naive loops (``shared/CALIBRATION.md``): mixing tuned and untuned times
is unfair to whichever side is untuned. Mutant kernels without records therefore look slow, and
the original is kept unless they are tuned as well (``tvm-pet tune``). That errs on the side of
changing nothing.
"""
from __future__ import annotations

from collections.abc import Callable

import tvm

from tvm_pet.ir.node import Program
from tvm_pet.relax.adapter import program_to_module
from tvm_pet.ir.keys import canonical
from tvm_pet.tune.kernels import kernel_times
from tvm_pet.tune.records import costing_sources, default_records_dir
from tvm_pet.tune.targets import resolve_target


class MeasuredCost:
    """Seconds per run of a program on ``target``: the sum of its fused kernels' times.

    Args:
        target: a target spec (``"llvm"``, ``"cuda"``, a dict, or a ``tvm.target.Target``).
        records_dir: the MetaSchedule records folder (default ``tuning_logs/<target key>``).
        tuned: use tuning records where they exist; ``False`` measures every kernel untuned
            (the cheap screen of ``tvm-pet tune``, fair between original and mutants).
        lower: Program -> Relax module (default :func:`~tvm_pet.relax.adapter.program_to_module`;
            ``optimize`` passes the model's lowering into the module TVM imported).
    """

    name = "measured"
    #: Costs of subprograms do not add up to the program's (TVM fuses across their borders).
    additive = False

    def __init__(self, target="llvm", records_dir=None, tuned: bool = True,
                 lower: Callable[[Program], tvm.IRModule] | None = None):
        self.target = resolve_target(target)
        self.lower = lower or program_to_module
        self.records_dir = (records_dir or default_records_dir(self.target)) if tuned else None
        self._memo: dict = {}
        self._opened = None  # (database or None, untuned-times cache), opened on first use

    def cost(self, program: Program) -> float:
        """Seconds per run: ``sum(weight * seconds)`` over the program's distinct kernels."""
        return float(sum(w * s for w, s in self.kernels(program).values()))

    def kernels(self, program: Program) -> dict[int, tuple[int, float]]:
        """The program's fused kernels: structural hash -> (calls per run, seconds per call)."""
        key = canonical(program)[0]
        if key not in self._memo:
            database, cache = self._open()
            times = kernel_times(self.lower(program), self.target, self.records_dir,
                                 cache=cache, database=database)
            self._memo[key] = {t.shash: (t.weight, t.seconds) for t in times}
        return self._memo[key]

    def _open(self):
        """The records database and the untuned-times cache, opened once (the records do not
        change during a search; loading them takes seconds)."""
        if self._opened is None:
            self._opened = costing_sources(self.records_dir, self.target)
        return self._opened

    def changed_ratio(self, before: Program, after: Program) -> float:
        """Time of the kernels only ``after`` has over the time of those only ``before`` has.

        The kernels both share cancel, so this compares just what a rewrite changed (the screen
        of ``tvm-pet tune``); ``inf`` when ``before`` loses no kernel time.
        """
        a, b = self.kernels(before), self.kernels(after)
        lost = sum(max(0, w - b.get(h, (0,))[0]) * s for h, (w, s) in a.items())
        gained = sum(max(0, w - a.get(h, (0,))[0]) * s for h, (w, s) in b.items())
        return gained / lost if lost > 0 else float("inf")
