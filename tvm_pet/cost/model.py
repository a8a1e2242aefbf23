"""The cost-model Protocol the optimizer uses."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from tvm_pet.ir.node import Program


@runtime_checkable
class CostModel(Protocol):
    """Estimates the run time of a program, in seconds. Lower is better."""

    name: str

    def cost(self, program: Program) -> float:
        """Estimated seconds to run ``program`` once."""
        ...
