"""The equality-saturation search: every verified mutant of every subprogram in one e-graph.

Where it goes: in place of Algorithm 2 (:func:`tvm_pet.search.optimizer.optimize`), with the
same inputs and the same :class:`~tvm_pet.search.optimizer.SearchResult`
(``SearchConfig(search="eqsat")``; :func:`tvm_pet.search.dispatch.run_search` picks it).

Each round:

1. The program is inserted into an egglog e-graph (:mod:`.terms`), hash-consed: subprograms
   that apply the same operators to the same tensors and equal weights are one e-class.
2. For every multi-linear subprogram, every merge of independent ones (Algorithm 2's
   :func:`~tvm_pet.search.partition.partition`) and every subset of at most ``max_subset``
   operators (:func:`~tvm_pet.search.optimizer.operator_subsets`), the generator's verified
   mutants (Algorithm 1, through the run's :class:`~tvm_pet.search.mutant_cache.MutantCache`,
   as Algorithm 2 gets them: a structure is generated once, however often it occurs) are
   inserted, each output unioned with the subprogram's same output. A partially equivalent
   mutant enters with its correction kernels: the corrected program is what is unioned, so
   the corrections are part of the alternative and their cost is charged.
3. The post-optimizations run as rewrite rules (:mod:`.rules`) until the e-graph saturates, or
   ``eqsat_iterations`` iterations, ``eqsat_nodes`` e-nodes or the time limit: the stop reason
   and the e-graph's size go into the result (:class:`EGraphReport`).
4. Programs are extracted by a greedy descent over the e-graph's choices, each move priced as
   the cost model prices a program: the analytic cost summed over the e-nodes chosen, the
   measured cost by the fusion regions a move changes (its fused kernels, compiled and timed
   once per region structure, so that non-additive fusion is accounted as Algorithm 2 accounts
   it), and each program kept costed whole (:mod:`.extract`).

The next round inserts the cheapest programs extracted and the mutants of their subsets (mutants
of mutants, as Algorithm 2's next round has). At the end the best program is polished with
the post-optimizations (``precompute_weights`` among them, which is not a rule) where that does
not raise its cost, as Algorithm 2 polishes its own; it never costs more than the original.
Before they are returned the best program and each runner-up are checked against the original
(:func:`checked`); one that fails is dropped.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time

import numpy as np

from tvm_pet.cost.analytic import AnalyticCost
from tvm_pet.cost.model import CostModel
from tvm_pet.errors import PetError
from tvm_pet.ir.keys import canonical
from tvm_pet.ir.node import Program
from tvm_pet.ir.ops import REDUCING
from tvm_pet.search.config import SearchConfig, StopReason
from tvm_pet.search.eqsat.extract import (ENode, NodeCosts, Snapshot, cheapest, descend,
                                          reachable)
from tvm_pet.search.eqsat.price import AdditivePrice, RegionPrice, WholePrice
from tvm_pet.search.eqsat.rules import RULES, Facts, rules_named
from tvm_pet.search.eqsat.terms import Alternative, ProgramEGraph, Registry
from tvm_pet.search.mutant_cache import MutantCache
from tvm_pet.search.optimizer import (Applied, Candidate, Optimizer, SearchResult, _polished,
                                      operator_subsets)
from tvm_pet.search.partition import partition
from tvm_pet.verify.verifier import verify

#: Random inputs a program with non-linear operators is checked on (:func:`checked`).
CHECK_SEEDS = 2
#: Largest difference :func:`checked` allows, relative to an output's largest magnitude (plus
#: one): in float64, rewrites exact up to rounding agree to about 1e-12 (the Relax pass's
#: numeric self-check allows the same).
CHECK_TOLERANCE = 1e-6


@dataclasses.dataclass
class EGraphReport:
    """How the e-graph grew and why saturation stopped (the last round's).

    Attributes:
        classes: e-classes at the end (argument lists included).
        nodes: e-nodes at the end.
        iterations: rule iterations run, all rounds together.
        stop: why the last saturation stopped: ``saturated``, ``iterations``, ``node_limit``
            or ``time_limit``.
        alternatives: verified rewrites of subprograms inserted (mutants, corrected).
        facts: verified facts added for the rules, by rule name.
        rounds: rounds of insertion and saturation.
        extracted: choices of e-nodes priced by the extraction (each a whole program).
        rejected: extracted programs the final check dropped.
    """

    classes: int
    nodes: int
    iterations: int
    stop: StopReason
    alternatives: int
    facts: dict[str, int]
    rounds: int
    extracted: int
    rejected: int = 0

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["stop"] = self.stop.value
        return out


def eqsat(program: Program, config: SearchConfig = SearchConfig(),
          cost: CostModel | None = None, mutants: MutantCache | None = None) -> SearchResult:
    """Search for a cheaper program that computes what ``program`` computes, by equality
    saturation over the verified mutants of its subprograms.

    Args:
        program: the program (non-linear operators are left as they are).
        config: budgets: rounds, max_subset, depth, time_limit, eqsat_iterations,
            eqsat_nodes, topk (runners-up kept), ...
        cost: the cost model (default :class:`~tvm_pet.cost.analytic.AnalyticCost`).
        mutants: the run's generator cache.

    Returns:
        A :class:`~tvm_pet.search.optimizer.SearchResult` with ``search="eqsat"`` and its
        :class:`EGraphReport`; its program costs at most as much as ``program`` and passed
        :func:`checked`.
    """
    cost = cost or AnalyticCost()
    opt = Optimizer(config, cost, mutants)
    start = time.perf_counter()
    base = opt.cost(program, original=True)
    run = _Run(program, config, opt, base)
    to_insert, rounds = [program], 0
    for rounds in range(1, config.rounds + 1):
        run.insert(to_insert)
        run.saturate()
        to_insert = run.extract()
        if not to_insert or run.stop in (StopReason.TIME_LIMIT, StopReason.NODE_LIMIT):
            break
    ranked = sorted(run.found.values(), key=lambda f: f[0])
    best, runners_up, rejected = _checked_best(program, base, ranked, opt, config)
    report = EGraphReport(run.classes, run.nodes, run.iterations, run.stop,
                          len([a for a in run.alternatives if not a.is_original]),
                          run.fact_counts(), rounds, run.extracted, rejected)
    program_out, cost_out, post = _polished(opt, best[1], best[0])
    stop = StopReason.TIME_LIMIT if opt.out_of_time() else run.stop
    return SearchResult(program_out, base, cost_out, best[2], opt.reports, rounds, stop,
                        time.perf_counter() - start, best[3] + post, runners_up,
                        search="eqsat", egraph=report)


#: A program found: its cost, the program, the rewrites it applies, and the names of the
#: rules whose products it holds.
_Found = tuple[float, Program, list[Applied], list[str]]


class _Run:
    """One eqsat search's state: the e-graph, its facts, the alternatives and what was found."""

    def __init__(self, program: Program, config: SearchConfig, opt: Optimizer, base: float):
        self.program, self.config, self.opt, self.base = program, config, opt, base
        self.graph = ProgramEGraph(Registry(opt.keys))
        self.facts = Facts(self.graph)
        self.rules = rules_named(RULES)
        ids = self.graph.add_program(program)
        self.roots = [ids[o] for o in program.outputs]
        self.original_terms = frozenset(ids.values())
        self.alternatives: list[Alternative] = []
        self.inserted: set[tuple] = set()
        self.found: dict[tuple, _Found] = {}
        self.stop = StopReason.SATURATED
        self.iterations = self.classes = self.nodes = self.extracted = 0

    def full(self) -> bool:
        return self.graph.size() >= self.config.eqsat_nodes

    def over_budget(self) -> bool:
        """Whether the time limit or the e-node limit is reached (:attr:`stop` says which)."""
        if self.opt.out_of_time():
            self.stop = StopReason.TIME_LIMIT
        elif self.full():
            self.stop = StopReason.NODE_LIMIT
        else:
            return False
        return True

    def insert(self, programs: list[Program]) -> None:
        """Insert each program and the verified mutants of each of its subsets."""
        for prog in programs:
            self.inserted.add(canonical(prog, self.opt.keys)[0])
            ids = self.graph.add_program(prog)
            for sub in partition(prog, max_merge=3):
                for subset in operator_subsets(prog, sub, self.config.max_subset):
                    if self.over_budget():
                        return
                    self._insert_subset(prog, ids, subset, sub.name)

    def _insert_subset(self, prog: Program, ids: dict, subset, name: str) -> None:
        part, mutants = self.opt.mutants_of(prog, subset, name)
        if not mutants:
            return
        ops = tuple(n.label for n in part.program.nodes)
        outs = tuple(ids[o] for o in part.program.outputs)
        here = self.graph.original_terms(ids, part.program)
        self.alternatives.append(Alternative(name, outs, here, ops, ops, is_original=True))
        for mutant, corrected in mutants:
            outputs, terms = self.graph.add_alternative(ids, part.program.outputs, corrected)
            self.alternatives.append(Alternative(
                name, outputs, terms, ops, mutant.ops, mutant.partially_equivalent,
                mutant.corrected_boxes))

    def saturate(self) -> None:
        """Run the rules until saturation or a budget; sets :attr:`stop`."""
        if self.stop in (StopReason.TIME_LIMIT, StopReason.NODE_LIMIT):
            return
        self.facts.classify()
        for _ in range(self.config.eqsat_iterations):
            if self.over_budget():
                return
            report = self.graph.egraph.run(self.rules.saturate())
            self.iterations += 1
            added = self.facts.answer()
            if not report.updated and not added:
                self.stop = StopReason.SATURATED
                return
        self.stop = StopReason.ITERATIONS

    def extract(self) -> list[Program]:
        """Extract and cost programs (:mod:`.extract`); returns the cheapest ones not yet
        inserted, for the next round."""
        snap = Snapshot(self.graph)
        self.classes, self.nodes = len(snap.classes), snap.e_nodes
        roots = [snap.class_of(t) for t in self.roots]
        seed = cheapest(snap, NodeCosts(snap, self.opt.cost_model))
        model = self.opt.cost_model
        args = (snap, roots, self.program, self.opt.cost)
        start, first = seed, []
        if getattr(model, "difference", None) is not None:
            price = RegionPrice(*args, model, self.opt.keys)
            # from the original, costed once: every move is a difference of its regions
            start, first = self._original_choice(snap), [seed]
            price.start = functools.partial(price.start, price=self.base)
            if price.start(start) is None:  # not expected: the original is in the e-graph
                raise PetError("the e-graph does not hold the program searched")
        elif self.opt.additive:
            price = AdditivePrice(*args, model)
        else:
            price = WholePrice(*args)
        descent = descend(snap, start, self.program, roots, self.alternatives, price,
                          lambda p: canonical(p, self.opt.keys)[0], self.opt.out_of_time,
                          keep=max(self.config.topk, 1), first=first)
        self.extracted += descent.priced
        ranked = sorted(descent.seen.items(), key=lambda kv: kv[1][0])
        for key, (c, prog, choice) in ranked[:max(self.config.topk, 1)]:
            if key not in self.found and math.isfinite(c):
                self.found[key] = (c, prog, self._applied(snap, choice, roots, c),
                                   self._rules_in(snap, choice, roots))
        return [prog for key, (c, prog, _) in ranked[:self.config.topk]
                if key not in self.inserted and math.isfinite(c)]

    def _original_choice(self, snap: Snapshot) -> dict[int, ENode]:
        """The e-node per e-class (argument lists included) of the program searched."""
        choice: dict[int, ENode] = {}
        terms = self.graph.terms
        for t in self.original_terms | {terms[t].children[0] for t in self.original_terms
                                        if terms[t].kind == "get"}:
            node = snap.enode_of(t, choice)
            choice[snap.index[node]] = node
        return choice

    def _applied(self, snap: Snapshot, choice: dict[int, ENode], roots, c: float
                 ) -> list[Applied]:
        """The mutants a choice applies, one per subprogram at most: a mutant is applied when
        the program computes each of its reducing operators (conv, matmul, pool) as the mutant
        does (its other operators may have been rewritten by the rules) and holds an e-node of
        it that the original program does not; of several, the one with the most e-nodes in
        the program."""
        used = reachable(snap, choice, roots)
        chosen = {choice[k] for k in used}
        original = {snap.enode_of(t) for t in self.original_terms}
        best: dict[str, tuple[float, Alternative]] = {}
        for a in self.alternatives:
            nodes = [snap.enode_of(t) for t in a.terms]
            heavy = [n for n in nodes if n.kind == "op"
                     and self.graph.registry.specs[n.lit].op in REDUCING]
            if (a.is_original or not heavy or not all(n in chosen for n in heavy)
                    or all(n in original for n in nodes if n in chosen)):
                continue
            share = sum(n in chosen for n in nodes) / len(nodes)
            if share > best.get(a.subprogram, (0.0, None))[0]:
                best[a.subprogram] = (share, a)
        before = self.opt.cost(self.program)
        return [Applied(a.subprogram, a.original_ops, a.ops, a.partially_equivalent,
                        a.corrected_boxes, before, c) for _, a in best.values()]

    def _rules_in(self, snap: Snapshot, choice: dict[int, ENode], roots) -> list[str]:
        """The rules whose facts made an e-node the choice uses."""
        names = {self.facts.made[choice[c].lit] for c in reachable(snap, choice, roots)
                 if choice[c].kind == "op" and choice[c].lit in self.facts.made}
        return sorted(names)

    def fact_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(RULES, 0)
        for name in self.facts.made.values():
            counts[name] += 1
        return counts



def _checked_best(program: Program, base: float, ranked: list[_Found], opt: Optimizer,
                  config: SearchConfig) -> tuple[_Found, list[Candidate], int]:
    """The cheapest found program that passes :func:`checked` (the original when none costs
    less), the runners-up as Algorithm 2 lists them (cheaper than the original, or within the
    cost model's ``spread`` above it; polished, checked, at most ``topk - 1``), and how many
    programs the check dropped."""
    original = canonical(program, opt.keys)[0]
    reference: dict[int, dict] = {}  # the original's outputs, by seed, for every candidate
    best: _Found | None = None
    runners: list[Candidate] = []
    rejected = 0
    for found in ranked:
        c, prog = found[0], found[1]
        if len(runners) >= config.topk - 1 and (best is not None or c >= base):
            break
        if canonical(prog, opt.keys)[0] == original or not (
                c < base or (c != base and c < base * opt.spread)):
            continue
        if not checked(program, prog, config, reference):
            rejected += 1
            continue
        if best is None and c < base:
            best = found
        elif len(runners) < config.topk - 1:
            runners.append(Candidate(*_polished(opt, prog, c)[:2], found[2]))
    return best or (base, program, [], []), runners, rejected


def checked(original: Program, candidate: Program, config: SearchConfig,
            reference: dict[int, dict] | None = None) -> bool:
    """Whether ``candidate`` computes what ``original`` computes.

    ``reference``, when given, keeps the original's outputs on each random input between
    calls (several candidates checked against one original).

    Multi-linear programs are compared by the verifier (Theorems 1 and 2, exact). Programs with
    non-linear operators, which the verifier does not take, are run in float64 on
    :data:`CHECK_SEEDS` random inputs; every output must agree within
    :data:`CHECK_TOLERANCE` (NaN where the original has NaN). Each
    part of the candidate was verified as it entered the e-graph; this checks their assembly.
    A candidate that cannot be checked (an operator the float interpreter does not evaluate)
    fails.
    """
    from tvm_pet.verify.interpreter import evaluate
    try:
        if original.is_multilinear() and candidate.is_multilinear():
            return verify(original, candidate, tests=config.tests, seed=config.seed).equivalent
        for seed in range(CHECK_SEEDS):
            rng = np.random.default_rng(config.seed + seed)
            x = {t.name: rng.standard_normal(t.shape) for t in original.inputs}
            want = None if reference is None else reference.get(seed)
            if want is None:
                want = evaluate(original, x, np.float64)
                if reference is not None:
                    reference[seed] = want
            got = evaluate(candidate, x, np.float64)
            for name in original.outputs:
                if not _agree(want[name], got[name]):
                    return False
        return True
    except PetError:
        return False


def _agree(want: np.ndarray, got: np.ndarray) -> bool:
    """Equal shapes, NaN at the same positions, and elsewhere a largest difference within
    :data:`CHECK_TOLERANCE` of one plus the largest magnitude."""
    if want.shape != got.shape or not np.array_equal(np.isnan(want), np.isnan(got)):
        return False
    finite = ~np.isnan(want)
    scale = 1.0 + float(np.abs(want[finite]).max(initial=0.0))
    return bool(np.abs(got[finite] - want[finite]).max(initial=0.0) <= CHECK_TOLERANCE * scale)
