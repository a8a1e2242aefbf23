"""Costing a rewrite from its fusion region (search/region.py, MeasuredCost.difference).

The oracle is the whole-program cost: with a deterministic kernel timer (a function of the kernel's
structural hash), the region's difference must equal the whole candidate's cost less the whole
original's, exactly, for every candidate the search costs.
"""
import numpy as np
import pytest

from tvm_pet.cost.analytic import AnalyticCost
from tvm_pet.ir import ProgramBuilder
from tvm_pet.relax.adapter import program_to_module
from tvm_pet.search.config import SearchConfig
from tvm_pet.search.optimizer import Optimizer, operator_subsets
from tvm_pet.search.partition import extract, partition, replace_subprogram
from tvm_pet.search.region import fusion_region


def _residual_block():
    """conv0 -> relu -> [conv1 -> relu -> conv2] + relu output -> relu -> conv3 (a ResNet block)."""
    b = ProgramBuilder()
    x = b.input("x", (1, 4, 8, 8))

    def conv(y, i):
        return b.conv(y, b.weight(f"w{i}", np.full((4, 4, 3, 3), 0.1 * i, np.float32)), pads=1)

    a = b.opaque("Relu", [conv(x, 0)])[0]
    c = conv(b.opaque("Relu", [conv(a, 1)])[0], 2)
    out = conv(b.opaque("Relu", [b.add(c, a)])[0], 3)
    return b.build([out])


def test_region_stops_at_reducing_operators_and_takes_the_residual_partner():
    p = _residual_block()
    ops = [n.op.value for n in p.nodes]
    assert ops == ["Conv", "Opaque", "Conv", "Opaque", "Conv", "Add", "Opaque", "Conv"]
    region = fusion_region(p, extract(p, [4], "sub"))  # conv2: its add joins conv0's relu
    assert region.nodes == (0, 1, 2, 3, 4, 5, 6, 7)
    # conv0: its relu feeds conv1 and the add; the relu after conv1 is beyond conv1
    assert fusion_region(p, extract(p, [0], "sub")).nodes == (0, 1, 2, 4, 5, 6, 7)
    assert fusion_region(p, extract(p, [7], "sub")).nodes == (0, 1, 2, 4, 5, 6, 7)
    assert fusion_region(p, extract(p, [4], "sub"), max_nodes=3) is None


def test_region_after_replaces_the_subset_inside_the_region():
    p = _residual_block()
    part = extract(p, [4], "sub")
    region = fusion_region(p, part)
    assert region.after(part, part.program).outputs == region.before.outputs


class _FakeLocal(AnalyticCost):
    """The analytic cost, with a difference that records its calls (None: cannot cost)."""

    def __init__(self, answer):
        super().__init__()
        self.answer, self.calls = answer, 0

    def difference(self, before, after):
        self.calls += 1
        return self.answer


@pytest.mark.parametrize("answer", [-1e-3, None])
def test_the_optimizer_costs_a_rewrite_by_difference_or_else_whole(answer):
    p = _residual_block()
    cost = _FakeLocal(answer)
    opt = Optimizer(SearchConfig(time_limit=60), cost)
    sub = partition(p)[0]
    subset = operator_subsets(p, sub, 1)[0]
    part, mutants = opt.mutants_of(p, subset, sub.name)
    _, corrected = mutants[0]
    new = replace_subprogram(p, part, corrected)
    got = opt.rewrite_cost(opt.region_of(p, part), 1.0, part, corrected, new, p)
    assert cost.calls == 1
    assert got == (1.0 + answer if answer is not None else cost.cost(new))


# ------------------------------------------------------------------------------------ with TVM
def _fake_timer(task_mod, target, repeat=3):
    import tvm_ffi
    return (tvm_ffi.structural_hash(task_mod) % 997 + 1) * 1e-6


def _faked_search(loaded):
    """A measured cost of ``loaded``'s lowering on the fake timer, the original's cost, and an
    optimizer on it."""
    from tvm_pet.tune.measured_cost import MeasuredCost
    cost = MeasuredCost("llvm", tuned=False, lower=loaded.lower, measure_untuned=_fake_timer)
    return cost, cost.cost(loaded.program), Optimizer(SearchConfig(time_limit=120), cost)


