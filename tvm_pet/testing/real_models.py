"""Real model definitions (torchvision, transformers) with random seeded weights, via torch.export.

Used by ``tests/test_real_models.py`` and ``benchmarks/real_models.py``. Needs the ``torch`` extra
(``pip install tvm-pet[torch]``); nothing here is imported by the engine or the pass.

- Weights cannot be downloaded: every model is built with ``weights=None`` under
  ``torch.manual_seed``; batch-norm running statistics are then randomised, so that folding them
  is not an identity.
- torchvision's compiled ``_C`` does not load with the CPU build of torch:
  :func:`stub_torchvision_meta` replaces ``torchvision._meta_registrations`` with an empty module
  before torchvision (or transformers, which imports it) is imported.

>>> model, inputs = build_torch_model("squeezenet1_1", size=64)  # doctest: +SKIP
>>> mod = to_relax_module(model, inputs)              # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Callable

import numpy as np

#: The CNNs the tests and benchmarks take from torchvision (with the default search,
#: efficientnet_b0 and convnext_tiny made mutant programs deeper than Python's recursion limit).
CNNS = ("resnet18", "mobilenet_v2", "squeezenet1_1", "inception_v3", "vgg16", "efficientnet_b0",
        "convnext_tiny")
#: Every model name :func:`build` knows.
MODELS = CNNS + ("bert",)
#: The smallest input side each CNN takes (inception_v3's stem and pools need 75).
MIN_SIZE = {"inception_v3": 75}
#: The sizes the models were designed for.
FULL_SIZE = {"inception_v3": 299}
#: What some torchvision constructors need here besides ``weights=None`` (ViT: a 64 x 64 input).
TORCHVISION_KWARGS = {"inception_v3": {"aux_logits": False, "init_weights": True},
                      "googlenet": {"aux_logits": False, "init_weights": True},
                      "vit_b_16": {"image_size": 64}}


def stub_torchvision_meta() -> None:
    """Stub ``torchvision._meta_registrations`` with an empty module: it registers fake kernels
    for torchvision's compiled ``_C`` ops, which do not load with the CPU build of torch, and
    both torchvision and transformers import it."""
    name = "torchvision._meta_registrations"
    if name not in sys.modules:
        sys.modules[name] = types.ModuleType(name)


def torchvision_models():
    """``torchvision.models``, importable with the CPU build of torch (its ``_C`` is not needed
    for the model definitions)."""
    stub_torchvision_meta()
    import torchvision.models
    return torchvision.models


def randomise_batch_norm(model, seed: int = 0) -> None:
    """Give every batch norm non-trivial running statistics (and affine parameters)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            c = m.num_features
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(c, generator=gen) * 0.5 + 0.75)
                if m.affine:
                    m.weight.copy_(torch.rand(c, generator=gen) * 0.5 + 0.75)
                    m.bias.copy_(torch.randn(c, generator=gen) * 0.1)


@dataclasses.dataclass(frozen=True)
class BertSize:
    """A small BERT: 2 layers by default, fed token ids and an attention mask."""

    layers: int = 2
    hidden: int = 64
    heads: int = 2
    intermediate: int = 128
    vocab: int = 100
    sequence: int = 16


def build_torch_model(name: str, size: int | None = None, seed: int = 0,
                      bert: BertSize = BertSize()):
    """The model ``name`` in eval mode with seeded random weights, and its example inputs.

    Args:
        name: one of :data:`MODELS`, or any other torchvision model (``vit_b_16`` at 64 x 64).
        size: the input image side for the CNNs (default 64, or :data:`MIN_SIZE`).
        seed: the torch seed for weights and inputs.
        bert: the BERT's sizes.

    Returns:
        ``(model, inputs)``: inputs is a tuple of torch tensors (token ids and an attention mask
        with padding for ``"bert"``, one image otherwise).
    """
    import torch
    stub_torchvision_meta()
    torch.manual_seed(seed)
    if name == "bert":
        import transformers
        cfg = transformers.BertConfig(hidden_size=bert.hidden, num_hidden_layers=bert.layers,
                                      num_attention_heads=bert.heads,
                                      intermediate_size=bert.intermediate, vocab_size=bert.vocab,
                                      max_position_embeddings=max(64, bert.sequence))
        model = transformers.BertModel(cfg).eval()
        ids = torch.randint(0, bert.vocab, (1, bert.sequence))
        mask = torch.ones(1, bert.sequence, dtype=torch.int64)
        mask[0, bert.sequence * 3 // 4:] = 0
        return model, (ids, mask)
    tv_models = torchvision_models()
    if name not in CNNS and not callable(getattr(tv_models, name, None)):
        raise ValueError(f"unknown model {name!r}: not one of {list(MODELS)} nor torchvision's")
    model: Callable = getattr(tv_models, name)(weights=None, **TORCHVISION_KWARGS.get(name, {}))
    randomise_batch_norm(model, seed)
    with torch.no_grad():  # a head initialised to zeros (ViT's) would make every output 0
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():
                p.normal_(0.0, 0.02, generator=torch.Generator().manual_seed(seed))
    model = model.eval()
    side = size or max(64, MIN_SIZE.get(name, 0))
    return model, (torch.randn(1, 3, side, side),)


def to_relax_module(model, inputs):
    """``torch.export`` then TVM's ``from_exported_program``, weights as constants, the program
    mended first as ``tvm-pet`` mends a ``.pt2`` file
    (:func:`~tvm_pet.relax.frontends.prepare_exported_program`)."""
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    from tvm_pet.relax.frontends import prepare_exported_program
    with torch.no_grad():
        program = torch.export.export(model, tuple(inputs))
    return from_exported_program(prepare_exported_program(program), keep_params_as_input=False)


def torch_outputs(model, inputs) -> list[np.ndarray]:
    """The model's outputs as a flat list of NumPy arrays (BERT: hidden states, then pooled)."""
    import torch
    with torch.no_grad():
        out = model(*inputs)
    if isinstance(out, torch.Tensor):
        return [out.numpy()]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    return [o.numpy() for o in out if isinstance(o, torch.Tensor)]


def tvm_outputs(executable, inputs) -> list[np.ndarray]:
    """Run a compiled Relax module's ``main`` on the torch inputs; a flat list of arrays."""
    import tvm
    from tvm import relax
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(x.numpy()) for x in inputs])
    return _flat(out)


def _flat(value) -> list[np.ndarray]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [a for v in value for a in _flat(v)]


def max_relative_error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    """Largest |got - want| over 1 + max |want|, across all outputs."""
    if len(got) != len(want):
        raise ValueError(f"{len(got)} outputs, expected {len(want)}")
    return max(float(np.abs(g - w).max()) / (1.0 + float(np.abs(w).max()))
               for g, w in zip(got, want))


def library_outputs(path, inputs) -> list[np.ndarray]:
    """The outputs of a library written by ``tvm-pet optimize`` (``optimized.so``) on ``inputs``
    (NumPy arrays, in the module's input order)."""
    import tvm
    from tvm import relax
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
    return _flat(vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(x)) for x in inputs]))


def positional_bert(bert):
    """BERT with (token ids, attention mask) as positional inputs and its two outputs as a tuple:
    its own forward takes the mask by keyword, which the TorchScript ONNX exporter cannot pass."""
    import torch

    class Positional(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask):
            out = self.bert(input_ids=ids, attention_mask=mask)
            return out.last_hidden_state, out.pooler_output

    return Positional().eval()
