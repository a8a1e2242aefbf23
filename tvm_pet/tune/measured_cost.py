"""A cost model measured with TVM: the time of the kernels TVM builds (and tunes) for a program.

It implements the engine's :class:`~tvm_pet.cost.model.CostModel` protocol from the TVM side, so
that the engine (``tvm_pet.cost``, ``tvm_pet.search``) never imports TVM.

The whole program is costed, in the form the final build sees: it becomes a Relax module
(:func:`tvm_pet.relax.adapter.program_to_module`), is legalized and fused
(:func:`tvm_pet.tune.compile.prepare`), and each fused kernel is timed
(:func:`tvm_pet.tune.kernels.kernel_times`), here and on TVM's thread pool as it is: built with
the best tuning record's schedule when ``tuning_logs/<target>/`` has one, else untuned (each
cached per kernel, schedule and thread count).
Costing a subprogram on its own would be wrong here: TVM fuses a mutant's last kernel with the
non-linear operator after it (conv + bias + ReLU is one kernel), so a standalone subprogram's
kernels are not the ones the model runs, and their tuning records do not apply.

Because of that fusion the cost is not additive over subprograms (``additive = False``). The
optimizer costs one candidate from its fusion region instead (:mod:`tvm_pet.search.region`):
:meth:`MeasuredCost.difference` compiles the region before and after the rewrite, and times only
the kernels that differ, so a whole-model search does not compile the whole model per candidate.

Untuned CPU kernels are naive loop nests, often tens of times slower: mixing tuned and untuned times
is unfair to whichever side is untuned. A rewrite whose new kernels have no records, replacing
tuned kernels, is therefore set aside without being timed (:meth:`MeasuredCost.difference`), and
the original is kept unless the mutant's kernels are tuned as well (``tvm-pet tune``, which picks
them with :meth:`MeasuredCost.screen`). That errs on the side of changing nothing.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import tvm
from tvm.s_tir.analysis import estimate_tir_flops

from tvm_pet.cost.model import RewriteScreen
from tvm_pet.errors import KernelBuildError, PetError
from tvm_pet.ir.keys import canonical
from tvm_pet.ir.node import Program
from tvm_pet.relax.adapter import program_to_module, region_to_module
from tvm_pet.tune import records
from tvm_pet.tune.compile import Task, extract_tasks
from tvm_pet.tune.kernels import kernel_times, task_times, timed_as
from tvm_pet.tune.records import costing_sources, default_records_dir
from tvm_pet.tune.targets import resolve_target

#: The screen times a kernel untuned only up to this many floating-point operations per call
#: (about 2 to 4 s: a naive loop nest runs at 1 to 2 GFLOP/s on a 2-core x86 CPU). A rewrite that
#: changes a larger kernel not timed before is screened by the ratio of the kernels' FLOPs
#: instead: ResNet3D-18's 3-D convolutions (11 GFLOP each) would take the screen over an hour.
UNTUNED_FLOP_LIMIT = 4e9

#: How far above the original a program's measured cost may be and the program still be worth
#: an end-to-end confirmation (the optimizer's runners-up, ``CostModel`` ``spread``). A kernel's
#: cost is one timing, cached, and a timing draws its process's address layout: three fresh
#: caches costed conv5x5's ``Pad -> Conv -> Slice`` at x0.68, x0.56 and x0.56 of the original,
#: and two_1x1_convs' ``Concat -> Conv -> Split`` at x0.99, x0.87 and x1.035, while end to end
#: it once ran x1.13 faster (ad47dff; not kept since).
SPREAD = 1.10


class MeasuredCost:
    """Seconds per run of a program on ``target``: the sum of its fused kernels' times.

    Args:
        target: a target spec (``"llvm"``, ``"cuda"``, a dict, or a ``tvm.target.Target``).
        records_dir: the MetaSchedule records folder (default ``tuning_logs/<target key>``).
        tuned: use tuning records where they exist; ``False`` measures every kernel untuned
            (the cheap screen of ``tvm-pet tune``, fair between original and mutants).
        lower: Program -> Relax module (default :func:`~tvm_pet.relax.adapter.program_to_module`;
            ``optimize`` passes the model's lowering into the module TVM imported). Its
            ``region`` method, when it has one, lowers a region on its own (default
            :func:`~tvm_pet.relax.adapter.region_to_module`).
        measure_untuned: times one kernel without records (default: built and timed here).
        sources: ``records.costing_sources(records_dir, target)``, opened already by a caller
            that shares them (default: opened on first use).
        untuned_flop_limit: the largest kernel :meth:`screen` times untuned, in floating-point
            operations per call (default :data:`UNTUNED_FLOP_LIMIT`).
        prepack: cost the kernels in the prepacked form (``compile.prepare``), as a build
            asked to prepack builds them.
    """

    name = "measured"
    #: Costs of subprograms do not add up to the program's (TVM fuses across their borders).
    additive = False
    #: A program costed up to this factor above the original is still a runner-up.
    spread = SPREAD

    def __init__(self, target="llvm", records_dir=None, tuned: bool = True,
                 lower: Callable[[Program], tvm.IRModule] | None = None,
                 measure_untuned: Callable[..., float] | None = None,
                 sources: tuple | None = None,
                 untuned_flop_limit: float = UNTUNED_FLOP_LIMIT, prepack: bool | None = None):
        self.target = resolve_target(target)
        self.lower = lower or program_to_module
        self.lower_region = getattr(self.lower, "region", region_to_module)
        self.records_dir = (records_dir or default_records_dir(self.target)) if tuned else None
        self.measure_untuned = measure_untuned
        self._memo: dict = {}
        self._regions: dict = {}
        #: The program whose rewrites ``whole_difference`` last costed, and its kernels.
        self._last_whole: tuple = (None, {})
        #: Regions that could not be lowered on their own (their candidates were costed whole).
        self.regions_refused = 0
        #: Rewrites set aside by :meth:`difference`: new kernels without records, replacing
        #: tuned ones.
        self.set_aside = 0
        #: Rewrites set aside by :meth:`difference` because TVM cannot compile a new kernel.
        self.unbuildable = 0
        self._opened = sources  # (database or None, untuned-times cache), opened on first use
        self.untuned_flop_limit = untuned_flop_limit
        self.prepack = prepack

    def cost(self, program: Program) -> float:
        """Seconds per run: ``sum(weight * seconds)`` over the program's distinct kernels."""
        return float(sum(w * s for w, s in self.kernels(program).values()))

    def kernels(self, program: Program) -> dict[int, tuple[int, float]]:
        """The program's fused kernels: structural hash -> (calls per run, seconds per call)."""
        key = canonical(program)[0]
        if key not in self._memo:
            database, cache = self._open()
            times = kernel_times(self.lower(program), self.target, self.records_dir,
                                 cache=cache, database=database,
                                 measure_untuned=self.measure_untuned, prepack=self.prepack)
            self._memo[key] = {t.shash: (t.weight, t.seconds) for t in times}
        return self._memo[key]

    def difference(self, before: Program, after: Program) -> float | None:
        """Seconds a rewrite adds to a run (negative: saves), from its fusion region.

        ``before`` and ``after`` are the region around a rewritten subset, before and after the
        rewrite (:class:`tvm_pet.search.region.Region`), each compiled on its own. Kernels both
        have (same structural hash, same calls) cancel and are not timed; the others are timed as
        :meth:`kernels` times them, so the result equals the whole programs' difference when the
        region holds every kernel the rewrite changes.

        A rewrite that replaces kernels with tuning records by a kernel without any is **set
        aside** (``inf``), not timed: it would compare an untuned loop nest with a tuned kernel,
        which the untuned side loses, and timing untuned kernels is
        what made a whole-model search slow. ``tvm-pet tune`` tunes the promising ones first.
        Where the replaced kernels are untuned too, both sides are timed untuned.

        Returns:
            The difference, ``inf`` when set aside, or None when a region cannot be compiled on
            its own (an opaque operator reads a value computed outside it); the caller then
            costs the whole program.
        """
        change = self._change(before, after)
        return None if change is None else self._difference(*change)

    def _difference(self, lost: list[tuple[Task, int]], gained: list[tuple[Task, int]]
                    ) -> float:
        """Seconds the ``gained`` kernels add over the ``lost`` ones; ``inf`` when new kernels
        without records replace kernels that all have some, or when TVM cannot build one."""
        if self.records_dir is not None:
            opened = records.OpenRecords.of(self._open()[0])
            if (all(opened.best(t.mod)[0] is not None for t, _ in lost)
                    and any(opened.best(t.mod)[0] is None for t, _ in gained)):
                self.set_aside += 1
                return math.inf
        try:
            return self._seconds(gained) - self._seconds(lost)
        except KernelBuildError:  # a mutant's kernel that TVM's code generation fails on
            self.unbuildable += 1
            return math.inf

    def whole_difference(self, before: Program, after: Program) -> float:
        """:meth:`difference` of two whole programs, lowered as :meth:`kernels` lowers them:
        for a rewrite without a fusion region, one too large (over ``MAX_REGION`` nodes: 44 of
        swin_t's first 153 mutants) or one that cannot be compiled alone. It equals
        ``cost(after) - cost(before)``, but times only the kernels that differ, and sets aside
        new kernels without records as :meth:`difference` does. Costed whole, such candidates
        timed their new kernels untuned: three quarters of swin_t's search, which then reached
        18 of its 52 subprograms in its 250 s."""
        key = canonical(before)[0]
        if self._last_whole[0] != key:  # a search costs many rewrites of one program
            self._last_whole = (key, self._tasks(self.lower(before)))
        lost, gained = kernel_change(self._last_whole[1], self._tasks(self.lower(after)))
        return self._difference(lost, gained)

    def _tasks(self, mod: tvm.IRModule) -> dict[int, Task]:
        """A module's fused kernels by structural hash."""
        return {t.shash: t for t in extract_tasks(mod, self.target, self.prepack)}

    def screen(self, before: Program, after: Program,
               by_flops: bool = False) -> RewriteScreen | None:
        """The tuning screen of a rewrite, from its fusion region before and after (as
        :meth:`difference` takes them): the replaced kernels' time as this model costs them, the
        untuned ratio of the new kernels to the replaced ones, and the new ones' tuned time
        when they all have records of the target already. None when a region cannot be
        compiled on its own.

        The ratio is that of the kernels' times untuned, measured here (cached per kernel),
        unless a kernel not timed before exceeds ``untuned_flop_limit``, or ``by_flops`` asks:
        then it is the ratio of their floating-point operations (``basis="flops"``), since a
        naive loop nest that large takes seconds a call. The tune stage asks it for the mutants
        whose untuned time ranks nothing (Winograd's, the windows': places of their own): timing
        their naive products untuned took most of an 11-minute screen of Inception-v3."""
        change = self._change(before, after)
        if change is None:
            return None
        lost, gained = change
        basis = "flops" if by_flops or self._too_large_untuned(lost + gained) else "untuned"
        if basis == "flops":
            replaced, new = _flops(lost), _flops(gained)
        else:
            replaced, new = self._seconds(lost, untuned=True), self._seconds(gained, untuned=True)
        ratio = new / replaced if replaced > 0 else math.inf
        opened = records.OpenRecords.of(self._open()[0])
        tuned = self.records_dir is not None and all(
            _own_record(opened, t) for t, _ in gained)
        return RewriteScreen(self._seconds(lost), ratio, self._seconds(gained) if tuned else None,
                             frozenset(t.shash for t, _ in gained), basis)

    def _too_large_untuned(self, tasks: list[tuple[Task, int]]) -> bool:
        """Whether timing these kernels untuned means a kernel above the FLOP limit that is not
        in the untuned-times cache yet."""
        cache = self._open()[1]
        return any(cache.get(self.target, timed_as(t).shash) is None
                   and _task_flops(t) > self.untuned_flop_limit for t, _ in tasks)

    def _change(self, before: Program, after: Program
                ) -> tuple[list[tuple[Task, int]], list[tuple[Task, int]]] | None:
        """The kernels a rewrite removes and those it adds, with their calls per run: those
        ``before`` has and ``after`` has not, and the other way round (None when one cannot be
        compiled on its own)."""
        tasks_before, tasks_after = self._region_tasks(before), self._region_tasks(after)
        if tasks_before is None or tasks_after is None:
            return None
        return kernel_change(tasks_before, tasks_after)

    def _seconds(self, tasks: list[tuple[Task, int]], untuned: bool = False) -> float:
        """Seconds per run of ``(task, calls)`` pairs: as :meth:`kernels` times them, or all
        untuned (measured here, cached)."""
        database, cache = self._open()
        times = task_times([t for t, _ in tasks], self.target, self.records_dir, cache=cache,
                           database=records.OpenRecords(None) if untuned else database,
                           measure_untuned=self.measure_untuned)
        return float(sum(n * t.seconds for (_, n), t in zip(tasks, times)))

    def _region_tasks(self, region: Program) -> dict[int, Task] | None:
        """The region's fused kernels by structural hash (None: it cannot be compiled alone)."""
        key = canonical(region)[0]
        if key not in self._regions:
            try:
                mod = self.lower_region(region)
            except PetError:
                self.regions_refused += 1
                mod = None
            self._regions[key] = None if mod is None else self._tasks(mod)
        return self._regions[key]

    def _open(self):
        """The records database and the untuned-times cache, opened once (the records do not
        change during a search; loading them takes seconds)."""
        if self._opened is None:
            self._opened = costing_sources(self.records_dir, self.target)
        return self._opened


def kernel_change(before: dict[int, Task], after: dict[int, Task]
                  ) -> tuple[list[tuple[Task, int]], list[tuple[Task, int]]]:
    """The kernels (``(Task, calls)``) of ``before`` beyond those of ``after``, and the other
    way round, each a structural hash -> task map: what a rewrite removes and adds."""
    calls_before = Counter({h: t.weight for h, t in before.items()})
    calls_after = Counter({h: t.weight for h, t in after.items()})
    every = {**before, **after}
    return ([(every[h], n) for h, n in sorted((calls_before - calls_after).items())],
            [(every[h], n) for h, n in sorted((calls_after - calls_before).items())])


def _task_flops(task: Task) -> float:
    """Floating-point operations of one call of a kernel (TVM's estimate from its loops)."""
    return float(estimate_tir_flops(task.mod))


def _flops(tasks: list[tuple[Task, int]]) -> float:
    """Floating-point operations per run of ``(task, calls)`` pairs."""
    return sum(n * _task_flops(t) for t, n in tasks)


def _own_record(opened: records.OpenRecords, task: Task) -> bool:
    """True when the task has a record of the target itself (not borrowed)."""
    record, borrowed = opened.best(task.mod)
    return record is not None and not borrowed
