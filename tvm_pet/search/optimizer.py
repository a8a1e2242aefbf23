"""The program optimizer (paper Algorithm 2): top-K programs, r rounds of mutation.

Each round, for every program in the heap, every multi-linear subprogram (and every merge of
independent ones, :func:`~tvm_pet.search.partition.partition`) is cut into subsets of at most
``max_subset`` connected operators that contain a reducing operator. The generator mutates each
subset; every verified mutant, already corrected, replaces its subset, and the new programs compete
by cost for the K places of the next round. Costs are taken as additive over subprograms: a new
program costs what its parent cost, less the replaced subset, plus the corrected mutant, so a
measured cost model only ever builds small programs. The best program ever seen is returned, and it never
costs more than the input. Generator results are cached by the subset's structure with weights
abstracted (verification treats weights symbolically), so repeated layers are searched once.
Post-optimizations (paper 6.3, :mod:`tvm_pet.search.postopt`) then polish the best program; they
are kept only when they do not raise its cost.

One mutation per program per round would take r rounds to rewrite r layers, and a rewrite that
pays off only across layers (space-to-batch on every dilated conv of a chain, whose layout
nodes cancel between neighbours) would need all of them at once. So each round also
**combines**: for every heap program, the best improving candidate of each subset is applied
together with those of the other disjoint subsets (:func:`combine`), post-optimized so that
inverse layouts between neighbours vanish, and costed as a whole like any other candidate.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tvm_pet.cost.analytic import AnalyticCost
from tvm_pet.cost.model import CostModel
from tvm_pet.errors import KernelBuildError
from tvm_pet.ir.keys import canonical
from tvm_pet.ir.node import Node, Program, TensorSpec, free_name
from tvm_pet.ir.ops import REDUCING
from tvm_pet.search.config import SearchConfig, StopReason
from tvm_pet.search.generator import generate
from tvm_pet.search.mutant_cache import MutantCache
from tvm_pet.search.partition import (Subprogram, closes_a_loop, extract, feedback, partition,
                                      replace_subprogram)
from tvm_pet.search.postopt import post_optimize
from tvm_pet.search.region import Region, fusion_region
from tvm_pet.search.progress import progress

if TYPE_CHECKING:
    from tvm_pet.search.eqsat.search import EGraphReport


#: The most one-at-a-time costings of a combination that does not pay all together
#: (:func:`combine`).
COMBINE_TRIES = 12


@dataclasses.dataclass
class Applied:
    """One mutant applied to the returned program."""

    subprogram: str
    original_ops: tuple[str, ...]
    mutant_ops: tuple[str, ...]
    partially_equivalent: bool
    corrected_boxes: int
    cost_before: float
    cost_after: float

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class SubsetReport:
    """What the generator did for one subset of a subprogram."""

    subprogram: str
    ops: tuple[str, ...]
    generated: int
    verified: int
    corrected: int
    mutants: list[tuple[str, ...]]
    seconds: float
    stop: str
    cached: bool

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Candidate:
    """A program the search found, its cost and the mutants applied to reach it."""

    program: Program
    cost: float
    applied: list[Applied]


@dataclasses.dataclass
class SearchResult:
    """The optimizer's answer: the best program, its cost, and why the search stopped."""

    program: Program
    original_cost: float
    cost: float
    applied: list[Applied]
    subsets: list[SubsetReport]
    rounds: int
    stop: StopReason
    seconds: float
    post_optimizations: list[str] = dataclasses.field(default_factory=list)
    #: The next cheapest programs found, best first (at most ``topk - 1``): what an end-to-end
    #: confirmation tries besides the best one. They cost less than the original, or, with a
    #: cost model that has a ``spread`` (measured once per kernel), at most that factor more: a
    #: near tie may be faster when run (``near_ties`` counts those).
    runners_up: list["Candidate"] = dataclasses.field(default_factory=list)
    #: The search that found it: ``"algorithm2"`` or ``"eqsat"`` (:class:`SearchConfig`).
    search: str = "algorithm2"
    #: With ``"eqsat"``: the e-graph's size and why saturation stopped
    #: (:class:`~tvm_pet.search.eqsat.search.EGraphReport`).
    egraph: "EGraphReport | None" = None

    @property
    def near_ties(self) -> int:
        """Runners-up costed at or above the original (within the cost model's spread)."""
        return sum(map(self.is_near_tie, self.runners_up))

    def is_near_tie(self, candidate: "Candidate") -> bool:
        """Whether ``candidate`` is costed at or above the original: a near tie, listed only
        because the cost model's ``spread`` allows it."""
        return candidate.cost >= self.original_cost

    @property
    def speedup(self) -> float:
        return self.original_cost / self.cost if self.cost > 0 else 1.0

    def subprograms(self) -> list[dict]:
        """Per subprogram: mutants generated, verified and corrected, the chosen mutant, the
        boxes corrected, cost before and after, search time and stop reason."""
        rows: dict[str, dict] = {}
        for s in self.subsets:
            row = rows.setdefault(s.subprogram, {
                "name": s.subprogram, "generated": 0, "verified": 0, "corrected": 0,
                "search_time_s": 0.0, "stop": StopReason.EXHAUSTED.value, "chosen": None,
                "corrected_boxes": 0, "cost_before": None, "cost_after": None})
            if not s.cached:
                row["generated"] += s.generated
                row["verified"] += s.verified
                row["corrected"] += s.corrected
                row["search_time_s"] += s.seconds
                if s.stop != StopReason.EXHAUSTED.value:
                    row["stop"] = s.stop
        for a in self.applied:
            row = rows.get(a.subprogram)
            if row is not None:
                row.update(chosen=" -> ".join(a.mutant_ops), corrected_boxes=a.corrected_boxes,
                           cost_before=a.cost_before, cost_after=a.cost_after)
        return list(rows.values())

    def to_json(self) -> dict:
        return {"original_cost": self.original_cost, "cost": self.cost, "speedup": self.speedup,
                "rounds": self.rounds, "stop": self.stop.value, "search_time_s": self.seconds,
                "applied": [a.to_json() for a in self.applied],
                "runner_up_costs": [c.cost for c in self.runners_up],
                "near_ties": self.near_ties,
                "post_optimizations": self.post_optimizations,
                "search": self.search,
                "egraph": None if self.egraph is None else self.egraph.to_json(),
                "subprograms": self.subprograms(),
                "subsets": [s.to_json() for s in self.subsets]}


