"""The mutant generator (paper Algorithm 1): depth-first enumeration of programs.

Starting from the subprogram's inputs and weights, each step applies one operator instance
(:mod:`tvm_pet.search.moves`) to tensors available so far. A program is kept when a tensor has the
subprogram's output shape(s): in the last step only moves that reach those shapes are tried.
Pruning: by shape (only shape-valid instances exist), by duplicates (a canonical structural hash,
order-free for commutative operators), by layout chains (no regroup of a regroup, so no inverse
pair; no pad of a pad), by dependence (a mutant must read every input and weight the subprogram
reads) and by a quick exact screen (a few random positions mod p; a mutant that agrees on too
few of them would need corrections nearly everywhere). Every kept mutant is verified and, when
partially equivalent, corrected.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator, Sequence

import numpy as np

from tvm_pet.errors import PetError
from tvm_pet.ir.node import Node, Program
from tvm_pet.ir.ops import BIJECTIVE_LAYOUT, COMMUTATIVE, LAYOUT, Op, REDUCING
from tvm_pet.search.config import SearchConfig, StopReason
from tvm_pet.search.moves import (Vocabulary, concat_moves, conv_moves, data_pad_moves,
                                  fill_moves, final_moves, infer, matmul_moves, merge_moves, regroups,
                                  weight_pad_moves)
from tvm_pet.verify.corrector import correct
from tvm_pet.verify.verifier import VerifyResult, evaluate_points, random_env, verify

#: Random positions of the quick screen, per output.
SCREEN_POSITIONS = 12


@dataclasses.dataclass(frozen=True)
class Mutant:
    """A verified mutant of a subprogram.

    Attributes:
        program: the mutant as generated (possibly only partially equivalent).
        corrected: the mutant with corrections; computes exactly what the subprogram computes.
        result: the verifier's result for the mutant.
        ops: the mutant's operators, readable (``Conv``, ``ReshapeTranspose``, ...).
        seconds: time from the start of generation to this mutant's discovery.
    """

    program: Program
    corrected: Program
    result: VerifyResult
    ops: tuple[str, ...]
    seconds: float

    @property
    def partially_equivalent(self) -> bool:
        return not self.result.equivalent

    @property
    def corrected_boxes(self) -> int:
        return self.result.differing_boxes


@dataclasses.dataclass
class GeneratorStats:
    """What the generator did, for reports."""

    states: int = 0
    candidates: int = 0
    duplicates: int = 0
    screened_out: int = 0
    verified: int = 0
    corrected: int = 0
    rejected: int = 0
    seconds: float = 0.0
    stop: StopReason = StopReason.EXHAUSTED

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["stop"] = self.stop.value
        return out


class _MutantEnumerator:
    """Algorithm 1 on one subprogram: the depth-first enumeration, its pruning state and stats.

    :meth:`run` yields the verified (and corrected) mutants; :attr:`stats` counts what was tried
    and says why the enumeration stopped. :func:`generate` and :func:`iter_mutants` drive it.
    """

    def __init__(self, sub: Program, config: SearchConfig, deadline: float | None):
        self.sub, self.config, self.deadline = sub, config, deadline
        self.vocab = Vocabulary.of(sub, winograd=config.winograd, im2col=config.im2col)
        self.targets = [sub.shapes[o] for o in sub.outputs]
        self.needed = set(sub.input_names) | set(sub.weights)
        self.reducing = sum(n.op in REDUCING for n in sub.nodes)
        # the subprogram's element-wise operators, with the position of their data input
        constant = set(sub.weights) | {o for n in sub.nodes if n.op is Op.FILL for o in n.outputs}
        self.clones = [(n, next(k for k, i in enumerate(n.inputs) if i not in constant))
                       for n in sub.nodes if n.op not in REDUCING and n.op not in LAYOUT
                       and any(i not in constant for i in n.inputs)]
        self.prefix = "m"
        while any(name.startswith(self.prefix) for name in sub.shapes):
            self.prefix += "_"
        self.seen: set = set()
        self.explored: dict[frozenset, int] = {}
        self.stats = GeneratorStats()
        self.start = time.perf_counter()
        self.env = random_env([sub], 1, config.seed + 7)
        self.base_env = {n: self.env[(0, n)] for n in list(sub.input_names) + list(sub.weights)}
        rng = np.random.default_rng(config.seed)
        self.screen = {o: rng.integers(0, math.prod(sub.shapes[o]), SCREEN_POSITIONS)
                       for o in sub.outputs}
        self.reference = evaluate_points(sub, self.base_env, self.screen)
        self.sub_key = self._key(list(sub.nodes), sub.outputs)

    # -------------------------------------------------------------------------- enumeration
    def run(self) -> Iterator[Mutant]:
        """Iterative deepening: every mutant of depth k is found before any of depth k + 1."""
        if not self.targets:
            return  # nothing is read outside (dead nodes): there is nothing to reproduce
        shapes = {k: v for k, v in self.sub.shapes.items() if k in self.needed}
        leaves = {k: frozenset([k]) for k in shapes}
        for depth in range(1, self.config.depth + 1):
            yield from self._expand([], shapes, leaves, depth)
            if self._out_of_budget():
                return

    def _out_of_budget(self) -> bool:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.stats.stop = StopReason.TIME_LIMIT
            return True
        if self.stats.verified >= self.config.max_candidates:
            self.stats.stop = StopReason.CANDIDATE_LIMIT
            return True
        return False

    def _expand(self, nodes: list[Node], shapes: dict, leaves: dict, depth: int) -> Iterator[Mutant]:
        if depth == 0 or self._out_of_budget():
            return
        used_reducing = sum(n.op in REDUCING for n in nodes)
        # the shortest tail that can still finish: a reducing op (when the subprogram has one),
        # then, for several outputs, a SPLIT; before the reducing op, the tensors must first be
        # brought together so that one pair of them reads every input and weight (one more op
        # at least if no pair does yet)
        tail = (1 if self.reducing else 0) + (len(self.targets) > 1)
        covered = True
        if self.reducing and not used_reducing:
            reads = set(leaves.values())
            covered = any(self.needed <= a | b for a in reads for b in reads)
            if tail + (not covered) > depth:
                return
        state = frozenset(self._key(nodes, [o for n in nodes for o in n.outputs]))
        if self.explored.get(state, 0) >= depth:
            return  # the same nodes, reached in another order
        self.explored[state] = depth
        self.stats.states += 1
        producer = {o: n for n in nodes for o in n.outputs}
        data = [t for t in shapes if self._is_data(t, producer)]
        weights = [t for t in shapes if t not in data]
        # with no reducing op yet and no room to spare, only a reducing op that reads every input
        # and weight can lead anywhere
        must_reduce = self.reducing and not used_reducing and depth <= tail
        for op, inputs, attrs in self._moves(producer, data, weights, shapes, leaves, depth,
                                             used_reducing, must_reduce, nodes):
            read = frozenset().union(*(leaves[i] for i in inputs))
            if must_reduce and (op not in REDUCING or not self.needed <= read):
                continue
            outs = infer(op, attrs, [shapes[i] for i in inputs])
            if outs is None:
                continue
            hit = [tuple(s) for s in outs] == self.targets or (len(self.targets) == 1 and
                                                                tuple(outs[0]) == self.targets[0])
            expand = depth > 1 and op is not Op.SPLIT and self._child_feasible(
                op, read, covered, leaves, used_reducing, tail, depth - 1)
            if not (hit or expand):
                continue
            names = tuple(f"{self.prefix}{len(nodes)}_{k}" for k in range(len(outs)))
            node = Node(op, inputs, names, attrs)
            if hit:
                mutant = self._complete(nodes + [node], names[:len(self.targets)])
                if mutant is not None:
                    yield mutant
            if expand:
                grown = dict(shapes)
                grown.update(zip(names, outs))
                more = dict(leaves)
                more.update((n, read) for n in names)
                yield from self._expand(nodes + [node], grown, more, depth - 1)
            if self._out_of_budget():
                return

    def _child_feasible(self, op: Op, read: frozenset, covered: bool, leaves: dict,
                        used_reducing: int, tail: int, depth: int) -> bool:
        """The bound of :meth:`_expand`, checked before the child state is built (``covered``:
        whether a pair of the parent's tensors reads every input and weight; the child adds
        the pairs with its new tensor, which reads ``read``)."""
        if not self.reducing or used_reducing or op in REDUCING:
            return True
        covered = covered or self.needed <= read or any(
            self.needed <= read | b for b in set(leaves.values()))
        return tail + (not covered) <= depth

    def _is_data(self, t: str, producer: dict) -> bool:
        if t in self.sub.input_names:
            return True
        node = producer.get(t)
        return node is not None and any(self._is_data(i, producer) for i in node.inputs)

    def _moves(self, producer, data, weights, shapes, leaves, depth, used_reducing, only_reduce,
               nodes):
        """Move candidates, most promising kinds first (merges before regroups)."""
        last = depth == 1
        if last and not only_reduce:
            for x in data:
                # no layout right after a reshape or regroup: that pair is fused or inverse
                if self.needed <= leaves[x] and (producer.get(x) is None or
                                                 producer[x].op not in BIJECTIVE_LAYOUT):
                    yield from final_moves(self.vocab, x, shapes, self.targets)
        fresh = [t for t in data if t not in producer or producer[t].op in LAYOUT]
        if used_reducing < max(1, self.reducing):
            for x in fresh:
                for w in weights:
                    if only_reduce and not self.needed <= leaves[x] | leaves[w]:
                        continue
                    yield from conv_moves(self.vocab, x, w, shapes)
                    yield from matmul_moves(x, w, shapes)
        if only_reduce:
            return
        for x in data:
            for node, k in self.clones:  # the subprogram's own element-wise operators
                inputs = list(node.inputs)
                inputs[k] = x
                if all(i in shapes for i in inputs) and x not in node.inputs:
                    yield node.op, tuple(inputs), node.attrs
        if last:
            return
        originals = [t for t in data if t not in producer]
        yield from concat_moves(originals, shapes)
        free = [w for w in weights if not any(w in n.inputs for n in nodes)]
        yield from concat_moves(free, shapes)
        inputs_channels = {shapes[x][1] for x in data if len(shapes[x]) >= 3 and
                           (x not in producer or producer[x].op is Op.CONCAT)}
        for w in weights:
            if w not in producer or producer[w].op is not Op.PAD:
                yield from weight_pad_moves(w, shapes, inputs_channels, self.vocab.kernels)
        for x in data:
            kind = producer[x].op if x in producer else None
            if kind is not Op.RESHAPE_TRANSPOSE and kind not in REDUCING:
                for attrs, _ in regroups(shapes[x], self.vocab.factors):
                    yield Op.RESHAPE_TRANSPOSE, (x,), attrs
            if kind is not Op.PAD and kind not in REDUCING:
                yield from data_pad_moves(self.vocab, x, shapes)
            if kind is None:
                yield from merge_moves(x, shapes)
        if not any(n.op is Op.FILL for n in nodes):
            for x in self.sub.input_names:
                yield from fill_moves(self.vocab, x, shapes)

    # ----------------------------------------------------------------------- completion
    def _key(self, nodes: Sequence[Node], outputs: Sequence[str]):
        producer = {o: (n, k) for n in nodes for k, o in enumerate(n.outputs)}
        memo: dict[str, object] = {}

        def key(t: str):
            if t not in memo:
                if t not in producer:
                    memo[t] = ("leaf", t)
                else:
                    n, k = producer[t]
                    args = tuple(key(i) for i in n.inputs)
                    if n.op in COMMUTATIVE:
                        args = tuple(sorted(args, key=hash))
                    memo[t] = (n.op, n.attrs, args, k)
            return memo[t]

        return tuple(key(o) for o in outputs)

    def _complete(self, nodes: list[Node], finals: Sequence[str]) -> Mutant | None:
        self.stats.candidates += 1
        live = self._ancestors(nodes, finals)
        kept = [n for n in nodes if any(o in live for o in n.outputs)]
        rename = dict(zip(finals, self.sub.outputs))
        key = self._key(kept, finals)
        if key in self.seen or key == self.sub_key:
            self.stats.duplicates += 1
            return None
        self.seen.add(key)
        reads = {i for n in kept for i in n.inputs}
        if not self.needed <= reads:
            return None
        kept = [Node(n.op, n.inputs, tuple(rename.get(o, o) for o in n.outputs), n.attrs)
                for n in kept]
        kept = [Node(n.op, tuple(rename.get(i, i) for i in n.inputs), n.outputs, n.attrs)
                for n in kept]
        try:
            candidate = Program(self.sub.inputs, dict(self.sub.weights), tuple(kept),
                                self.sub.outputs, f"{self.sub.name}_mutant")
        except PetError:
            return None
        if not self._screen(candidate):
            self.stats.screened_out += 1
            return None
        self.stats.verified += 1
        try:
            result = verify(self.sub, candidate, tests=self.config.tests, seed=self.config.seed)
            corrected = correct(self.sub, candidate, result)
        except PetError:
            self.stats.rejected += 1
            return None
        if not result.equivalent:
            self.stats.corrected += 1
        ops = tuple(n.label for n in kept)
        return Mutant(candidate, corrected, result, ops, time.perf_counter() - self.start)

    @staticmethod
    def _ancestors(nodes: Sequence[Node], finals: Sequence[str]) -> set[str]:
        producer = {o: n for n in nodes for o in n.outputs}
        live, stack = set(), list(finals)
        while stack:
            t = stack.pop()
            if t in producer and t not in live:
                live.add(t)
                stack.extend(producer[t].inputs)
        return live

    def _screen(self, candidate: Program) -> bool:
        """Agreement at a few random positions mod p (exact); drops hopeless candidates cheaply."""
        got = evaluate_points(candidate, self.base_env, self.screen)
        agree = np.mean([np.mean(got[o] == self.reference[o]) for o in self.sub.outputs])
        return bool(agree >= self.config.min_agreement)


def generate(sub: Program, config: SearchConfig = SearchConfig(),
             deadline: float | None = None) -> tuple[list[Mutant], GeneratorStats]:
    """All verified (and, where needed, corrected) mutants of a multi-linear subprogram.

    Args:
        sub: the subprogram (multi-linear; see :func:`~tvm_pet.search.partition.partition`).
        config: budgets (depth, max_candidates, time_limit, tests, seed, min_agreement).
        deadline: a ``time.perf_counter()`` value after which to stop (overrides time_limit).

    Returns:
        The mutants in discovery order, and the generator's statistics (with why it stopped).
    """
    if deadline is None and config.time_limit is not None:
        deadline = time.perf_counter() + config.time_limit
    enumerator = _MutantEnumerator(sub, config, deadline)
    mutants = list(enumerator.run())
    enumerator.stats.seconds = time.perf_counter() - enumerator.start
    return mutants, enumerator.stats


def iter_mutants(sub: Program, config: SearchConfig = SearchConfig(),
                 deadline: float | None = None) -> tuple[Iterator[Mutant], GeneratorStats]:
    """Like :func:`generate`, lazily: mutants are yielded as they are found."""
    if deadline is None and config.time_limit is not None:
        deadline = time.perf_counter() + config.time_limit
    enumerator = _MutantEnumerator(sub, config, deadline)
    return enumerator.run(), enumerator.stats
