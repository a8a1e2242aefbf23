"""PET's corrector (paper 5.2 step 3): patch a partially equivalent candidate so it is exact.

For each box where the candidate differs, the original program is recomputed on that box only:
the region is pulled back through the original's operators (:mod:`tvm_pet.ops.restrict`), so the
correction slices just the input elements it needs. The result is written into the candidate's
output with an UPDATE node. Correction fusion (paper 5.3) is in :mod:`tvm_pet.verify.fusion`.
"""
from __future__ import annotations

from tvm_pet.ir.builder import ProgramBuilder
from tvm_pet.ir.node import Program, free_name, weight_key
from tvm_pet.ir.ops import Op
from tvm_pet.ops.restrict import RESTRICT_RULES, Region, Restriction, count, full
from tvm_pet.verify.verifier import DEFAULT_TESTS, VerifyResult, verify


class _Recompute:
    """Emits nodes that compute regions of the original program's tensors into a builder."""

    def __init__(self, builder: ProgramBuilder, original: Program, names: dict[str, str]):
        self.b, self.p, self.names = builder, original, names
        self.memo: dict[tuple[str, Region], str] = {}

    def region(self, name: str, region: Region) -> str:
        """A tensor of the builder holding ``original[name]`` on ``region``."""
        key = (name, region)
        if key not in self.memo:
            self.memo[key] = self._compute(name, region)
        return self.memo[key]

    def _compute(self, name: str, region: Region) -> str:
        shape = self.p.shapes[name]
        if name in self.names:  # an input or a weight
            return self._slice(self.names[name], full(shape), region)
        node = self.p.producers[name]
        j = node.outputs.index(name)
        ins = [self.p.shapes[i] for i in node.inputs]
        outs = [self.p.shapes[o] for o in node.outputs]
        r = RESTRICT_RULES[node.op](node.attrs, ins, outs, j, region)
        if r is None:
            r = Restriction(node.attrs, tuple(full(s) for s in ins), full(shape))
        args = [self.region(i, reg) for i, reg in zip(node.inputs, r.inputs) if reg is not None]
        if r.identity:
            out = args[0]
        else:
            made = self.b.node(node.op, args, r.attrs)
            out = made[j] if len(made) > 1 else made[0]
        return self._slice(out, r.computed, region)

    def _slice(self, tensor: str, have: Region, want: Region) -> str:
        if have == want:
            return tensor
        starts = tuple((w[0] - h[0]) // h[2] for h, w in zip(have, want))
        steps = tuple(w[2] // h[2] if count(w) > 1 else 1 for h, w in zip(have, want))
        return self.b.node(Op.SLICE, [tensor], {"starts": starts, "steps": steps,
                                                 "sizes": tuple(count(w) for w in want)})[0]


def correct(original: Program, candidate: Program, result: VerifyResult | None = None,
            tests: int = DEFAULT_TESTS, seed: int = 0, fuse: bool = False) -> Program:
    """The candidate plus corrections, so that it computes exactly what the original computes.

    Args:
        original: the reference program P0.
        candidate: a (partially) equivalent program P1 with the same signature.
        result: the verifier's result for the pair (computed if not given).
        tests, seed: passed to :func:`~tvm_pet.verify.verifier.verify` when ``result`` is None.
        fuse: apply correction fusion (:func:`~tvm_pet.verify.fusion.fuse_corrections`).

    Returns:
        The corrected program (the candidate itself when it is already equivalent). Its inputs and
        outputs keep their names.
    """
    result = result if result is not None else verify(original, candidate, tests, seed)
    if result.equivalent:
        return candidate
    reserved = {n for node in candidate.nodes for n in node.outputs} | set(candidate.weights) \
        | set(candidate.input_names) | {n for node in original.nodes for n in node.outputs}
    b = ProgramBuilder(f"{candidate.name}_corrected", prefix="corr", reserved=reserved)
    for t in candidate.inputs:
        b.input(t.name, t.shape)
    for k, v in candidate.weights.items():
        b.weight(k, v)
    patched = {o.name for o in result.outputs if not o.equivalent}
    rename = {o: free_name(f"{o}_mutant", reserved) for o in patched}
    for node in candidate.nodes:
        inputs = [rename.get(i, i) for i in node.inputs]
        b.node(node.op, inputs, node.attrs, [rename.get(o, o) for o in node.outputs])
    names = {t.name: t.name for t in original.inputs}
    by_key = {weight_key(v): k for k, v in candidate.weights.items()}
    for k, v in original.weights.items():
        names[k] = by_key.get(weight_key(v)) or b.weight(free_name(f"{k}_orig", reserved | set(b.shapes)), v)
    recompute = _Recompute(b, original, names)
    outputs = []
    for diff in result.outputs:
        cur = rename.get(diff.name, diff.name)
        for k, box in enumerate(diff.boxes):
            region = tuple(zip(box.lo, box.hi, box.step))
            patch = recompute.region(diff.name, region)
            last = k == len(diff.boxes) - 1
            cur = b.update(cur, patch, box.lo, box.step, out=diff.name if last else None)
        outputs.append(diff.name)
    program = b.build(outputs)
    if fuse:
        from tvm_pet.verify.fusion import fuse_corrections
        program = fuse_corrections(program)
    return program
