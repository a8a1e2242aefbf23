"""The one frozen object holding every search budget. Library code never reads the environment."""
from __future__ import annotations

import dataclasses
import enum

#: The searches :class:`SearchConfig` ``search`` names.
SEARCHES = ("algorithm2", "eqsat")


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """Budgets of the generator and the optimizer.

    Attributes:
        depth: most operators in a generated mutant (Algorithm 1's d).
        rounds: rounds of iterative mutation (Algorithm 2's r).
        topk: programs kept in the optimizer's heap (K).
        max_subset: most operators of a subprogram mutated together.
        time_limit: seconds for the whole search (None: no limit).
        max_candidates: most candidate programs the generator verifies per subprogram.
        tests: random tests per position in the verifier (Theorem 2).
        seed: seed of the verifier's random values.
        min_agreement: a candidate whose quick screen agrees with the original on fewer than this
            fraction of random positions is dropped before full verification (its correction
            would recompute nearly everything).
        progress: show progress bars.
        winograd: also offer each eligible 3×3 convolution by Winograd's F(4×4, 3×3)
            (:mod:`tvm_pet.ir.winograd`): the same function, a quarter of the multiplications,
            other rounding (off by default, like ``--fast-math``).
        im2col: also offer each 2-D or 3-D convolution larger than 1 × 1 as one product over
            its shifted windows (:mod:`tvm_pet.ir.im2col`): the same products, summed in
            another order, which MetaSchedule tunes as a matrix product.
        search: which search picks the program: ``"algorithm2"`` (the optimizer's top-K rounds,
            :mod:`tvm_pet.search.optimizer`) or ``"eqsat"`` (equality saturation over every
            verified mutant at once, :mod:`tvm_pet.search.eqsat`).
        eqsat_iterations: most rule iterations of one saturation (``"eqsat"``).
        eqsat_nodes: the e-graph's most e-nodes (``"eqsat"``): no mutant is added and no rule
            iteration starts beyond it.
    """

    depth: int = 3
    rounds: int = 3
    topk: int = 4
    max_subset: int = 3
    time_limit: float | None = 60.0
    max_candidates: int = 5000
    tests: int = 4
    seed: int = 0
    min_agreement: float = 0.25
    progress: bool = False
    winograd: bool = False
    im2col: bool = False
    search: str = "algorithm2"
    eqsat_iterations: int = 8
    eqsat_nodes: int = 20000

    def __post_init__(self):
        if self.search not in SEARCHES:
            raise ValueError(f"SearchConfig.search must be one of {', '.join(SEARCHES)}, "
                             f"got {self.search!r}")
        for name in ("depth", "rounds", "topk", "max_subset", "max_candidates", "tests",
                     "eqsat_iterations", "eqsat_nodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"SearchConfig.{name} must be at least 1, got {getattr(self, name)}")
        if self.time_limit is not None and self.time_limit <= 0:
            raise ValueError(f"SearchConfig.time_limit must be positive, got {self.time_limit}")


class StopReason(enum.Enum):
    """Why a search ended."""

    EXHAUSTED = "exhausted"          # every candidate within the budgets was tried
    ROUNDS = "rounds"                # the configured rounds were done
    TIME_LIMIT = "time_limit"        # the time limit was reached
    CANDIDATE_LIMIT = "candidate_limit"  # max_candidates verified
    SATURATED = "saturated"          # eqsat: no rule added anything to the e-graph
    ITERATIONS = "iterations"        # eqsat: eqsat_iterations rule iterations were run
    NODE_LIMIT = "node_limit"        # eqsat: the e-graph reached eqsat_nodes e-nodes
