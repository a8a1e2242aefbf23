"""A cost model measured with TVM: the time of the kernels TVM builds (and tunes) for a program.

The program is costed per multi-linear subprogram (opaque operators cost the same in every
candidate, so they are left out). Each subprogram becomes a Relax module
(:func:`tvm_pet.relax.adapter.program_to_module`), is brought to the form the final build sees
(legalized and fused, :func:`tvm_pet.tune.measure.prepare`), and each fused kernel is timed: the
best tuning record's time when ``tuning_logs/<target>/`` has one, else a measured untuned time.

Untuned CPU kernels are naive loops (``shared/CALIBRATION.md``): mixing tuned and untuned times
is unfair to whichever side is untuned. Mutant kernels without records therefore look slow, and
the original is kept unless they are tuned as well (``tvm-pet tune``). That errs on the side of
changing nothing.
"""
from __future__ import annotations

from tvm_pet.ir.node import Program


class MeasuredCost:
    """Seconds per run of a program's multi-linear parts on ``target``, measured with TVM.

    Args:
        target: a target spec (``"llvm"``, ``"cuda"``, a dict, or a ``tvm.target.Target``).
        records_dir: the MetaSchedule records folder (default ``tuning_logs/<target key>``).
        tuned: use tuning records where they exist; ``False`` measures every kernel untuned
            (the cheap screen of ``tvm-pet tune``, fair between original and mutants).
    """

    name = "measured"

    def __init__(self, target="llvm", records_dir=None, tuned: bool = True):
        from tvm_pet.tune.records import default_records_dir
        from tvm_pet.tune.targets import resolve_target
        self.target = resolve_target(target)
        self.records_dir = (records_dir or default_records_dir(self.target)) if tuned else None
        self._memo: dict = {}

    def cost(self, program: Program) -> float:
        from tvm_pet.search.optimizer import canonical
        from tvm_pet.search.partition import partition
        total = 0.0
        for sub in partition(program, max_merge=1):
            key = canonical(sub.program)[0]
            if key not in self._memo:
                self._memo[key] = self._measure(sub.program)
            total += self._memo[key]
        return total

    def _measure(self, program: Program) -> float:
        from tvm_pet.relax.adapter import program_to_module
        from tvm_pet.tune.measure import kernel_times
        times = kernel_times(program_to_module(program), self.target, self.records_dir)
        return float(sum(t.seconds * t.weight for t in times))
