"""Real model definitions through torch.export -> Relax -> PETPass -> tvm.compile, against torch.

torchvision resnet18, mobilenet_v2, squeezenet1_1, inception_v3, vgg16, efficientnet_b0 (SiLU as
a sigmoid times its input, squeeze-excitation) and convnext_tiny (layer norms, GELU, 7x7 depthwise
convs), and a 2-layer
transformers BertModel fed token ids and an attention mask: random seeded weights
(``weights=None``), randomised batch-norm statistics (:mod:`tvm_pet.testing.real_models`). Each
model is exported with ``torch.export``, imported with TVM's ``from_exported_program``, optimized
by :class:`PETPass` and compiled; its outputs are compared with torch's, and its coverage figures
are checked: the CNNs are searched on most of their convolutions, the BERT on its float32 regions
around the integer inputs.

Small inputs (64x64, inception 75x75, 16 tokens) and a small search budget by default; the
designed input sizes under ``slow``. Skipped when torch, torchvision or transformers are absent
(``pip install tvm-pet[torch]``).
"""
from __future__ import annotations

import pytest

from tvm_pet.testing.real_models import (CNNS, FULL_SIZE, build_torch_model, max_relative_error,
                                         stub_torchvision_meta, to_relax_module, torch_outputs,
                                         tvm_outputs)

tvm = pytest.importorskip("tvm")
pytest.importorskip("torch")
stub_torchvision_meta()  # before torchvision: its compiled _C does not load with CPU torch
pytest.importorskip("torchvision")

from tvm_pet import PETPass  # noqa: E402
from tvm_pet.search.config import SearchConfig  # noqa: E402

#: float32 against torch, after folding batch norms and reassociating sums.
TOLERANCE = 1e-4
#: Enough search to visit every subprogram of these models on 2 cores, kept short.
FAST = SearchConfig(depth=2, rounds=1, max_subset=2, time_limit=20.0)


def optimized(name: str, size: int | None = None, config: SearchConfig = FAST):
    model, inputs = build_torch_model(name, size=size)
    mod = to_relax_module(model, inputs)
    pet = PETPass(config=config)
    new = pet(mod)
    if not pet.report["main"]["changed"]:
        tvm.ir.assert_structural_equal(new, mod)
    got = tvm_outputs(tvm.compile(new, target="llvm"), inputs)
    return pet, max_relative_error(got, torch_outputs(model, inputs))


@pytest.mark.parametrize("name", CNNS)
def test_cnn_matches_torch_and_is_searched(name):
    pet, err = optimized(name)
    assert err < TOLERANCE, pet.report["main"]
    cov = pet.coverage["main"]
    assert cov.searched_subprograms > 0 and cov.subprograms >= cov.searched_subprograms
    assert cov.linear_flops > 0
    # Every conv and the classifier are lifted; a time limit may leave a few unvisited.
    assert cov.fraction > 0.5, cov.summary_line()
    assert "outside" not in pet.report["main"]["coverage"] or not cov.outside


def test_bert_with_token_ids_and_mask_is_searched_on_its_float_regions():
    pytest.importorskip("transformers")
    pet, err = optimized("bert")
    assert err < TOLERANCE, pet.report["main"]
    cov = pet.coverage["main"]
    assert "reason" not in pet.report["main"] or not pet.report["main"]["reason"].startswith(
        "not searched"), pet.report["main"]["reason"]
    assert cov.searched_subprograms >= 1
    assert cov.fraction == 1.0, cov.summary_line()  # every matmul is float32 and lifted
    assert {"Softmax", "LayerNormalization", "Gelu"} <= set(cov.opaque)
    assert cov.outside  # the token-id, position and mask computations


@pytest.mark.slow
@pytest.mark.parametrize("name", CNNS)
def test_cnn_at_full_size_matches_torch(name):
    pet, err = optimized(name, size=FULL_SIZE.get(name, 224), config=SearchConfig())
    assert err < TOLERANCE, pet.report["main"]
    assert pet.coverage["main"].searched_subprograms > 0


@pytest.mark.parametrize("name", ["bert", "convnext_tiny"])
def test_fast_math_lowers_torch_exports_gelu_and_softmax_and_matches_torch(name):
    """``--fast-math`` on what ``torch.export`` gives: GELU (an operator of its own there),
    softmax and tanh all become TVM's fast functions, and the outputs stay within float32
    tolerance of torch's."""
    if name == "bert":
        pytest.importorskip("transformers")
    from tvm import relax

    from tvm_pet.pipeline.load import load

    model, inputs = build_torch_model(name)
    loaded = load(to_relax_module(model, inputs), fast_math=True)
    lowered = loaded.lower(loaded.program)
    left = set()
    relax.analysis.post_order_visit(lowered["main"], lambda e: left.add(e.op.name) if isinstance(
        e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    assert not left & {"relax.nn.gelu", "relax.erf", "relax.nn.softmax", "relax.tanh"}, left
    assert any(gv.name_hint.startswith("fast_erf") for gv in lowered.functions)
    got = tvm_outputs(tvm.compile(lowered, target="llvm"), inputs)
    assert max_relative_error(got, torch_outputs(model, inputs)) < TOLERANCE


@pytest.mark.parametrize("name", ["resnet18", pytest.param("vgg16", marks=pytest.mark.slow)])
def test_winograd_on_torch_exports_matches_torch(name):
    """With Winograd's F(4x4, 3x3) offered (``--winograd``), the analytic search rewrites the
    3x3 convolutions of a torchvision CNN by it, and the compiled model still matches torch.
    vgg16's thirteen (about 35 s here) run under ``slow``."""
    import dataclasses
    pet, err = optimized(name, config=dataclasses.replace(FAST, winograd=True))
    assert err < TOLERANCE, pet.report["main"]
    text = pet.results["main"].program.describe()
    assert "winograd=4" in text, pet.report["main"]
