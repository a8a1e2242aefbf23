"""The cost-model Protocol the optimizer uses."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from tvm_pet.ir.node import Program


@runtime_checkable
class CostModel(Protocol):
    """Estimates the run time of a program, in seconds. Lower is better.

    A model may set ``additive = False`` when the cost of a program is not the sum of its
    subprograms' costs (the measured model: TVM fuses kernels across subprogram borders); the
    optimizer then costs every candidate as a whole program. Without the attribute, costs are
    taken as additive and only the replaced subprogram is costed.
    """

    name: str

    def cost(self, program: Program) -> float:
        """Estimated seconds to run ``program`` once."""
        ...
