"""End-to-end fuzzing: random multi-linear programs through generator, verifier, corrector and TVM.

A library for :mod:`tests.test_fuzz_e2e` and ``benchmarks/reliability.py``; it holds no tests.

Each random program is one hypothesis example of :func:`~tests.strategies.mutant_pairs`: an
original program (random shapes, operator chains, branches and weights) and a candidate that
replays it with one or two named rewrites (exact, partially equivalent or wrong). Then:

1. **generator**: the program is cut as the optimizer cuts it (every subprogram of
   :func:`~tvm_pet.search.partition.partition`, every operator subset of
   :func:`~tvm_pet.search.optimizer.operator_subsets`) and the generator mutates each subset.
   Every mutant it returns is already verified and, when partially equivalent, corrected; it is
   spliced back into the whole program with :func:`~tvm_pet.search.partition.replace_subprogram`.
   The candidate of the rewrite strategy is verified and corrected too (``rewrite`` in the
   counts).
2. **exact**: every one of them equals the original in Z_p, p = 2^31 - 1, on every output
   position, with random residues for the inputs (by name) and the weights (by content).
3. **TVM**: the original, a few generator mutants (half of them partially equivalent where there
   are any) and the corrected rewrite candidate are lowered with
   :func:`~tvm_pet.relax.adapter.program_to_module`, compiled with ``tvm.compile`` for
   :data:`TARGET` and run in the Relax VM on random float32 inputs. Each result must equal the
   original's float64 NumPy evaluation to :data:`RTOL` times the magnitude bound ``S`` (the
   program evaluated on the absolute values of its inputs and weights: every partial sum is at
   most ``S``). A program with a Winograd convolution also sums its transforms' terms, which
   the original's ``S`` does not bound (an output whose window reads only padding is exactly 0
   directly, and a rounding residue of its tile by Winograd): there the bound is also the
   program lowered with every weight, input and transform matrix in absolute value
   (:func:`winograd_bound`, ``|Aᵀ| (|G| |g| |Gᵀ| ⊙ |Bᵀ| |d| |B|) |A|`` summed over channels, the
   classic bound on the algorithm's rounding).

The rewrites offered only when asked (Winograd's, ``SearchConfig.winograd``; a convolution as
one product over its windows, ``SearchConfig.im2col``) are fuzzed with ``config`` turning them on
and ``favour`` naming their labels, so that their mutants are the ones run on TVM:
:func:`winograd_fuzz` draws programs that hold a convolution Winograd can take
(:func:`~tests.strategies.winograd_programs`), :func:`im2col_fuzz` programs that hold one the
window product can take.

Compiling is the slow part (0.05-0.2 s per function on two cores, and a cost per module), so
:func:`run_fuzz` puts the functions of a batch of programs into one IRModule and compiles it once.

Any unexpected exception is a crash: it is recorded with its stage and ``repr``, never dropped.

>>> outcome = run_fuzz(2, seed=1)
>>> outcome["exact_mismatches"], outcome["float_mismatches"], outcome["crashes"]
(0, 0, 0)
"""
from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable, Sequence

import numpy as np
import tvm
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from tvm import relax

from tests.strategies import mutant_pairs, window_programs, winograd_programs
from tvm_pet.cost.analytic import AnalyticCost
from tvm_pet.ir import Program, check_program as check_structure, weight_key
from tvm_pet.ir import im2col, winograd
from tvm_pet.relax import winograd as winograd_lowering
from tvm_pet.relax.adapter import program_to_module
from tvm_pet.search.config import SearchConfig
from tvm_pet.search.optimizer import Optimizer, operator_subsets
from tvm_pet.search.partition import partition, replace_subprogram
from tvm_pet.tune.targets import resolve_target
from tvm_pet.testing.bruteforce import differing_masks
from tvm_pet.testing.modp_oracle import outputs_modp
from tvm_pet.verify.corrector import correct
from tvm_pet.verify.interpreter import evaluate
from tvm_pet.verify.verifier import verify