def _op_names(nodes: Sequence[Node]) -> tuple[str, ...]:
    return tuple(n.label for n in nodes)


def _rename(mutant: Program, mapping: dict[str, str], like: Program) -> Program:
    """The mutant with leaves and outputs renamed, on ``like``'s inputs and weights.

    Intermediate tensors get names that clash with nothing of ``like``'s.
    """
    mapping = dict(mapping)
    taken = set(like.shapes) | set(mapping.values())
    for n in mutant.nodes:
        for o in n.outputs:
            if o not in mapping:
                mapping[o] = free_name(o, taken)
                taken.add(mapping[o])
    nodes = tuple(Node(n.op, tuple(mapping.get(i, i) for i in n.inputs),
                       tuple(mapping.get(o, o) for o in n.outputs), n.attrs) for n in mutant.nodes)
    used = {i for n in nodes for i in n.inputs}
    weights = {k: v for k, v in like.weights.items() if k in used}
    extra = {mapping.get(k, k): v for k, v in mutant.weights.items() if mapping.get(k, k) not in weights
             and mapping.get(k, k) in used}
    weights.update(extra)
    inputs = tuple(TensorSpec(t.name, t.shape) for t in like.inputs)
    return Program(inputs, weights, nodes, like.outputs, like.name)


def replace_all(program: Program, replacements: Sequence[tuple[Subprogram, Program]]) -> Program:
    """``program`` with several subprograms replaced at once.

    Each subprogram is found again by its node objects (earlier replacements move positions but
    keep every other node as it was); the subprograms must not share nodes.
    """
    for part, new in replacements:
        ids = {id(n) for n in part.program.nodes}
        here = tuple(k for k, n in enumerate(program.nodes) if id(n) in ids)
        if len(here) != len(part.nodes):
            raise ValueError(f"subprogram {part.name} overlaps another replacement")
        program = replace_subprogram(program, dataclasses.replace(part, nodes=here), new)
    return program


