"""Exploration: every verified mutant of every multi-linear subprogram (``tvm-pet explore``).

Round 1 runs the generator on each subprogram (and on each merge of independent ones). Each
further round runs it on the exact mutants found so far (the few cheapest by the analytic cost),
so mutants of mutants are listed too; every listed mutant, corrected, computes exactly what its
subprogram computes.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from collections.abc import Mapping

from tvm_pet.cost.analytic import AnalyticCost
from tvm_pet.ir.keys import canonical
from tvm_pet.ir.node import Program
from tvm_pet.search.config import SearchConfig, StopReason
from tvm_pet.search.generator import GeneratorStats, Mutant, generate
from tvm_pet.search.partition import partition
from tvm_pet.search.progress import progress


@dataclasses.dataclass
class ExploredSubprogram:
    name: str
    program: Program
    ops: tuple[str, ...]
    mutants: list[Mutant]
    stats: GeneratorStats

    def to_json(self) -> dict:
        return {"name": self.name, "ops": list(self.ops), "stats": self.stats.to_json(),
                "mutants": [{"ops": list(m.ops), "partially_equivalent": m.partially_equivalent,
                             "corrected_boxes": m.corrected_boxes,
                             "seconds": round(m.seconds, 3)} for m in self.mutants]}


@dataclasses.dataclass
class ExploreReport:
    subprograms: list[ExploredSubprogram]
    seconds: float
    stop: StopReason

    def to_json(self) -> dict:
        return {"seconds": self.seconds, "stop": self.stop.value,
                "subprograms": [s.to_json() for s in self.subprograms]}


def explore(program: Program, config: SearchConfig = SearchConfig()) -> ExploreReport:
    """Generate and verify mutants of every multi-linear subprogram of ``program``.

    Args:
        program: the model as a program (opaque operators split it).
        config: depth, rounds (of mutating mutants), topk (mutants carried to the next round),
            time_limit.

    Returns:
        An :class:`ExploreReport` with the mutants of each subprogram and why the search stopped.
    """
    start = time.perf_counter()
    deadline = None if config.time_limit is None else start + config.time_limit
    cost = AnalyticCost()
    out, stop = [], StopReason.EXHAUSTED
    for sub in progress(partition(program), config.progress, "subprograms"):
        stats = GeneratorStats()
        mutants: list[Mutant] = []
        seen = {canonical(sub.program)[0]}
        frontier = [sub.program]
        for _ in range(config.rounds):
            found = []
            for base in frontier:
                new, st = generate(base, config, deadline)
                _add(stats, st)
                for m in new:
                    key = canonical(m.program)[0]
                    if key not in seen:
                        seen.add(key)
                        # a mutant of an exact mutant, corrected, equals the subprogram as well
                        found.append(m)
            mutants += found
            exact = [m.program for m in found if not m.partially_equivalent]
            frontier = sorted(exact, key=cost.cost)[:config.topk]
            if not frontier:
                break
        if stats.stop is StopReason.TIME_LIMIT:
            stop = StopReason.TIME_LIMIT
        ops = tuple(n.op.value for n in sub.program.nodes)
        out.append(ExploredSubprogram(sub.name, sub.program, ops, mutants, stats))
        if deadline is not None and time.perf_counter() > deadline:
            stop = StopReason.TIME_LIMIT
            break
    return ExploreReport(out, time.perf_counter() - start, stop)


def _add(total: GeneratorStats, part: GeneratorStats) -> None:
    for field in ("states", "candidates", "duplicates", "screened_out", "verified", "corrected",
                  "rejected", "seconds"):
        setattr(total, field, getattr(total, field) + getattr(part, field))
    if part.stop is not StopReason.EXHAUSTED:
        total.stop = part.stop


def write_emitted(report: ExploreReport, directory,
                  names: Mapping[str, str] | None = None) -> pathlib.Path:
    """Write each subprogram and its corrected mutants as ONNX, with ``index.json``.

    Layout: ``DIR/<subprogram>/original.onnx`` and ``DIR/<subprogram>/<k>.onnx``. A tensor
    ``names`` names (the model's inputs and outputs, :func:`tvm_pet.onnx.exporter.model_names`)
    is written under that name; a boundary between subprograms keeps its generated one.
    Returns the path of ``index.json``.
    """
    from tvm_pet.onnx.exporter import export_model, rename_tensors
    root = pathlib.Path(directory)
    index = {"subprograms": []}

    def write(program: Program, path: pathlib.Path):
        model = rename_tensors(export_model(program), names or {})
        path.write_bytes(model.SerializeToString())
        return model

    for sub in report.subprograms:
        folder = root / sub.name
        folder.mkdir(parents=True, exist_ok=True)
        write(sub.program, folder / "original.onnx")
        entry = {"name": sub.name, "original": str(folder / "original.onnx"), "mutants": []}
        for k, m in enumerate(sub.mutants):
            path = folder / f"{k}.onnx"
            model = write(m.corrected, path)
            entry["mutants"].append({"file": str(path),
                                     "partially_equivalent": m.partially_equivalent,
                                     "corrected_boxes": m.corrected_boxes,
                                     "ops": [n.op_type for n in model.graph.node]})
        index["subprograms"].append(entry)
    path = root / "index.json"
    path.write_text(json.dumps(index, indent=2) + "\n")
    return path
