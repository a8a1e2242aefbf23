"""The operator graphs of the PET paper's Table 3, each a tiny ONNX model with seeded weights.

- :func:`conv5x5`: Inception-v3's 5×5 convolution, [b, 48, 38, 38] ⊛ [64, 48, 5, 5], padding 2;
- :func:`dilated_conv`: CSRNet's dilated convolution, [b, 512, 14, 14] ⊛ [256, 512, 3, 3],
  dilation 2, padding 2;
- :func:`two_1x1_convs`: Inception-v3's parallel 1×1 convolutions on [b, 768, 18, 18] with
  [192, 768, 1, 1] and [160, 768, 1, 1] (outputs ``"output0"``, ``"output1"``);
- :func:`three_matmuls`: BERT's Q, K, V projections, three [512, 768] × [768, 768] matmuls on
  one input (outputs ``"output0"``..``"output2"``).

Convolutions have no bias: the table measures the operators alone.

>>> [d.dim_value for d in conv5x5().graph.output[0].type.tensor_type.shape.dim]
[1, 64, 38, 38]
"""
from __future__ import annotations

import onnx

from tvm_pet.models.graph import GraphWriter


def conv5x5(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """A 5×5 convolution, [batch, 48, 38, 38] ⊛ [64, 48, 5, 5] with padding 2.

    Args:
        batch: the batch size.
        seed: the seed of the weight.

    Returns:
        The ONNX model, input ``"input"``, output ``"output"`` of shape [batch, 64, 38, 38].
    """
    g = GraphWriter("conv5x5", seed)
    g.conv("conv", "input", 48, 64, 5, pad=2, out="output")
    return g.model({"input": (batch, 48, 38, 38)}, ["output"], doc="PET Table 3: 5x5 conv")


def dilated_conv(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """A dilated 3×3 convolution, [batch, 512, 14, 14] ⊛ [256, 512, 3, 3], dilation 2, padding 2.

    Args:
        batch: the batch size.
        seed: the seed of the weight.

    Returns:
        The ONNX model, input ``"input"``, output ``"output"`` of shape [batch, 256, 14, 14].
    """
    g = GraphWriter("dilated_conv", seed)
    g.conv("conv", "input", 512, 256, 3, pad=2, dilation=2, out="output")
    return g.model({"input": (batch, 512, 14, 14)}, ["output"], doc="PET Table 3: dilated conv")


def two_1x1_convs(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """Two 1×1 convolutions on one [batch, 768, 18, 18] input, with 192 and 160 output channels.

    Args:
        batch: the batch size.
        seed: the seed of the weights.

    Returns:
        The ONNX model, input ``"input"``, outputs ``"output0"`` [batch, 192, 18, 18] and
        ``"output1"`` [batch, 160, 18, 18].
    """
    g = GraphWriter("two_1x1_convs", seed)
    g.conv("conv0", "input", 768, 192, 1, out="output0")
    g.conv("conv1", "input", 768, 160, 1, out="output1")
    return g.model({"input": (batch, 768, 18, 18)}, ["output0", "output1"],
                   doc="PET Table 3: two 1x1 convs")


def three_matmuls(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """Three [512·batch, 768] × [768, 768] matmuls sharing their input (BERT's Q, K, V).

    Args:
        batch: how many blocks of 512 rows (tokens) the input has.
        seed: the seed of the weights.

    Returns:
        The ONNX model, input ``"input"`` [512·batch, 768], outputs ``"output0"``, ``"output1"``
        and ``"output2"``, each [512·batch, 768].
    """
    g = GraphWriter("three_matmuls", seed)
    for i in range(3):
        w = g.normal(f"matmul{i}.weight", (768, 768), 768 ** -0.5)
        g.node("MatMul", f"matmul{i}", ["input", w], out=f"output{i}")
    return g.model({"input": (512 * batch, 768)}, [f"output{i}" for i in range(3)],
                   doc="PET Table 3: three matmuls")