@pytest.mark.parametrize("name, limit", [("resnet18", 16), ("csrnet_backend", 20)])
def test_region_difference_equals_the_whole_programs(name, limit):
    from tvm_pet.models import build_model
    from tvm_pet.pipeline.load import load

    loaded = load(build_model(name, image=64) if name == "resnet18" else build_model(name))
    program = loaded.program
    cost, base, opt = _faked_search(loaded)
    checked = 0
    for sub in partition(program, max_merge=3):
        for subset in operator_subsets(program, sub, 3):
            part, mutants = opt.mutants_of(program, subset, sub.name)
            region = opt.region_of(program, part)
            for _, corrected in mutants[:2]:
                new = replace_subprogram(program, part, corrected)
                local = opt.rewrite_cost(region, base, part, corrected, new, program)
                assert local == pytest.approx(cost.cost(new), rel=1e-9, abs=1e-12), sub.name
                checked += 1
            if checked >= limit:
                break
    assert checked >= limit and cost.regions_refused == 0


def test_without_a_region_a_rewrite_is_costed_from_the_kernels_the_whole_programs_differ_in():
    from tvm_pet.models import build_model
    from tvm_pet.pipeline.load import load
    from tvm_pet.tune.measured_cost import MeasuredCost

    loaded = load(build_model("resnet18", image=64))
    program = loaded.program
    timed = []

    def timer(task_mod, target, repeat=3):
        timed.append(task_mod)
        return _fake_timer(task_mod, target, repeat)

    cost = MeasuredCost("llvm", tuned=False, lower=loaded.lower, measure_untuned=timer)
    base = cost.cost(program)
    opt = Optimizer(SearchConfig(time_limit=120), cost)
    checked = 0
    for sub in partition(program, max_merge=3)[:6]:
        for subset in operator_subsets(program, sub, 2):
            part, mutants = opt.mutants_of(program, subset, sub.name)
            for _, corrected in mutants[:2]:
                new = replace_subprogram(program, part, corrected)
                timed.clear()
                # no region (too large, or not compilable alone): the whole programs' kernels
                got = opt.rewrite_cost(None, base, part, corrected, new, program)
                changed = len(timed)
                assert got == pytest.approx(cost.cost(new), rel=1e-9, abs=1e-12), sub.name
                # costed whole, every kernel of the candidate is looked up (the original's from
                # the cache); the difference timed only those the original lacks
                assert changed < len(cost.kernels(new))
                checked += 1
    assert checked >= 6


def test_without_a_region_a_rewrite_to_kernels_without_records_is_set_aside_untimed(tmp_path):
    from tests.records import write_records
    from tvm_pet.tune.compile import extract_tasks
    from tvm_pet.tune.measured_cost import MeasuredCost
    from tvm_pet.tune.records import db_dir
    from tvm_pet.tune.targets import resolve_target

    p, target = _residual_block(), resolve_target("llvm")
    original = [t.mod for t in extract_tasks(program_to_module(p), target)]
    write_records(db_dir(tmp_path, target), original, per_task=1, valid=True)
    timed = []
    cost = MeasuredCost("llvm", tmp_path, measure_untuned=lambda *a, **k: timed.append(a) or 1.0)
    opt = Optimizer(SearchConfig(time_limit=60), cost)
    sub = partition(p)[0]
    costs = []
    for subset in operator_subsets(p, sub, 2):
        part, mutants = opt.mutants_of(p, subset, sub.name)
        costs += [opt.rewrite_cost(None, 1.0, part, corrected,
                                   replace_subprogram(p, part, corrected), p)
                  for _, corrected in mutants]
    # every rewrite that makes a kernel the records lack is set aside, and none is timed
    assert cost.set_aside >= 1 and costs.count(float("inf")) == cost.set_aside
    assert timed == []


def test_unchanged_operators_lower_to_the_imported_kernels():
    """A spatial mean is lifted as an average pool; lowered unchanged it is the mean again."""
    from tvm_pet.models import build_model
    from tvm_pet.pipeline.load import load
    from tvm_pet.relax.adapter import to_relax
    from tvm_pet.tune.compile import extract_tasks

    loaded = load(build_model("resnet18", image=64))
    emitted = loaded.lower.module.clone()
    emitted["main"] = to_relax(loaded.program, loaded.lower.lifted)
    imported = {t.shash for t in extract_tasks(loaded.lower(loaded.program), "llvm")}
    assert {t.shash for t in extract_tasks(emitted, "llvm")} == imported
    assert any(n.op.value == "AvgPool" for n in loaded.program.nodes)


def _screened_rewrite(tmp_path):
    """A rewrite of the residual block that changes its kernels, with records written for the
    original's kernels only; the region before and after, and the kernels' structural hashes."""
    from tests.records import write_records
    from tvm_pet.relax.adapter import region_to_module
    from tvm_pet.tune.compile import extract_tasks
    from tvm_pet.tune.records import db_dir
    from tvm_pet.tune.targets import resolve_target

    p, target = _residual_block(), resolve_target("llvm")
    opt = Optimizer(SearchConfig(time_limit=60), AnalyticCost())

    def tasks(program):
        return {t.shash: t for t in extract_tasks(region_to_module(program), target)}

    for sub in partition(p):
        for subset in operator_subsets(p, sub, 2):
            part, mutants = opt.mutants_of(p, subset, sub.name)
            region = fusion_region(p, part)
            for _, corrected in mutants:
                after = region.after(part, corrected)
                before_tasks, after_tasks = tasks(region.before), tasks(after)
                if set(after_tasks) - set(before_tasks):
                    write_records(db_dir(tmp_path, target),
                                  [t.mod for t in before_tasks.values()], per_task=1,
                                  valid=True)
                    return region.before, after, before_tasks, after_tasks
    raise AssertionError("no mutant of the residual block changes its kernels")


