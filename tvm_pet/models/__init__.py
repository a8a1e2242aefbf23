"""The PET paper's models as ONNX, generated from code with seeded random weights.

Every builder returns an ``onnx.ModelProto`` (opset 17, IR version 8, float32, static shapes)
whose weights are initializers drawn from ``np.random.default_rng(seed)`` and scaled so that
activations stay O(1). The graph input is ``"input"`` (``"hidden"`` for BERT) and the output is
``"output"`` (``"output0"``, ``"output1"``, ... for the multi-output Table-3 operator graphs).
Nothing is downloaded and no model file is stored. Like :mod:`tvm_pet.onnx`, this package sits
at the model edge of tvm_pet and imports :mod:`onnx`; feed its models to
:func:`tvm_pet.onnx.import_model`.

========================  =======================================================================
name                      model
========================  =======================================================================
``resnet18``              ResNet-18, [b, 3, 224, 224] -> [b, 1000]
``resnet3d_18``           R3D-18 (video), [b, 3, 16, 112, 112] -> [b, 400]
``csrnet``                CSRNet, [b, 3, 224, 224] -> [b, 1, 28, 28]
``csrnet_backend``        CSRNet's dilated back end, [b, 512, 14, 14] -> [b, 1, 14, 14]
``inception_v3``          Inception-v3, [b, 3, 330, 330] -> [b, 1000]
``bert_encoder``          BERT-Base encoder layer(s), [b, 128, 768] -> [b, 128, 768]
``conv5x5``               Table 3: 5×5 conv on [b, 48, 38, 38]
``dilated_conv``          Table 3: dilated 3×3 conv on [b, 512, 14, 14]
``two_1x1_convs``         Table 3: two 1×1 convs on [b, 768, 18, 18]
``three_matmuls``         Table 3: three [512, 768] × [768, 768] matmuls
========================  =======================================================================

>>> model = build_model("csrnet_backend", h=8, w=8, seed=1)
>>> model.graph.input[0].name, model.graph.output[0].name
('input', 'output')
"""
from __future__ import annotations

from collections.abc import Callable

import onnx

from tvm_pet.models.bert import bert_encoder
from tvm_pet.models.csrnet import csrnet, csrnet_backend
from tvm_pet.models.inception import inception_v3
from tvm_pet.models.operators import conv5x5, dilated_conv, three_matmuls, two_1x1_convs
from tvm_pet.models.resnet import resnet3d_18, resnet18

#: Every model builder by name; each takes keyword arguments (``batch``, ``seed``, sizes).
MODELS: dict[str, Callable[..., onnx.ModelProto]] = {
    "resnet18": resnet18,
    "resnet3d_18": resnet3d_18,
    "csrnet": csrnet,
    "csrnet_backend": csrnet_backend,
    "inception_v3": inception_v3,
    "bert_encoder": bert_encoder,
    "conv5x5": conv5x5,
    "dilated_conv": dilated_conv,
    "two_1x1_convs": two_1x1_convs,
    "three_matmuls": three_matmuls,
}


def build_model(name: str, **kwargs) -> onnx.ModelProto:
    """Build the model ``name`` of :data:`MODELS`.

    Args:
        name: a key of :data:`MODELS`.
        **kwargs: the builder's keyword arguments, e.g. ``batch=1, seed=0``.

    Returns:
        The ONNX model.

    Raises:
        ValueError: ``name`` is not a known model.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; tvm_pet.models builds "
                         f"{', '.join(sorted(MODELS))}")
    return MODELS[name](**kwargs)


__all__ = ["MODELS", "build_model", "bert_encoder", "conv5x5", "csrnet", "csrnet_backend",
           "dilated_conv", "inception_v3", "resnet18", "resnet3d_18", "three_matmuls",
           "two_1x1_convs"]