#: Small budgets: every subset of at most two operators, mutants of at most three operators.
FUZZ_CONFIG = SearchConfig(depth=3, max_subset=2, time_limit=5.0, max_candidates=200)
#: Float32 results may differ from float64 by this fraction of the magnitude bound ``S``.
RTOL = 1e-4
#: The same for a Winograd convolution's bound (:func:`winograd_bound`). Its rounding error is at
#: most ``γ_n`` times that bound, ``γ_n ≈ n u`` with ``u = 2⁻²⁴`` and ``n`` the roundings on the
#: way to an output (two passes of at most 6 terms for each transform, one product, the channel
#: sum: n ≤ 45 for up to 16 channels, more than this fuzzer draws), so ``γ_n ≤ 2.7e-6``.
#: F(4×4, 3×3)'s bound is 35-143 times the direct one (its matrices reach 8 and 2.5), so this
#: tolerance, smaller than :data:`RTOL`, still lets through about 0.1 % of ``S``: the check
#: catches misplaced tiles, transforms and slices, not small scale errors.
WINOGRAD_RTOL = 1e-5
#: Programs whose functions share one compiled module.
BATCH = 25
#: What tvm_pet compiles for: ``"llvm"`` resolved to this CPU (:func:`resolve_target`). A bare
#: ``"llvm"`` (generic x86-64) is avoided: the wheel's LLVM emits invalid IR at -O3 for some small
#: ``avg_pool2d`` shapes (``test_generic_llvm_miscompiles_small_avg_pool``).
TARGET = "llvm"

Pair = tuple[Program, Program]


@dataclasses.dataclass(frozen=True)
class Failure:
    """One mismatch or crash: which program, which stage, which mutant, and what happened.

    ``listing`` holds the original and the checked program (:meth:`Program.describe`), so that a
    failure can be rebuilt without drawing again (hypothesis draws differently under pytest).
    """

    program: int
    stage: str      # generate, rewrite, exact, lower, compile, run, float
    mutant: str     # "original", "gen<k>[ops]" or "rewrite[names]"
    detail: str
    listing: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class FuzzOutcome:
    """Counts of one fuzzing run (one program or many).

    Attributes:
        programs: programs fuzzed.
        mutants: generator mutants (spliced into whole programs) checked exactly.
        partial: of those, partially equivalent mutants that were corrected.
        tvm_mutants: generator mutants also run on TVM; tvm_partial: the partially
            equivalent ones among them.
        rewrites: candidates of the rewrite strategy verified, corrected and checked (exactly
            and on TVM).
        rewrites_partial: of those, candidates the verifier found not equivalent.
        compiled: functions compiled and run on TVM (originals included).
        exact_mismatches: checked programs that differ from the original in Z_p.
        float_mismatches: TVM results that differ from the original's float64 evaluation.
        crashes: unexpected exceptions, at any stage.
        favoured: of the mutants run on TVM, how many hold each favoured node label (a rewrite
            asked for by name, such as ``WinogradConv``; see :func:`run_fuzz`).
        failures: every mismatch and crash.
        seconds: wall time; compile_seconds: the part spent in ``tvm.compile``.
    """

    programs: int = 0
    mutants: int = 0
    partial: int = 0
    tvm_mutants: int = 0
    tvm_partial: int = 0
    rewrites: int = 0
    rewrites_partial: int = 0
    compiled: int = 0
    exact_mismatches: int = 0
    float_mismatches: int = 0
    crashes: int = 0
    favoured: dict[str, int] = dataclasses.field(default_factory=dict)
    failures: list[Failure] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    compile_seconds: float = 0.0

    def crash(self, program: int, stage: str, mutant: str, error: BaseException,
              listing: str = "") -> None:
        """Record an unexpected exception with where it was raised."""
        where = traceback.extract_tb(error.__traceback__)[-1:]
        place = f" at {where[0].filename}:{where[0].lineno}" if where else ""
        self.crashes += 1
        self.failures.append(Failure(program, stage, mutant, f"{error!r}{place}", listing))

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["failures"] = [f.to_json() for f in self.failures]
        return out