def test_a_rewrite_to_kernels_without_records_is_set_aside_untimed(tmp_path):
    from tvm_pet.tune.measured_cost import MeasuredCost

    before, after, _, _ = _screened_rewrite(tmp_path)
    timed = []
    cost = MeasuredCost("llvm", tmp_path, measure_untuned=lambda *a, **k: timed.append(a) or 1.0)
    assert cost.difference(before, after) == float("inf")
    assert cost.set_aside == 1 and timed == []  # tuned against untuned: not even timed
    # with no records at all, both sides are untuned and both are timed
    untuned = MeasuredCost("llvm", tuned=False, measure_untuned=_fake_timer)
    assert untuned.difference(before, after) not in (None, float("inf"))
    assert untuned.set_aside == 0


def test_a_rewrite_to_a_kernel_tvm_cannot_compile_is_set_aside(tmp_path):
    from tvm_pet.errors import KernelBuildError
    from tvm_pet.tune.measured_cost import MeasuredCost

    import tvm_ffi

    before, after, before_tasks, after_tasks = _screened_rewrite(tmp_path)
    new = {tvm_ffi.structural_hash(t.mod) for h, t in after_tasks.items() if h not in before_tasks}

    def timer(mod, *args, **kwargs):
        if tvm_ffi.structural_hash(mod) in new:
            raise KernelBuildError("TVM cannot compile it for llvm (InternalError: Check failed)")
        return _fake_timer(mod, *args, **kwargs)

    cost = MeasuredCost("llvm", tuned=False, measure_untuned=timer)
    assert cost.difference(before, after) == float("inf")
    assert cost.unbuildable == 1 and cost.set_aside == 0
    with pytest.raises(KernelBuildError, match="kernel `"):  # the original's own: an error
        MeasuredCost("llvm", tuned=False, measure_untuned=timer).cost(after)


def test_the_screen_takes_tuned_times_replaced_and_the_untuned_ratio(tmp_path):
    from tests.records import write_records
    from tvm_pet.tune.measured_cost import MeasuredCost
    from tvm_pet.tune.records import db_dir
    from tvm_pet.tune.targets import resolve_target

    before, after, before_tasks, after_tasks = _screened_rewrite(tmp_path)
    lost = [t for h, t in before_tasks.items() if h not in after_tasks]
    gained = [t for h, t in after_tasks.items() if h not in before_tasks]
    cost = MeasuredCost("llvm", tmp_path, measure_untuned=_fake_timer)
    screen = cost.screen(before, after)

    def fake(tasks):
        return sum(t.weight * _fake_timer(t.mod, None) for t in tasks)
    # the replaced kernels have records: their time is measured here with the records' schedules
    # (the timer above; these records' traces leave each kernel as it is), not read from the
    # records, which write_records gave (1 + 10 k) ms for the k-th original task
    recorded = {h: 1e-3 * (1 + 10 * k) for k, h in enumerate(before_tasks)}
    assert screen.replaced_s == pytest.approx(fake(lost))
    assert screen.replaced_s != pytest.approx(sum(t.weight * recorded[t.shash] for t in lost))
    assert screen.untuned_ratio == pytest.approx(fake(gained) / fake(lost))
    assert not screen.tuned
    # once the mutant's new kernels have records, it counts as tuned, and it is costed
    write_records(db_dir(tmp_path, resolve_target("llvm")), [t.mod for t in gained], per_task=1,
                  base=5e-4,
                  valid=True)
    again = MeasuredCost("llvm", tmp_path, measure_untuned=_fake_timer)
    assert again.screen(before, after).tuned_s == pytest.approx(fake(gained))
    assert again.difference(before, after) == pytest.approx(fake(gained) - fake(lost))

