"""The generator's results by subset structure, shared by everyone who mutates one program.

``tvm-pet optimize --trials N`` lists each subset's mutants twice: once to choose what to tune
(the tuning plan) and once in the search. A :class:`MutantCache` handed to both (through
:class:`~tvm_pet.search.optimizer.Optimizer`) makes the second listing a lookup. Its lifetime is
the caller's: the application makes one per optimize run; it is never global.
"""
from __future__ import annotations

from tvm_pet.ir.node import WeightKeys
from tvm_pet.search.generator import GeneratorStats, Mutant

#: One subset's generation: its verified mutants, the generator's statistics, and the names of
#: the subset's leaves and outputs the mutants are written on (in canonical order).
Generated = tuple[list[Mutant], GeneratorStats, list[str]]


class MutantCache:
    """Generated mutants keyed by a subset's canonical structure (weights abstracted).

    Verification treats weights symbolically, so subsets that differ only in names and weight
    values share one entry; ``weight_keys`` memoizes the weights' content keys for the canonical
    form.

    >>> cache = MutantCache()
    >>> cache.get(("no", "such", "subset")) is None and len(cache) == 0
    True
    """

    def __init__(self):
        self.weight_keys = WeightKeys()
        self._entries: dict[tuple, Generated] = {}

    def get(self, key: tuple) -> Generated | None:
        """The generation stored for ``key``, or None."""
        return self._entries.get(key)

    def put(self, key: tuple, generated: Generated) -> None:
        """Store a subset's generation under its canonical key."""
        self._entries[key] = generated

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        """The canonical keys stored, in the order they were generated."""
        return iter(list(self._entries))