def combine(program: Program, scored: Sequence[tuple], cost_now: float,
            cost: Callable[[Program], float] | None = None, tries: int = COMBINE_TRIES,
            out_of_time: Callable[[], bool] = lambda: False
            ) -> tuple[Program, list[int]] | None:
    """Apply together the cheapest improving candidate of each disjoint subset, post-optimized.

    Candidates are taken cheapest first, skipping any that shares a node with one already taken:
    so each subset contributes its best candidate (the others share its nodes), and overlapping
    subsets (a merge and its parts) contribute the cheaper one.

    With a ``cost`` that is not additive (the measured one), one candidate can spoil the rest:
    its kernels, fused with a neighbour's rewrite, are a kernel with no records (costed untuned),
    so all of them together cost more than the best one alone. When all together do not beat the
    best one alone, they are added one at a time instead, cheapest first, each kept only if the
    combination (post-optimized) then costs less; ``tries`` such costings at most.

    Args:
        program: the program the candidates were made on.
        scored: ``(cost, subprogram, corrected mutant, ...)`` per candidate (extra items are
            ignored), each costed as ``program`` with that one replacement.
        cost_now: ``program``'s cost; only candidates below it are used.
        cost: the whole-program cost, when candidates are to be added one at a time where all
            together do not pay (None: all together, as with an additive cost).
        tries: the most one-at-a-time costings.
        out_of_time: whether the search's time limit has passed: no further one-at-a-time
            costing starts then (each costs a whole program: seconds on a large model).

    Returns:
        The combined program and the indices into ``scored`` of the candidates it applies
        (cheapest first), or None when fewer than two disjoint improving candidates exist.
    """
    used: set[int] = set()
    chosen: list[int] = []
    for k in sorted(range(len(scored)), key=lambda k: scored[k][0]):
        nodes = set(scored[k][1].nodes)
        if scored[k][0] < cost_now and not nodes & used:
            used |= nodes
            chosen.append(k)
    if len(chosen) < 2:
        return None
    together = _together(program, scored, chosen)
    if cost is None or cost(together) < scored[chosen[0]][0]:
        return together, chosen
    kept, best = [chosen[0]], (scored[chosen[0]][0], None)
    for k in chosen[1:1 + tries]:
        if out_of_time():
            break
        trial = _together(program, scored, kept + [k])
        trial_cost = cost(trial)
        if trial_cost < best[0]:
            kept, best = kept + [k], (trial_cost, trial)
    return (together, chosen) if best[1] is None else (best[1], kept)


def _together(program: Program, scored: Sequence[tuple], chosen: list[int]) -> Program:
    """The candidates ``chosen`` applied together, post-optimized."""
    return post_optimize(replace_all(program, [(scored[k][1], scored[k][2]) for k in chosen]))[0]


def operator_subsets(program: Program, sub: Subprogram, size: int) -> list[tuple[int, ...]]:
    """Connected subsets (node positions) of at most ``size`` nodes with a reducing operator."""
    nodes = set(sub.nodes)
    neighbours = {k: set() for k in nodes}
    producer = {o: k for k in nodes for o in program.nodes[k].outputs}
    for k in nodes:
        for i in program.nodes[k].inputs:
            if i in producer:
                neighbours[k].add(producer[i])
                neighbours[producer[i]].add(k)
    found: set[frozenset] = set()
    frontier = [frozenset([k]) for k in nodes]
    for _ in range(size):
        found.update(frontier)
        frontier = list({s | {n} for s in frontier for k in s for n in neighbours[k] if n not in s})
    if sub.is_merge:
        found.add(frozenset(nodes)) if len(nodes) <= size + 1 else None
    keep = [tuple(sorted(s)) for s in found
            if any(program.nodes[k].op in REDUCING for k in s)
            and (not sub.is_merge or _spans_parts(program, sub, s))]
    return sorted(keep, key=lambda s: (len(s), s))


def _spans_parts(program: Program, sub: Subprogram, subset) -> bool:
    """A subset of a merge must take a reducing node from each merged part."""
    return sum(program.nodes[k].op in REDUCING for k in subset) >= len(sub.parts)