def test_the_screen_compares_kernels_too_large_to_time_untuned_by_their_flops(tmp_path):
    from tvm.s_tir.analysis import estimate_tir_flops

    from tvm_pet.tune.measured_cost import MeasuredCost

    before, after, before_tasks, after_tasks = _screened_rewrite(tmp_path)
    lost = [t for h, t in before_tasks.items() if h not in after_tasks]
    gained = [t for h, t in after_tasks.items() if h not in before_tasks]
    timed = []

    def timer(mod, target, **kwargs):
        timed.append(mod)
        return _fake_timer(mod, target)

    # a limit below every kernel: nothing is timed untuned, the ratio is the FLOPs'
    by_flops = MeasuredCost("llvm", tmp_path, measure_untuned=timer, untuned_flop_limit=0)
    screen = by_flops.screen(before, after)

    def flops(tasks):
        return sum(t.weight * float(estimate_tir_flops(t.mod)) for t in tasks)
    # only the replaced kernels are timed, with their records' schedules; none untuned
    assert screen.basis == "flops" and len(timed) == len(lost)
    assert screen.untuned_ratio == pytest.approx(flops(gained) / flops(lost))
    # under the default limit these small kernels are timed untuned too (the tuned times are
    # read from the cache the first screen wrote)
    timed.clear()
    timed_screen = MeasuredCost("llvm", tmp_path, measure_untuned=timer).screen(before, after)
    assert timed_screen.basis == "untuned" and len(timed) == len(lost) + len(gained)


def test_a_deep_transformers_regions_stop_at_the_mask_every_layer_reads():
    """A 6-layer ``transformers`` BERT: its attention mask is computed once and read by every
    layer. The walk went through it into every layer, so no region fitted and every rewrite was
    costed (and screened) in the whole model: BERT-base screened no mutant. Each region now
    stops there, and still costs a rewrite exactly as the whole program does."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tvm_pet.pipeline.load import load
    from tvm_pet.search.region import MAX_REGION
    from tvm_pet.testing.real_models import (BertSize, build_torch_model, positional_bert,
                                             to_relax_module)

    model, inputs = build_torch_model("bert", bert=BertSize(layers=6))
    loaded = load(to_relax_module(positional_bert(model), inputs))
    program = loaded.program
    # as optimize does (pipeline/baseline.py): its attention kernels' no-op broadcast_to
    loaded.lower.lower_original_as_candidates(loaded.lower.round_trip())
    cost, base, opt = _faked_search(loaded)
    regions, checked = 0, 0
    for sub in partition(program):
        for subset in operator_subsets(program, sub, 3):
            part, mutants = opt.mutants_of(program, subset, sub.name)
            if not mutants:
                continue
            region = opt.region_of(program, part)
            assert region is not None and len(region.nodes) <= MAX_REGION, sub.name
            regions += 1
            for _, corrected in mutants[:1]:
                if checked < 12:
                    new = replace_subprogram(program, part, corrected)
                    local = opt.rewrite_cost(region, base, part, corrected, new, program)
                    assert local == pytest.approx(cost.cost(new), rel=1e-9, abs=1e-12)
                    checked += 1
    assert regions >= 12 and checked == 12 and cost.regions_refused == 0


def test_swin_t_s_shifted_window_regions_are_costed_alone_and_exactly():
    """torchvision's swin_t: its shifted windows gather with indices computed outside the
    lifted program (``arange``, ``add``, ``mod``). A region did not emit them, so it could not be
    compiled alone and its rewrites were costed in the whole model (4 s each at 224). A region
    now emits those that read no parameter of the model, and costs a rewrite exactly as the
    whole program does."""
    pytest.importorskip("torch")
    from tvm_pet.pipeline.load import load
    from tvm_pet.testing.real_models import (build_torch_model, stub_torchvision_meta,
                                             to_relax_module)

    stub_torchvision_meta()  # its compiled _C does not load with CPU torch
    pytest.importorskip("torchvision")
    model, inputs = build_torch_model("swin_t", size=64)
    loaded = load(to_relax_module(model, inputs))
    # as optimize does (pipeline/baseline.py)
    loaded.lower.lower_original_as_candidates(loaded.lower.round_trip())
    program = loaded.program
    assert any(b.value.op.name == "relax.arange" for b in loaded.lower.lifted.outside
               if hasattr(b.value, "op"))
    cost, base, opt = _faked_search(loaded)
    checked = 0
    for sub in partition(program, max_merge=3):
        for subset in operator_subsets(program, sub, 3):
            part, mutants = opt.mutants_of(program, subset, sub.name)
            region = fusion_region(program, part) if mutants else None
            if region is None:
                continue
            if "take(" not in loaded.lower.region(region.before).script():
                continue  # a region that gathers nothing
            new = replace_subprogram(program, part, mutants[0][1])
            local = opt.rewrite_cost(region, base, part, mutants[0][1], new, program)
            assert local == pytest.approx(cost.cost(new), rel=1e-9, abs=1e-12), sub.name
            checked += 1
            break
        if checked >= 4:
            break
    assert checked >= 4 and cost.regions_refused == 0
