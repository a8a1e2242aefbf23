"""Extraction: programs out of the e-graph, chosen by the project's cost model.

egglog's own extractor sums a cost per e-node over a tree. A compiled program's cost is not such
a sum: an e-class read twice is computed once (a merge's outputs share their matmul), and TVM
fuses neighbouring operators into one kernel (the measured cost times kernels, not operators).
So the extraction here works on a :class:`Snapshot` of the saturated e-graph, in two steps:

1. **An additive seed.** Each e-node costs what the cost model charges for its operator alone
   (a one-operator program; the analytic model when the cost model is not additive, as the
   measured one times fused kernels), nothing for leaves and for multi-linear operators over
   constants (precomputed), and each e-class its cheapest e-node plus its children, computed
   bottom-up in cost order (Knuth's generalisation of Dijkstra's algorithm): an e-node is
   eligible only once all its children are settled, so the choice never makes a cycle.
2. **Whole programs, costed as Algorithm 2 costs them.** From the seed, a greedy descent tries
   each inserted alternative of a subprogram (a mutant with its corrections, or the
   subprogram as it was; all outputs of a merge at once) and each other e-node of the e-classes
   the current program uses. Each move is priced without compiling the whole program:

   - an additive cost model (the analytic one): the sum over the e-classes the program computes
     of the model's cost of the chosen e-node alone, nothing for multi-linear e-nodes over
     constants (:class:`~.price.AdditivePrice`); that sum is the whole program's analytic cost;
   - a cost model with a ``difference`` of two regions (the measured one, whose fused kernels
     make costs non-additive): the move's fusion regions before and after, the kernels TVM
     fuses there compiled and timed, the unchanged kernels at their edge cancelling, as
     Algorithm 2 costs a rewrite (:class:`~.price.RegionPrice`); the descent then starts from the
     original program, costed whole once, and tries the seed as its first move;
   - any other cost model: the whole program (:class:`~.price.WholePrice`).

   After each pass over the moves, those priced below the current program are taken cheapest
   first, each kept where the whole program, built and costed (with a region price: the
   region's price), still costs less. It stops when a pass changes nothing or the time limit
   passes.

:func:`build` turns a choice (an e-node per e-class) into a :class:`~tvm_pet.ir.node.Program`,
refusing a cyclic choice.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from collections.abc import Callable, Mapping

from tvm_pet.cost.analytic import AnalyticCost
from tvm_pet.cost.model import CostModel
from tvm_pet.errors import PetError
from tvm_pet.ir.node import Node, Program, TensorSpec
from tvm_pet.ir.ops import MULTILINEAR, Op
from tvm_pet.search.eqsat.terms import Alternative, ProgramEGraph


@dataclasses.dataclass(frozen=True)
class ENode:
    """One e-node of a snapshot: its kind (``input``, ``weight``, ``op``, ``get``, ``cons``,
    ``nil``), its literal (name, key or output index) and its children (e-class ids)."""

    kind: str
    lit: str | int | None
    children: tuple[int, ...]


class Snapshot:
    """The e-classes and e-nodes of a :class:`ProgramEGraph` at one moment, as plain data.

    Attributes:
        classes: the e-nodes of each e-class (``Args`` lists included), by e-class id.
        index: the e-class of each e-node.
    """

    def __init__(self, graph: ProgramEGraph):
        self.graph = graph
        frozen = graph.egraph.freeze().decl.e_classes
        ids = {value: k for k, value in enumerate(frozen)}
        self.classes: list[list[ENode]] = [[] for _ in ids]
        self.index: dict[ENode, int] = {}
        for value, (_, calls) in frozen.items():
            for call in calls:
                node = _enode(call, ids)
                self.classes[ids[value]].append(node)
                self.index[node] = ids[value]
        self._term_class: dict[int, int] = {}
        self._reads: dict[ENode, tuple[int, ...]] = {}
        self._gets: dict[tuple[int, int], int] | None = None
        self._named: dict[int, str] | None = None
        self._stable: dict[int, str] | None = None

    @property
    def e_nodes(self) -> int:
        return sum(len(c) for c in self.classes)

    def class_of(self, tid: int) -> int:
        """The e-class of an inserted term (its children's first, with a stack of its own: a
        deep model is deeper than Python's recursion)."""
        found = self._term_class.get(tid)
        if found is not None:
            return found
        terms, stack = self.graph.terms, [tid]
        while stack:
            t = stack[-1]
            if t in self._term_class:
                stack.pop()
                continue
            missing = [c for c in terms[t].children if c not in self._term_class]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            self._term_class[t] = self.index[self.enode_of(t)]
        return self._term_class[tid]

    def enode_of(self, tid: int, lists: dict[int, ENode] | None = None) -> ENode:
        """The e-node an inserted term is now (its children canonical); the e-nodes of an
        ``opn`` node's argument list go into ``lists`` when given."""
        t = self.graph.terms[tid]
        kids = tuple(self.class_of(c) for c in t.children)
        if t.kind != "op" or len(kids) in (1, 2):
            return ENode(t.kind, t.lit, kids)
        tail = self.index[ENode("nil", None, ())]
        for k in reversed(kids):
            cons = ENode("cons", None, (k, tail))
            tail = self.index[cons]
            if lists is not None:
                lists[tail] = cons
        return ENode("op", t.lit, (tail,))

    def reads(self, node: ENode) -> tuple[int, ...]:
        """The e-classes an e-node reads as tensors (an ``opn`` node's list flattened; an
        argument list's e-class holds one e-node, its children canonical)."""
        found = self._reads.get(node)
        if found is None:
            found = tuple(_inputs(self, {}, node))
            self._reads[node] = found
        return found

    @property
    def gets(self) -> dict[tuple[int, int], int]:
        """The e-class of output ``k`` of each e-class of operators with several outputs."""
        if self._gets is None:
            self._gets = _gets(self)
        return self._gets

    @property
    def named(self) -> dict[int, str]:
        """A tensor name of the inserted programs for each e-class that has one."""
        if self._named is None:
            self._named = {}
            for tid, name in self.graph.names.items():
                self._named.setdefault(self.class_of(tid), name)
        return self._named

    def stable_names(self, taken: set[str]) -> dict[int, str]:
        """A tensor name for every e-class that does not depend on a choice: its name in the
        inserted programs (the lowering finds an opaque operator's original expression by its
        output's name), else one of its id; each name once, none in ``taken`` (the inputs
        and weights)."""
        if self._stable is None:
            self._stable, used = {}, set(taken)
            for c in range(len(self.classes)):
                name = self.named.get(c)
                if name is None or name in used:
                    name = f"ec{c}"
                    while name in used or name in self.named.values():
                        name += "_"
                used.add(name)
                self._stable[c] = name
        return self._stable

    def choice_of(self, alternative: Alternative) -> dict[int, ENode]:
        """The e-node per e-class (argument lists included) that applies ``alternative``."""
        choice: dict[int, ENode] = {}
        for t in alternative.terms:
            node = self.enode_of(t, choice)
            choice[self.index[node]] = node
        return choice


def _enode(call, ids) -> ENode:
    name = getattr(call.callable, "method_name", None) or str(call.callable)
    lits, kids = [], []
    for arg in call.args:
        value = getattr(arg.expr, "value", None)
        if value in ids:
            kids.append(ids[value])
        else:
            lits.append(value)
    kind = {"op1": "op", "op2": "op", "opn": "op"}.get(name, name)
    return ENode(kind, lits[0] if lits else None, tuple(kids))


class NodeCosts:
    """The additive cost of each e-node (step 1 of the module docstring)."""

    def __init__(self, snap: Snapshot, cost: CostModel):
        self.snap = snap
        additive = getattr(cost, "additive", True)
        self.model = cost if additive else AnalyticCost()
        self._memo: dict[str, float] = {}
        self.constant = self._constants()

    def _constants(self) -> set[int]:
        """E-classes known before the program runs: weights, and multi-linear operators,
        lists and outputs over them."""
        specs, known = self.snap.graph.registry.specs, set()
        changed = True
        while changed:
            changed = False
            for c, nodes in enumerate(self.snap.classes):
                if c in known:
                    continue
                for n in nodes:
                    if n.kind == "input":
                        continue
                    if n.kind == "op" and specs[n.lit].op not in MULTILINEAR:
                        continue
                    if all(k in known for k in n.children):
                        known.add(c)
                        changed = True
                        break
        return known

    def __call__(self, node: ENode) -> float:
        if node.kind != "op" or all(k in self.constant for k in node.children) and \
                self.snap.graph.registry.specs[node.lit].op in MULTILINEAR:
            return 0.0
        if node.lit not in self._memo:
            spec = self.snap.graph.registry.specs[node.lit]
            names = [f"i{k}" for k in range(spec.arity)]
            outs = [f"o{k}" for k in range(len(spec.out_shapes))]
            alone = Program(tuple(TensorSpec(n, s) for n, s in zip(names, spec.in_shapes)), {},
                            (spec.node(names, outs),), tuple(outs), "e-node")
            self._memo[node.lit] = float(self.model.cost(alone))
        return self._memo[node.lit]


def cheapest(snap: Snapshot, costs: NodeCosts) -> dict[int, ENode]:
    """The cheapest e-node of each e-class by tree cost (step 1): e-classes are settled in
    order of cost, an e-node once all its children are settled, so no choice is cyclic."""
    parents: dict[int, list[ENode]] = {}
    waiting: dict[ENode, int] = {}
    heap: list[tuple[float, int, int, ENode]] = []
    order = 0
    for c, nodes in enumerate(snap.classes):
        for n in nodes:
            kids = set(n.children)
            waiting[n] = len(kids)
            for k in kids:
                parents.setdefault(k, []).append(n)
            if not kids:
                heapq.heappush(heap, (costs(n), order, c, n))
                order += 1
    best: dict[int, tuple[float, ENode]] = {}
    while heap:
        total, _, c, n = heapq.heappop(heap)
        if c in best:
            continue
        best[c] = (total, n)
        for p in parents.get(c, ()):
            waiting[p] -= 1
            if waiting[p] == 0:
                pc = snap.index[p]
                if pc not in best:
                    value = costs(p) + sum(best[k][0] for k in p.children)
                    heapq.heappush(heap, (value, order, pc, p))
                    order += 1
    return {c: n for c, (_, n) in best.items()}


class CyclicChoice(PetError):
    """A choice of e-nodes whose program would read its own output."""


def build(snap: Snapshot, choice: Mapping[int, ENode], original: Program,
          roots: list[int], stable: bool = False) -> Program:
    """The program a choice of e-nodes makes, with ``original``'s inputs and outputs (the
    e-classes ``roots``).

    Tensors keep their names in ``original`` where they have one; an output whose e-class is
    a leaf, or another output's, is defined by an identity RESHAPE. With ``stable``, a tensor
    is named after its e-class alone (:meth:`Snapshot.stable_names`), so that two choices give
    equal nodes wherever they choose the same e-nodes: what :class:`~.price.RegionPrice`
    compares.

    Raises:
        CyclicChoice: the choice reads an e-class from inside its own subterm.
        KeyError: an e-class the program needs has no choice.
    """
    builder = _Builder(snap, choice, original, roots if stable else None)
    for c in _post_order(snap, choice, roots):
        builder.emit(c)
    return builder.program(roots)


def _post_order(snap: Snapshot, choice: Mapping[int, ENode], roots: list[int]) -> list[int]:
    """The e-classes the choice reads from ``roots``, each after those it reads (a stack of
    its own: a deep model is deeper than Python's recursion)."""
    state: dict[int, int] = {}  # 1: on the path from a root, 2: done
    order: list[int] = []
    stack: list[tuple[int, bool]] = [(c, False) for c in reversed(roots)]
    while stack:
        c, ready = stack.pop()
        if state.get(c) == 2:
            continue
        if ready:
            state[c] = 2
            order.append(c)
            continue
        if state.get(c) == 1:
            raise CyclicChoice(f"e-class {c} reads itself")
        state[c] = 1
        stack.append((c, True))
        for k in reversed(snap.reads(choice[c])):
            if state.get(k) == 1:
                raise CyclicChoice(f"e-class {c} reads e-class {k} from inside it")
            if state.get(k) != 2:
                stack.append((k, False))
    return order


class _Builder:
    """The nodes, tensor names and weights of :func:`build`'s program, e-class by e-class
    (``stable_roots``: given for a stable build, see :func:`build`)."""

    def __init__(self, snap: Snapshot, choice: Mapping[int, ENode], original: Program,
                 stable_roots: list[int] | None = None):
        self.snap, self.choice, self.original = snap, choice, original
        registry = snap.graph.registry
        self.taken = set(original.shapes) | set(registry.weight_names.values())
        self.named = snap.named
        self.stable: dict[int, str] | None = None
        if stable_roots is not None:
            self.stable = snap.stable_names(set(original.input_names)
                                            | set(registry.weight_names.values()))
        self.assigned: set[str] = set()
        self.fresh = (f"e{k}" for k in itertools.count())
        self.gets = snap.gets
        self.tensor: dict[int, str] = {}
        self.tuples: dict[int, tuple[str, ...]] = {}
        self.weights: dict[str, object] = {}
        self.nodes: list[Node] = []

    def name(self, c: int, k: int | None = None) -> str:
        """A tensor name for e-class ``c`` (output ``k`` of ``c`` where ``c`` has several and
        no e-class of its own is read for it): its name in the original where it is free, or
        with a stable build, a name of the e-class alone."""
        if self.stable is not None:
            if k is None:
                return self.stable[c]
            name = f"ec{c}o{k}"  # an output no e-class of its own is read for
            while name in self.taken or name in self.named.values():
                name += "_"
            return name
        name = self.named.get(c) if k is None else None
        if (name is None or name in self.assigned or name in self.original.input_names
                or name in self.original.weights):
            name = next(n for n in self.fresh if n not in self.taken)
        self.taken.add(name)
        self.assigned.add(name)
        return name

    def emit(self, c: int) -> None:
        """Define e-class ``c`` from its chosen e-node (its inputs are defined already)."""
        node, registry = self.choice[c], self.snap.graph.registry
        if node.kind == "input":
            self.tensor[c] = node.lit
        elif node.kind == "weight":
            name = registry.weight_names[node.lit]
            self.weights[name] = registry.weights[node.lit]
            self.tensor[c] = name
        elif node.kind == "get":
            self.tensor[c] = self.tuples[node.children[0]][node.lit]
        elif node.kind == "op":
            spec = registry.specs[node.lit]
            if len(spec.out_shapes) == 1:
                outs = (self.name(c),)
                self.tensor[c] = outs[0]
            else:  # an output keeps its e-class's name only where that e-class reads it here
                outs = tuple(self.name(self.gets[(c, k)]) if self.choice.get(
                    self.gets.get((c, k), -1)) == ENode("get", k, (c,)) else self.name(c, k)
                    for k in range(len(spec.out_shapes)))
                self.tuples[c] = outs
            inputs = [self.tensor[k] for k in self.snap.reads(node)]
            self.nodes.append(spec.node(inputs, outs))

    def program(self, roots: list[int]) -> Program:
        """The program, its outputs the original's names (an identity RESHAPE where needed)."""
        nodes = list(self.nodes)
        for name, c in zip(self.original.outputs, roots):
            if self.tensor[c] != name:
                shape = self.original.shapes[name]
                nodes.append(Node(Op.RESHAPE, (self.tensor[c],), (name,), {"shape": shape}))
        return Program(self.original.inputs, self.weights, tuple(nodes), self.original.outputs,
                       self.original.name)


def _inputs(snap: Snapshot, choice: Mapping[int, ENode], node: ENode) -> list[int]:
    """The e-classes an e-node reads as tensors (an ``opn`` node's list flattened)."""
    if node.kind == "get":
        return [node.children[0]]
    if node.kind != "op":
        return []
    if len(node.children) == 1 and snap.graph.registry.specs[node.lit].arity != 1:
        out, c = [], node.children[0]
        while True:
            n = choice[c] if c in choice else snap.classes[c][0]
            if n.kind == "nil":
                return out
            out.append(n.children[0])
            c = n.children[1]
    return list(node.children)


def _gets(snap: Snapshot) -> dict[tuple[int, int], int]:
    """The e-class of output ``k`` of each e-class of operators with several outputs."""
    return {(n.children[0], n.lit): c for c, nodes in enumerate(snap.classes)
            for n in nodes if n.kind == "get"}


def reachable(snap: Snapshot, choice: Mapping[int, ENode], roots) -> set[int]:
    """The e-classes a choice's program reads, from ``roots``."""
    seen, stack = set(), list(roots)
    while stack:
        c = stack.pop()
        if c in seen or c not in choice:
            continue
        seen.add(c)
        node = choice[c]
        stack.extend(node.children)
    return seen


@dataclasses.dataclass
class Descent:
    """What the greedy descent (step 2) found: the best choice and the cheapest programs it
    priced (by structure), with their costs; ``priced``: how many choices it priced."""

    choice: dict[int, ENode]
    cost: float
    program: Program
    seen: dict[tuple, tuple[float, Program, dict[int, ENode]]]
    timed_out: bool = False
    priced: int = 0


def descend(snap: Snapshot, start: dict[int, ENode], original: Program, roots: list[int],
            alternatives: list[Alternative], price, key: Callable[[Program], tuple],
            out_of_time: Callable[[], bool], keep: int = 4,
            first: list[dict[int, ENode]] = ()) -> Descent:
    """Greedy descent over whole programs from ``start`` (step 2 of the module docstring).

    Moves: ``first``, each alternative of :class:`Alternative` (all its e-nodes at once), then
    each other e-node of each e-class the current program reads. ``price`` (an
    :class:`~.price.AdditivePrice`, :class:`~.price.RegionPrice` or
    :class:`~.price.WholePrice`) prices each move from
    the current program; after a pass over all of them, the moves priced below it are taken
    cheapest first, each where it still lowers the price of the program the moves before it
    made and ``price.accept`` confirms it (the whole program costed, or for a region price,
    the region's): the best rewrite of a subprogram is not shadowed by a worse one tried
    earlier. Passes repeat until none improves. The ``keep`` cheapest choices priced are built
    and returned in ``seen``, by ``key`` (a structural key).
    """
    started = price.start(start)
    if started is None:
        raise CyclicChoice("the descent's start has no program")
    walk = _Walk(snap, roots, price, key, out_of_time, keep, dict(start), *started)
    moves = list(first) + [snap.choice_of(a) for a in alternatives]
    improved = True
    while improved and not walk.timed_out:
        walk.used = reachable(snap, walk.current, roots)
        singles = [{c: n} for c in sorted(walk.used) for n in snap.classes[c]
                   if n != walk.current[c] and len(snap.classes[c]) > 1]
        improved = walk.take(walk.price_all(moves + singles))
    walk.build_cheapest(original)
    return Descent(walk.current, walk.best, walk.program, walk.seen, walk.timed_out,
                   walk.priced)


class _Walk:
    """The state of :func:`descend`: the current choice, its price and program, the choices
    seen (by structural key), the ``keep`` cheapest choices priced, and the moves priced."""

    def __init__(self, snap: Snapshot, roots: list[int], price, key, out_of_time, keep: int,
                 current: dict[int, ENode], best: float, program: Program):
        self.snap, self.roots, self.price, self.key = snap, roots, price, key
        self.out_of_time, self.keep = out_of_time, keep
        self.current, self.best, self.program = current, best, program
        self.seen: dict[tuple, tuple[float, Program, dict[int, ENode]]] = {
            key(program): (best, program, dict(current))}
        self.cheapest: list[tuple[float, int, dict[int, ENode]]] = []  # a max-heap by -price
        self.tie = itertools.count()
        self.priced, self.timed_out = 0, False
        #: the e-classes the current program reads
        self.used: set = reachable(snap, current, roots)

    def _moves(self, moves):
        """``(k, move)`` of the moves that change what the current program reads (``k``: its
        place in ``moves``), until the time runs out; what it reads is :attr:`used` as it is
        when each move comes."""
        for k, move in enumerate(moves):
            if self.out_of_time():
                self.timed_out = True
                return
            if any(c in self.used for c in move) and not all(self.current.get(c) == n
                                                             for c, n in move.items()):
                yield k, move

    def _price(self, trial: dict[int, ENode]) -> float | None:
        self.priced += 1
        return self.price(trial)

    def price_all(self, moves) -> list[tuple[float, int, dict[int, ENode]]]:
        """Each move priced from the current choice (the cheapest kept); those below it."""
        better = []
        for _, move in self._moves(moves):
            trial = {**self.current, **move}
            c = self._price(trial)
            if c is None or not math.isfinite(c):
                continue
            if len(self.cheapest) < self.keep:
                heapq.heappush(self.cheapest, (-c, next(self.tie), trial))
            elif c < -self.cheapest[0][0]:
                heapq.heapreplace(self.cheapest, (-c, next(self.tie), trial))
            if c < self.best:
                better.append((c, next(self.tie), move))
        return better

    def take(self, better) -> bool:
        """The improving moves, cheapest first, each taken where it still improves the program
        the moves before it made; whether one was taken."""
        improved = False
        for k, move in self._moves([m for _, _, m in sorted(better)]):
            trial = {**self.current, **move}
            if k > 0:
                c = self._price(trial)
                if c is None or not c < self.best:
                    continue
            kept = self.price.accept(trial, self.best)
            if kept is not None:
                self.current, (self.best, self.program) = trial, kept
                self.seen.setdefault(self.key(self.program),
                                     (self.best, self.program, dict(self.current)))
                self.used = reachable(self.snap, self.current, self.roots)
                improved = True
        return improved

    def build_cheapest(self, original: Program) -> None:
        """The ``keep`` cheapest choices priced, built into :attr:`seen`."""
        for negative, _, choice in sorted(self.cheapest, key=lambda e: -e[0]):
            if self.out_of_time():
                break
            if getattr(self.price, "relative", False):  # priced from the program then current
                found = (-negative, build(self.snap, choice, original, self.roots))
            else:
                found = self.price.accept(choice, math.inf)
            if found is not None:
                self.seen.setdefault(self.key(found[1]), (found[0], found[1], choice))