class Optimizer:
    """The optimizer's state: the generator cache (by structure), reports, costs and deadline.

    :func:`optimize` drives it; ``tvm-pet tune`` uses it to list each subset's mutants.

    Args:
        config: the search's budgets.
        cost: the cost model.
        mutants: a generator cache shared with other optimizers of the same run (the tuning plan
            and the search); a private one when omitted. A subset that another optimizer
            generated up to its own time limit is generated again while this one has time.
    """

    def __init__(self, config: SearchConfig, cost: CostModel, mutants: MutantCache | None = None):
        self.config, self.cost_model = config, cost
        # additive: a candidate costs its parent less the part plus the mutant (the analytic
        # model); else programs are costed whole or by region (the measured one)
        self.additive = getattr(cost, "additive", True)
        # a program costed up to this factor above the original is still a runner-up
        self.spread = max(1.0, float(getattr(cost, "spread", 1.0)))
        self.mutants = MutantCache() if mutants is None else mutants
        self.reports: list[SubsetReport] = []
        self.keys = self.mutants.weight_keys
        self.seen: set[tuple] = set()  # subsets this optimizer listed: "cached" in its reports
        self.costs: dict[tuple, float] = {}
        self.differences: dict[tuple, float | None] = {}
        self.deadline = None if config.time_limit is None else time.perf_counter() + config.time_limit

    def mutants_of(self, program: Program, subset: Sequence[int], name: str):
        """(subprogram, corrected mutants renamed onto it) for one subset, cached by structure."""
        part = extract(program, subset, name)
        key, leaves = canonical(part.program, self.keys)
        cached = key in self.seen
        self.seen.add(key)
        generated = self.mutants.get(key)
        if generated is None or (not cached and generated[1].stop is StopReason.TIME_LIMIT
                                 and not self.out_of_time()):
            mutants, stats = generate(part.program, self.config, self.deadline)
            generated = (mutants, stats, leaves + list(part.program.outputs))
            self.mutants.put(key, generated)
        mutants, stats, names = generated
        mapping = dict(zip(names, leaves + list(part.program.outputs)))
        self.reports.append(SubsetReport(name, _op_names(part.program.nodes), stats.candidates,
                                         stats.verified, stats.corrected,
                                         [m.ops for m in mutants], stats.seconds,
                                         stats.stop.value, cached))
        renamed = [(m, _rename(m.corrected, mapping, part.program)) for m in mutants]
        loops = feedback(program, part) if renamed else frozenset()
        return part, [(m, c) for m, c in renamed if not closes_a_loop(c, loops)]

    def cost(self, program: Program, *, original: bool = False) -> float:
        """The cost model's figure, memoized by structure (weights abstracted); ``inf`` for a
        candidate with a kernel TVM cannot compile (never chosen). For the ``original`` that
        is an error: there is nothing to compare against."""
        key = canonical(program, self.keys)[0]
        if key not in self.costs:
            try:
                self.costs[key] = self.cost_model.cost(program)
            except KernelBuildError:
                if original:
                    raise
                self.costs[key] = math.inf
        return self.costs[key]

    def region_of(self, program: Program, part: Subprogram) -> Region | None:
        """The fusion region of ``part`` (:func:`~tvm_pet.search.region.fusion_region`) when the
        cost model costs a rewrite from its region (it has a ``difference(before, after)``
        method: the measured one); None otherwise, or when the region is too large. The region
        is the same for every mutant of ``part``: take it once per subset."""
        if getattr(self.cost_model, "difference", None) is None:
            return None
        return fusion_region(program, part)

    def rewrite_cost(self, region: Region | None, cost_now: float, part: Subprogram,
                     corrected: Program, new: Program, before: Program) -> float:
        """The cost of ``new``: the program ``before`` (costing ``cost_now``) with ``part``
        replaced by ``corrected``.

        With ``part``'s :meth:`region_of`, the rewrite is costed by the cost model's
        ``difference`` of the region before and after, memoized by both regions' structure.
        Without a region, or when ``difference`` returns None (the region cannot be compiled
        alone), by the cost model's ``whole_difference`` of ``before`` and ``new`` where it has
        one (the kernels the whole programs do not share), else ``new`` is costed whole.
        """
        after = None if region is None else region.after(part, corrected)
        delta = None
        if after is not None:
            key = (canonical(region.before, self.keys)[0], canonical(after, self.keys)[0])
            if key not in self.differences:
                self.differences[key] = self.cost_model.difference(region.before, after)
            delta = self.differences[key]
        whole = getattr(self.cost_model, "whole_difference", None)
        if delta is None and whole is not None:
            delta = whole(before, new)
        return self.cost(new) if delta is None else cost_now + delta

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline


#: One program of the search: its cost, the program, and the mutants applied to reach it.
_Entry = tuple[float, Program, list[Applied]]