@dataclasses.dataclass(frozen=True)
class _Entry:
    """A program to run on TVM next to the original it must reproduce."""

    index: int
    label: str
    original: Program
    program: Program

    def listing(self) -> str:
        return _listing(self.original, self.program)


def _listing(original: Program, checked: Program | None = None) -> str:
    text = f"--- original\n{original.describe()}"
    return text + (f"\n--- checked\n{checked.describe()}" if checked is not None else "")


# ------------------------------------------------------------------------------- drawing programs

def draw_pairs(count: int, seed: int = 0, strategy=None) -> list[Pair]:
    """``count`` distinct (original, candidate) pairs drawn by hypothesis, the same for a ``seed``.

    Hypothesis runs a collecting function with ``max_examples`` above ``count``; originals already
    seen (same structure and weight contents) are skipped. Fewer than ``count`` pairs come back
    only when hypothesis runs out of distinct examples.

    Args:
        count: pairs wanted.
        seed: hypothesis's seed.
        strategy: a strategy of pairs (default :func:`~tests.strategies.mutant_pairs`).
    """
    pairs: list[Pair] = []
    seen: set = set()

    @hypothesis_seed(seed)
    @settings(max_examples=count + count // 2 + 10, deadline=None, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy if strategy is not None else mutant_pairs())
    def collect(pair: Pair) -> None:
        key = (pair[0].describe(), tuple(sorted(weight_key(w) for w in pair[0].weights.values())))
        if len(pairs) < count and key not in seen:
            seen.add(key)
            pairs.append(pair)

    collect()
    return pairs


# ------------------------------------------------------------------------------- exact checks

def _spliced_mutants(program: Program, config: SearchConfig) -> list[tuple[str, bool, Program]]:
    """Every generator mutant of every operator subset, spliced into the whole program:
    ``(label, partially equivalent, program)``."""
    opt = Optimizer(config, AnalyticCost())
    out = []
    for sub in partition(program):
        for subset in operator_subsets(program, sub, config.max_subset):
            part, mutants = opt.mutants_of(program, subset, sub.name)
            for mutant, corrected in mutants:
                label = f"gen{len(out)}[{sub.name}: {' '.join(mutant.ops)}]"
                out.append((label, mutant.partially_equivalent,
                            replace_subprogram(program, part, corrected)))
    return out


def _pick(mutants: list, k: int, rng: np.random.Generator) -> list:
    """At most ``k`` mutants, at random, half of them partially equivalent where there are any."""
    order = list(rng.permutation(len(mutants)))
    partial = [mutants[i] for i in order if mutants[i][1]]
    exact = [mutants[i] for i in order if not mutants[i][1]]
    n_partial = min(len(partial), max(k - len(exact), (k + 1) // 2))
    return partial[:n_partial] + exact[:k - n_partial]


def _favoured(program: Program, favour: Sequence[str]) -> set[str]:
    return {node.label for node in program.nodes} & set(favour)


def _pick_favouring(mutants: list, k: int, rng: np.random.Generator,
                    favour: Sequence[str]) -> list:
    """:func:`_pick` over the mutants holding a ``favour`` label first, then over the rest."""
    if not favour:
        return _pick(mutants, k, rng)
    first, rest = [], []
    for m in mutants:
        (first if _favoured(m[2], favour) else rest).append(m)
    chosen = _pick(first, k, rng)
    return chosen + _pick(rest, k - len(chosen), rng)


def exact_difference(original: Program, other: Program, seed: int) -> str | None:
    """Where ``other`` differs from ``original`` in Z_p on random residues, or None if nowhere.

    Inputs are shared by name and weights by content (:func:`shared_values`), so a program that
    reads a weight under another name, or slices of it, still computes the same polynomial.
    """
    check_structure(other)
    if other.input_names != original.input_names or other.outputs != original.outputs:
        return (f"signature changed: inputs {other.input_names}, outputs {other.outputs} "
                f"instead of {original.input_names}, {original.outputs}")
    a, b = outputs_modp(original, other, seed)
    for o in original.outputs:
        if a[o].shape != b[o].shape:
            return f"output {o}: shape {b[o].shape} instead of {a[o].shape}"
        wrong = int(np.sum(a[o] != b[o]))
        if wrong:
            return f"output {o}: {wrong} of {a[o].size} positions differ mod p"
    return None


def _exact_ok(index: int, label: str, original: Program, program: Program, seed: int,
              outcome: FuzzOutcome) -> bool:
    """Check ``program`` against ``original`` in Z_p, recording a mismatch or a crash."""
    try:
        detail = exact_difference(original, program, seed=seed + index)
    except Exception as e:  # recorded as a crash, never dropped
        outcome.crash(index, "exact", label, e, _listing(original, program))
        return False
    if detail is not None:
        outcome.exact_mismatches += 1
        outcome.failures.append(Failure(index, "exact", label, detail,
                                        _listing(original, program)))
    return detail is None


def _exact_stage(index: int, original: Program, candidate: Program | None, config: SearchConfig,
                 seed: int, max_mutants: int, outcome: FuzzOutcome,
                 favour: Sequence[str] = ()) -> list[_Entry]:
    """Generate, verify and correct; check every result in Z_p.

    Returns:
        What to run on TVM: the original, at most ``max_mutants`` generator mutants (half of them
        partially equivalent where there are any; those holding a ``favour`` label first) and
        the corrected rewrite candidate.
    """
    try:
        spliced = _spliced_mutants(original, config)
    except Exception as e:
        outcome.crash(index, "generate", "original", e, _listing(original))
        spliced = []
    outcome.mutants += len(spliced)
    outcome.partial += sum(partial for _, partial, _ in spliced)
    passed = [m for m in spliced if _exact_ok(index, m[0], original, m[2], seed, outcome)]
    chosen = _pick_favouring(passed, max_mutants, np.random.default_rng([seed, index]), favour)
    for _, _, program in chosen:
        for label in _favoured(program, favour):
            outcome.favoured[label] = outcome.favoured.get(label, 0) + 1
    outcome.tvm_mutants += len(chosen)
    outcome.tvm_partial += sum(partial for _, partial, _ in chosen)
    entries = [_Entry(index, "original", original, original)]
    entries += [_Entry(index, label, original, program) for label, _, program in chosen]
    if candidate is not None:
        label = f"rewrite{candidate.name.removeprefix('mutant')}"
        try:
            result = verify(original, candidate, tests=config.tests, seed=config.seed)
            corrected = correct(original, candidate, result)
        except Exception as e:
            outcome.crash(index, "rewrite", label, e, _listing(original, candidate))
            return entries
        outcome.rewrites += 1
        outcome.rewrites_partial += not result.equivalent
        if _exact_ok(index, label, original, corrected, seed, outcome):
            entries.append(_Entry(index, label, original, corrected))
    return entries


# ------------------------------------------------------------------------------- TVM

def _compile(funcs: dict[str, relax.Function], outcome: FuzzOutcome):
    start = time.perf_counter()
    try:
        executable = tvm.compile(tvm.IRModule(funcs), target=resolve_target(TARGET))
        return relax.VirtualMachine(executable, tvm.cpu())
    finally:
        outcome.compile_seconds += time.perf_counter() - start


def _outputs(value) -> list[np.ndarray]:
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    return [v.numpy() for v in value]


def float_difference(original: Program, got: Sequence[np.ndarray], x: dict[str, np.ndarray],
                     rtol: float = RTOL, extra: Sequence[np.ndarray] | None = None) -> str | None:
    """Where TVM's outputs ``got`` differ from ``original`` in float64 on inputs ``x``.

    The tolerance at a position is ``rtol * (S + max(S) * 1e-3)``, where ``S`` is the original
    evaluated on the absolute values of its inputs and weights: a bound on every partial sum that
    float32 rounding could perturb; with ``extra`` (one array per output, :func:`winograd_bound`),
    the larger of that and the same with :data:`WINOGRAD_RTOL` and ``extra`` at each position.
    """
    want = evaluate(original, x, np.float64)
    bound = evaluate(original, {k: np.abs(v) for k, v in x.items()}, np.float64,
                     weights={k: np.abs(v) for k, v in original.weights.items()})
    if len(got) != len(original.outputs):
        return f"{len(got)} outputs instead of {len(original.outputs)}"
    for i, (o, value) in enumerate(zip(original.outputs, got)):
        if value.shape != want[o].shape:
            return f"output {o}: shape {value.shape} instead of {want[o].shape}"
        tol = rtol * (bound[o] + 1e-3 * bound[o].max(initial=0.0))
        if extra is not None:
            tol = np.maximum(tol, WINOGRAD_RTOL * (extra[i] + 1e-3 * extra[i].max(initial=0.0)))
        err = np.abs(value.astype(np.float64) - want[o])
        if not np.all(err <= tol):
            worst = np.unravel_index(np.argmax(err - tol), err.shape)
            return (f"output {o}: {int(np.sum(err > tol))} of {err.size} positions out of "
                    f"tolerance, worst at {tuple(map(int, worst))}: {value[worst]} vs "
                    f"{want[o][worst]} (tolerance {tol[worst]:.3g})")
    return None


def winograd_bound(program: Program) -> relax.Function | None:
    """A function whose outputs bound the partial sums of ``program``'s Winograd convolutions,
    run on ``|x|`` (None without one): ``program`` lowered with its weights and Winograd's
    matrices ``A``, ``B``, ``G`` in absolute value. Each product and sum of the algorithm is at
    most its value, as each of a direct sum is at most ``S``; the other operators are linear and
    pass the bound on."""
    if not winograd.uses(program):
        return None
    absolute = dataclasses.replace(program, weights={k: np.abs(v)
                                                     for k, v in program.weights.items()})
    matrices = winograd_lowering.matrices
    winograd_lowering.matrices = lambda m: tuple(np.abs(t) for t in matrices(m))
    try:
        return program_to_module(absolute)["main"]
    finally:
        winograd_lowering.matrices = matrices


def _lower(entry: _Entry, name: str) -> dict[str, relax.Function]:
    """The entry's function, and its Winograd bound's as ``<name>_bound`` where it has one."""
    funcs = {name: program_to_module(entry.program)["main"]}
    bound = winograd_bound(entry.program)
    if bound is not None:
        funcs[f"{name}_bound"] = bound
    return {k: f.with_attr("global_symbol", k) for k, f in funcs.items()}


def _compile_all(groups: dict[str, dict[str, relax.Function]], names: dict[str, _Entry],
                 outcome: FuzzOutcome) -> dict:
    """Every group's functions in one module; where that fails, each group alone."""
    try:
        vm = _compile({k: f for group in groups.values() for k, f in group.items()}, outcome)
        return dict.fromkeys(groups, vm)
    except Exception as batch_error:  # find the culprits: compile each entry alone
        vms = {}
        for name, group in groups.items():
            try:
                vms[name] = _compile(group, outcome)
            except Exception as e:
                outcome.crash(names[name].index, "compile", names[name].label, e,
                              names[name].listing())
        if len(vms) == len(groups):  # each compiles alone: only the batch fails
            outcome.crash(next(iter(names.values())).index, "compile",
                          f"batch of {len(groups)}", batch_error)
        return vms


def _tvm_stage(entries: Sequence[_Entry], seed: int, outcome: FuzzOutcome) -> None:
    """Lower every entry into one module, compile it once, run and compare each function."""
    groups: dict[str, dict[str, relax.Function]] = {}
    names: dict[str, _Entry] = {}
    for entry in entries:
        name = f"f{len(names)}"
        try:
            groups[name] = _lower(entry, name)
            names[name] = entry
        except Exception as e:
            outcome.crash(entry.index, "lower", entry.label, e, entry.listing())
    if not groups:
        return
    vms = _compile_all(groups, names, outcome)
    inputs: dict[int, dict[str, np.ndarray]] = {}
    for name, vm in vms.items():
        entry = names[name]
        x = inputs.setdefault(entry.index, {
            t.name: np.random.default_rng([seed, entry.index]).standard_normal(t.shape)
            .astype(np.float32) for t in entry.original.inputs})
        try:
            got = _outputs(vm[name](*[tvm.runtime.tensor(x[t.name]) for t in entry.program.inputs]))
            extra = None
            if f"{name}_bound" in groups[name]:
                extra = [np.abs(v).astype(np.float64) for v in _outputs(vm[f"{name}_bound"](
                    *[tvm.runtime.tensor(np.abs(x[t.name])) for t in entry.program.inputs]))]
            detail = float_difference(entry.original, got, x, extra=extra)
        except Exception as e:
            outcome.crash(entry.index, "run", entry.label, e, entry.listing())
            continue
        outcome.compiled += 1
        if detail is not None:
            outcome.float_mismatches += 1
            outcome.failures.append(Failure(entry.index, "float", entry.label, detail,
                                            entry.listing()))


# ------------------------------------------------------------------------------- drivers

def check_program(program: Program, config: SearchConfig = FUZZ_CONFIG, seed: int = 0,
                  candidate: Program | None = None, max_mutants: int = 4) -> FuzzOutcome:
    """Fuzz one program end to end (see the module docstring); compiles one module.

    Args:
        program: a multi-linear program.
        config: the generator's budgets.
        seed: seed of the random residues and float inputs.
        candidate: a rewritten program to verify, correct and check as well (optional).
        max_mutants: generator mutants checked, at most.

    Returns:
        The counts, with every mismatch and crash in ``failures``.
    """
    start = time.perf_counter()
    outcome = FuzzOutcome(programs=1)
    entries = _exact_stage(0, program, candidate, config, seed, max_mutants, outcome)
    _tvm_stage(entries, seed, outcome)
    outcome.seconds = time.perf_counter() - start
    return outcome


def run_fuzz(count: int, seed: int = 0, config: SearchConfig = FUZZ_CONFIG, batch: int = BATCH,
             max_mutants: int = 4, pairs: Sequence[Pair] | None = None,
             progress: Callable[[FuzzOutcome], None] | None = None,
             favour: Sequence[str] = ()) -> dict:
    """Fuzz ``count`` random programs end to end, compiling ``batch`` programs per module.

    Args:
        count: programs to draw (distinct; see :func:`draw_pairs`).
        seed: hypothesis seed of the drawing, and seed of the random values.
        config: the generator's budgets.
        batch: programs whose functions are compiled together.
        max_mutants: generator mutants checked per program, at most.
        pairs: (original, candidate) pairs to use instead of drawing them.
        progress: called with the running counts after each batch.
        favour: node labels (``Node.label``) whose mutants are run on TVM first, so that rewrites
            the generator offers rarely (those ``config`` turns on) are compiled and compared.

    Returns:
        :meth:`FuzzOutcome.to_json`: programs, mutants, partial, tvm_mutants, tvm_partial,
        rewrites, rewrites_partial, compiled, exact_mismatches, float_mismatches, crashes,
        favoured, failures, seconds and compile_seconds.
    """
    start = time.perf_counter()
    pairs = list(pairs) if pairs is not None else draw_pairs(count, seed)
    outcome = FuzzOutcome(programs=len(pairs))
    for first in range(0, len(pairs), batch):
        entries = []
        for index in range(first, min(first + batch, len(pairs))):
            original, candidate = pairs[index]
            entries += _exact_stage(index, original, candidate, config, seed, max_mutants, outcome,
                                    favour)
        _tvm_stage(entries, seed, outcome)
        outcome.seconds = time.perf_counter() - start
        if progress is not None:
            progress(outcome)
    return outcome.to_json()


#: The labels of Winograd's mutants (``tvm-pet optimize --winograd``).
WINOGRAD_LABELS = tuple(winograd.LABELS.values())


#: The labels of the window products' mutants (``tvm-pet optimize --im2col``).
IM2COL_LABELS = tuple(im2col.LABELS[order] for order in im2col.SEARCH_ORDERS)


def winograd_fuzz(count: int, seed: int = 0, **kwargs) -> dict:
    """:func:`run_fuzz` over :func:`~tests.strategies.winograd_programs` with Winograd offered
    (random programs seldom hold a convolution it can take), its mutants on TVM first.

    >>> outcome = winograd_fuzz(1, seed=0)
    >>> outcome["float_mismatches"], sum(outcome["favoured"].values()) > 0
    (0, True)
    """
    return _convolution_fuzz(count, seed, "winograd", WINOGRAD_LABELS, winograd_programs(),
                             **kwargs)


def im2col_fuzz(count: int, seed: int = 0, **kwargs) -> dict:
    """:func:`run_fuzz` over :func:`~tests.strategies.window_programs` (each holds a 2-D 3 × 3
    convolution or a 3-D one) with convolutions offered as a product over their windows
    (``SearchConfig.im2col``), its mutants (:data:`IM2COL_LABELS`) on TVM first."""
    return _convolution_fuzz(count, seed, "im2col", IM2COL_LABELS, window_programs(),
                             **kwargs)


def _convolution_fuzz(count: int, seed: int, offered: str, labels: tuple[str, ...],
                      strategy, **kwargs) -> dict:
    """:func:`run_fuzz` over the programs ``strategy`` draws with the ``SearchConfig`` flag
    ``offered`` on, mutants holding ``labels`` on TVM first."""
    pairs = draw_pairs(count, seed, strategy=strategy)
    config = dataclasses.replace(FUZZ_CONFIG, **{offered: True})
    return run_fuzz(count, seed=seed, config=config, pairs=pairs, favour=labels, **kwargs)


# ------------------------------------------------------------------------------- soundness controls

#: Injected non-equivalent mutants, by what they get wrong: the rewrites of
#: :data:`~tests.strategies.REWRITES` that make them, and the focus that draws them.
WRONG_REWRITES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "perturbed weight": (("weight_perturbed",), ("conv_pad_shift", "weight_perturbed")),
    "shifted slice": (("slice_shift",), ("slice_shift",)),
    "moved pad": (("pad_edge_moved",), ("pad_edge_moved",)),
    "wrong conv padding": (("conv_pad_shift", "conv_edge_replicated"),
                           ("conv_pad_shift", "conv_edge_replicated")),
}


def check_wrong_mutants(count: int, seed: int = 0, seeds: Sequence[int] = range(5)) -> dict:
    """Inject non-equivalent mutants and count how many the verifier catches, for every seed.

    For each kind of :data:`WRONG_REWRITES`, ``count`` pairs are drawn with that kind's focus. A
    pair counts as injected when its candidate applied one of the kind's rewrites and brute force
    (float64, every position) finds a difference; it is caught when :func:`verify` reports it not
    equivalent with every seed in ``seeds``.

    Returns:
        Per kind ``{"drawn", "injected", "caught", "missed"}``, and ``"missed_pairs"``: the
        descriptions of the missed ones (empty when the verifier is sound).
    """
    out: dict = {"missed_pairs": []}
    for kind, (names, focus) in WRONG_REWRITES.items():
        pairs = draw_pairs(count, seed, mutant_pairs(max_steps=3, focus=focus))
        row = {"drawn": len(pairs), "injected": 0, "caught": 0, "missed": 0}
        for original, candidate in pairs:
            if not any(f"{n}@" in candidate.name for n in names):
                continue
            if not any(m.any() for m in differing_masks(original, candidate).values()):
                continue
            row["injected"] += 1
            if all(not verify(original, candidate, seed=s).equivalent for s in seeds):
                row["caught"] += 1
            else:
                row["missed"] += 1
                out["missed_pairs"].append(f"{original.describe()}\n{candidate.describe()}")
        out[kind] = row
    return out
