"""End-to-end fuzzing (:mod:`tests.fuzz_e2e`) and the verifier's soundness controls.

- random multi-linear programs through generator, verifier, corrector, Relax and a compiled
  module: exact in Z_p and within float tolerance on TVM (20 programs by default, 1,000 with
  ``-m slow``);
- the same for the rewrites offered only when asked: Winograd's (on programs drawn to hold a
  convolution it can take, against the bound of its rounding) and convolutions as a product
  over their windows, their mutants run on TVM first (200 Winograd programs with ``-m slow``);
- the fuzzer itself fails when the corrector or the Relax lowering is broken (Winograd's and the
  windows' included);
- regressions for the bugs it found;
- injected non-equivalent mutants (a perturbed weight, a slice shifted by one, padding moved or
  replicated) are caught by the verifier with every seed, and the chance of a miss is the
  Schwartz-Zippel bound :func:`~tvm_pet.verify.verifier.miss_probability`.

The fixed wrong cases of :mod:`tvm_pet.example_pairs` are checked in
``test_verifier_oracle.py::test_wrong_candidates_are_detected``.
"""

import numpy as np
import pytest
import tvm
from tvm import relax

from tests import fuzz_e2e
from tvm_pet import example_pairs
from tvm_pet.ir import Op, ProgramBuilder
from tvm_pet.ops.modp import P
from tvm_pet.relax import lower
from tvm_pet.relax import winograd as winograd_lowering
from tvm_pet.search.config import SearchConfig, StopReason
from tvm_pet.search.generator import generate
from tvm_pet.search.optimizer import optimize
from tvm_pet.search.partition import extract
from tvm_pet.verify.verifier import DEFAULT_TESTS, miss_probability, verify

#: Long runs are skipped unless selected with ``-m slow`` (pytest evaluates the string).
only_when_selected = pytest.mark.skipif("'slow' not in config.getoption('markexpr')",
                                        reason="long fuzzing run; select it with -m slow")


def _failures(outcome: dict) -> str:
    return "\n".join(f"program {f['program']} {f['stage']} {f['mutant']}: {f['detail']}\n"
                     f"{f['listing']}" for f in outcome["failures"])


def assert_all_exact(outcome: dict, programs: int) -> None:
    """No mismatch, no crash, and every program went through."""
    assert outcome["programs"] == programs
    assert outcome["exact_mismatches"] == 0, _failures(outcome)
    assert outcome["float_mismatches"] == 0, _failures(outcome)
    assert outcome["crashes"] == 0, _failures(outcome)
    assert outcome["compiled"] >= outcome["programs"] + outcome["tvm_mutants"]


def assert_long_run_exact(outcome: dict, programs: int) -> dict:
    """:func:`assert_all_exact` for a long run, its counts printed first (shown with ``-s``)."""
    print({k: v for k, v in outcome.items() if k != "failures"})
    assert_all_exact(outcome, programs)
    return outcome


# ----------------------------------------------------------------------------- end to end

def test_random_programs_end_to_end():
    outcome = fuzz_e2e.run_fuzz(20, seed=0)
    assert_all_exact(outcome, 20)
    # the run checked something worth checking: corrected mutants, also on TVM
    counts = {k: v for k, v in outcome.items() if k != "failures"}
    assert outcome["mutants"] >= 40 and outcome["partial"] >= 20, counts
    assert outcome["tvm_mutants"] >= 8 and outcome["tvm_partial"] >= 3, counts
    assert outcome["rewrites"] == 20 and outcome["rewrites_partial"] >= 5, counts


def test_winograd_end_to_end():
    """Winograd's mutants (their own lowering, ``tvm_pet.relax.winograd``) compiled and compared
    like the others, against the bound of :func:`~tests.fuzz_e2e.winograd_bound`."""
    outcome = fuzz_e2e.winograd_fuzz(6, seed=0)
    assert_all_exact(outcome, 6)
    favoured = outcome["favoured"]
    assert all(favoured.get(label, 0) >= 3 for label in fuzz_e2e.WINOGRAD_LABELS), favoured


def test_window_products_end_to_end():
    """Mutants holding an ``Im2colConvT`` (``tvm_pet.relax.im2col``) run on TVM first."""
    outcome = fuzz_e2e.im2col_fuzz(6, seed=0)
    assert_all_exact(outcome, 6)
    favoured = outcome["favoured"]
    assert sum(favoured.get(label, 0) for label in fuzz_e2e.IM2COL_LABELS) >= 2, favoured