def optimize(program: Program, config: SearchConfig = SearchConfig(),
             cost: CostModel | None = None, mutants: MutantCache | None = None) -> SearchResult:
    """Search for a cheaper program that computes exactly what ``program`` computes.

    Args:
        program: the program (non-linear operators are left as they are).
        config: budgets: rounds, topk, max_subset, depth, time_limit, ...
        cost: the cost model (default :class:`~tvm_pet.cost.analytic.AnalyticCost`).
        mutants: the run's generator cache, when mutants were listed before (the tuning plan).

    Returns:
        A :class:`SearchResult`; its program costs at most as much as ``program``.
    """
    cost = cost or AnalyticCost()
    opt = Optimizer(config, cost, mutants)
    start = time.perf_counter()
    base = opt.cost(program, original=True)
    heap: list[_Entry] = [(base, program, [])]
    best = heap[0]
    seen = {canonical(program, opt.keys)[0]}
    stop, rounds = StopReason.ROUNDS, 0
    # costed below the original, or within the cost's spread above (not at it: no kernel changed)
    close: list[_Entry] = []
    for rounds in range(1, config.rounds + 1):
        fresh = []
        for entry in heap:
            fresh += _children(opt, entry, seen, f"round {rounds}: subprograms")
        if opt.out_of_time():
            stop = StopReason.TIME_LIMIT
        close += [f for f in fresh if f[0] != base and f[0] < base * opt.spread]
        improved = [f for f in fresh if f[0] < best[0]]
        if improved:
            best = min(improved, key=lambda f: f[0])
        heap = sorted(heap + fresh, key=lambda f: f[0])[:config.topk]
        if stop is StopReason.TIME_LIMIT:
            break
        if not fresh:
            stop = StopReason.EXHAUSTED
            break
    program_out, cost_out, post = _polished(opt, best[1], best[0])
    others = [f for f in sorted(close, key=lambda f: f[0]) if f[1] is not best[1]]
    runners_up = [Candidate(*_polished(opt, f[1], f[0])[:2], f[2])
                  for f in others[:config.topk - 1]]
    return SearchResult(program_out, base, cost_out, best[2], opt.reports, rounds, stop,
                        time.perf_counter() - start, post, runners_up)


def _children(opt: Optimizer, entry: _Entry, seen: set, label: str) -> list[_Entry]:
    """What one round makes of one heap program: every verified mutant of every subset applied
    alone (:func:`_single_mutations`), then the improving ones applied together
    (:func:`combine`). Programs already in ``seen`` (by structure) are skipped; new ones are added
    to it."""
    cost_now, prog, history = entry
    fresh, scored = _single_mutations(opt, entry, seen, label)
    together = (None if opt.out_of_time()
                else combine(prog, scored, cost_now, None if opt.additive else opt.cost,
                             out_of_time=opt.out_of_time))
    if together is not None:
        new, chosen = together
        key = canonical(new, opt.keys)[0]
        if key not in seen:
            seen.add(key)
            fresh.append((opt.cost(new), new, history + [scored[k][3] for k in chosen]))
    return fresh


def _single_mutations(opt: Optimizer, entry: _Entry, seen: set, label: str
                      ) -> tuple[list[_Entry], list[tuple[float, Subprogram, Program, Applied]]]:
    """Each verified mutant of each subset of ``entry``'s program, applied alone.

    Returns:
        The new programs (those not in ``seen``, which is updated), and per new program the
        ``(cost, subprogram, corrected mutant, step)`` that :func:`combine` takes.
    """
    cost_now, prog, history = entry
    additive = opt.additive
    fresh: list[_Entry] = []
    scored: list[tuple[float, Subprogram, Program, Applied]] = []
    for sub in progress(partition(prog, max_merge=3), opt.config.progress, label):
        for subset in operator_subsets(prog, sub, opt.config.max_subset):
            if opt.out_of_time():
                break
            part, mutants = opt.mutants_of(prog, subset, sub.name)
            part_cost = opt.cost(part.program) if mutants and additive else 0.0
            region = opt.region_of(prog, part) if mutants and not additive else None
            for mutant, corrected in mutants:
                if opt.out_of_time():  # a measured cost may time a whole candidate: seconds
                    break
                new = replace_subprogram(prog, part, corrected)
                key = canonical(new, opt.keys)[0]
                if key in seen:
                    continue
                seen.add(key)
                # with additive costs only the replaced part changes, so only small
                # programs are costed; otherwise the region around it (or the whole candidate)
                c = (cost_now - part_cost + opt.cost(corrected) if additive
                     else opt.rewrite_cost(region, cost_now, part, corrected, new, prog))
                if math.isinf(c):  # the cost model set it aside (measured: untuned kernels)
                    continue
                step = Applied(sub.name, _op_names(part.program.nodes), mutant.ops,
                               mutant.partially_equivalent, mutant.corrected_boxes, cost_now, c)
                fresh.append((c, new, history + [step]))
                scored.append((c, part, corrected, step))
    return fresh, scored


def _polished(opt: Optimizer, program: Program, cost: float
              ) -> tuple[Program, float, list[str]]:
    """``program`` post-optimized when that does not raise its cost, its cost, and the
    post-optimizations applied (none when the polished program was not kept, or when the time
    limit has passed: on swin_t they verify and cost the whole program, minutes for the best and
    its runners-up)."""
    if opt.out_of_time():
        return program, cost, []
    polished, names = post_optimize(program)
    if names and opt.cost(polished) <= cost:
        return polished, opt.cost(polished), names
    return program, cost, []