def test_the_fuzzer_catches_filters_turned_half_round(monkeypatch):
    """Windows multiplied by the filters turned by 180 degrees (correlation mistaken for
    convolution): TVM differs on programs that run an ``Im2colConvT``, and nowhere else."""
    from tvm_pet.relax import im2col as im2col_lowering
    right = im2col_lowering.conv

    def turned(emit, x, w, x_shape, w_shape, *rest):
        for axis in range(2, len(w_shape)):  # every spatial axis: 2-D and 3-D alike
            w = emit(relax.op.flip(w, axis=axis), "turned")
        return right(emit, x, w, x_shape, w_shape, *rest)
    monkeypatch.setattr(im2col_lowering, "conv", turned)
    outcome = fuzz_e2e.im2col_fuzz(6, seed=0)
    assert outcome["exact_mismatches"] == 0 and outcome["crashes"] == 0
    assert 1 <= outcome["float_mismatches"] <= sum(outcome["favoured"].values()), outcome
    assert all(f["stage"] == "float" and "im2col=" in f["listing"] for f in outcome["failures"])


@pytest.mark.slow
@only_when_selected
def test_two_hundred_winograd_programs_end_to_end():
    outcome = assert_long_run_exact(fuzz_e2e.winograd_fuzz(200, seed=1), 200)
    assert sum(outcome["favoured"].values()) >= 400


@pytest.mark.slow
@only_when_selected
def test_thousand_random_programs_end_to_end():
    outcome = assert_long_run_exact(fuzz_e2e.run_fuzz(1000, seed=1), 1000)
    assert outcome["mutants"] >= 2000 and outcome["partial"] >= 1000
    assert outcome["tvm_mutants"] >= 500 and outcome["tvm_partial"] >= 200
    assert outcome["rewrites_partial"] >= 200


def test_the_fuzzer_catches_a_corrector_that_does_nothing(monkeypatch):
    original, candidate = example_pairs.figure1_pair()
    monkeypatch.setattr(fuzz_e2e, "correct", lambda original, candidate, result: candidate)
    outcome = fuzz_e2e.check_program(original, candidate=candidate, max_mutants=0)
    assert outcome.exact_mismatches == 1 and outcome.crashes == 0
    (failure,) = outcome.failures
    assert failure.stage == "exact" and "differ mod p" in failure.detail


def test_the_fuzzer_catches_a_wrong_lowering(monkeypatch):
    """Figure 1's correction writes the seams with UPDATE: lowered as a no-op, TVM differs."""
    original, candidate = example_pairs.figure1_pair()
    monkeypatch.setitem(lower.LOWER_RULES, Op.UPDATE, lambda low, node, args: [args[0]])
    outcome = fuzz_e2e.check_program(original, candidate=candidate, max_mutants=0)
    assert outcome.exact_mismatches == 0 and outcome.crashes == 0
    assert outcome.float_mismatches == 1
    assert outcome.failures[0].stage == "float" and "out of tolerance" in outcome.failures[0].detail



def test_the_fuzzer_catches_a_wrong_winograd_tile(monkeypatch):
    """Winograd's output transform with its columns reversed writes each tile's outputs mirrored:
    caught on the Winograd mutants despite their wider bound, and nowhere else."""
    matrices = winograd_lowering.matrices
    monkeypatch.setattr(winograd_lowering, "matrices",
                        lambda m: (matrices(m)[0][:, ::-1], *matrices(m)[1:]))
    outcome = fuzz_e2e.winograd_fuzz(6, seed=0)
    assert outcome["exact_mismatches"] == 0 and outcome["crashes"] == 0
    assert 1 <= outcome["float_mismatches"] <= sum(outcome["favoured"].values()), outcome
    assert all(f["stage"] == "float" and "winograd=" in f["listing"] for f in outcome["failures"])


def test_a_crash_is_recorded_with_its_stage(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("injected")
    monkeypatch.setattr(fuzz_e2e, "verify", broken)
    original, candidate = example_pairs.figure1_pair()
    outcome = fuzz_e2e.check_program(original, candidate=candidate, max_mutants=0)
    assert outcome.crashes == 1
    assert outcome.failures[0].stage == "rewrite" and "injected" in outcome.failures[0].detail


# ----------------------------------------------------------------------------- found by fuzzing

def test_dead_nodes_do_not_crash_the_optimizer():
    """A subset whose results nothing reads has no outputs: the generator used to fail with
    ``ValueError: not enough values to unpack`` on it, and ``optimize`` with it."""
    b = ProgramBuilder("dead")
    x = b.input("x", (4, 6))
    b.matmul(x, b.weight("unused", np.ones((6, 3))))
    program = b.build([b.matmul(x, b.weight("w", np.arange(12.0).reshape(6, 2)), out="y")])
    sub = extract(program, [0], "dead")
    assert sub.program.outputs == ()
    mutants, stats = generate(sub.program, SearchConfig(depth=2))
    assert mutants == [] and stats.stop is StopReason.EXHAUSTED
    result = optimize(program, SearchConfig(depth=2, rounds=1, time_limit=30))
    assert result.cost <= result.original_cost


def _pool_after_matmul(regrouped: bool):
    """Found by the 1,000-program run: the correction of this regrouped pool recomputes a pool on a
    [4, 5, 3, 1] slice with one column of padding, a shape that generic LLVM miscompiles."""
    b = ProgramBuilder("candidate" if regrouped else "original")
    x = b.input("x0", (4, 5, 6, 1))
    w = b.weight("w", np.random.default_rng(0).standard_normal((4, 6)))
    y = b.avgpool(b.matmul(w, x), (2, 2), strides=1, pads=(1, 1, 0, 0), count_include_pad=False,
                  out=None if regrouped else "y0")
    if regrouped:   # residues mod 2 of axis 2 grouped, and never regrouped back
        y = b.reshape_transpose(y, (4, 5, 2, 2, 1), (0, 1, 3, 2, 4), (4, 5, 4, 1), out="y0")
    return b.build([y])


def test_corrected_pool_compiles_for_this_cpu():
    outcome = fuzz_e2e.check_program(_pool_after_matmul(False), candidate=_pool_after_matmul(True),
                                     max_mutants=0)
    assert outcome.rewrites_partial == 1
    assert outcome.crashes == outcome.float_mismatches == outcome.exact_mismatches == 0, \
        outcome.failures
    assert outcome.compiled == 2


@pytest.mark.xfail(strict=True, raises=tvm.error.InternalError,
                   reason="TVM 0.27's LLVM, -O3 for generic x86-64: 'Instruction does not dominate "
                          "all uses' on a 2x2 avg_pool2d of a [4, 5, 3, 1] tensor")
def test_generic_llvm_miscompiles_small_avg_pool():
    """Why :data:`fuzz_e2e.TARGET` names this CPU. Strict: when TVM fixes it, this fails."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 5, 3, 1), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.avg_pool2d(x, pool_size=(2, 2), padding=(0, 1, 0, 0),
                                                      count_include_pad=False))
        bb.emit_func_output(y)
    tvm.compile(bb.finalize(), target="llvm")


# ----------------------------------------------------------------------------- soundness controls

def test_injected_wrong_mutants_are_always_caught():
    report = fuzz_e2e.check_wrong_mutants(60, seed=0, seeds=range(5))
    assert not report["missed_pairs"], "\n\n".join(report["missed_pairs"])
    for kind in fuzz_e2e.WRONG_REWRITES:
        row = report[kind]
        assert row["missed"] == 0 and row["caught"] == row["injected"] >= 10, (kind, row)


def test_miss_probability_is_the_schwartz_zippel_bound():
    assert miss_probability(1, 1) == pytest.approx(1 / P)
    assert miss_probability(3, 2) == pytest.approx((3 / P) ** 2)
    assert miss_probability(0, 4) == 0.0              # constants differ at every test
    assert miss_probability(2) == miss_probability(2, DEFAULT_TESTS) < 1e-36
    assert miss_probability(8) < 2e-34                 # the docstring's figures
    assert miss_probability(10**12, 1) == 1.0          # never more than certain
    for degree in (1, 2, 5):                            # more tests, smaller bound
        by_tests = [miss_probability(degree, t) for t in (1, 2, 3, 4)]
        assert by_tests == sorted(by_tests, reverse=True)
    by_degree = [miss_probability(d) for d in (1, 2, 5)]  # higher degree, larger bound
    assert by_degree == sorted(by_degree)
    for bad in ((-1, 4), (2, 0)):
        with pytest.raises(ValueError, match="miss_probability"):
            miss_probability(*bad)


def test_verify_reports_the_bound_of_its_degree_and_tests():
    original, candidate = example_pairs.figure1_pair()
    result = verify(original, candidate, tests=3)
    assert result.degree == 2 and result.tests == 3
    assert result.error_bound == miss_probability(2, 3)
