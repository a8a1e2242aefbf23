"""Inception-v3 in torchvision's layout (``Inception3`` in eval mode) with seeded weights.

Stem (five conv-bn-relu, two max pools), ``Mixed_5b``..``Mixed_7c`` (Inception blocks A, A, A, B,
C, C, C, C, D, E, E), global average pooling and a 2048→1000 classifier; no auxiliary head, no
dropout, no input transform. Every ``BasicConv2d`` is a bias-free Conv, BatchNormalization
(epsilon 0.001) and Relu. The branches of a block are separate Conv nodes on the same input that
feed one Concat, which is the structure PET merges.

At a 330×330 image the blocks see the PET paper's Table-3 shapes: ``Mixed_5b.branch5x5_2`` is a
5×5 convolution on [1, 48, 38, 38], and ``Mixed_6c`` has 1×1 convolutions with weights
[192, 768, 1, 1] and [160, 768, 1, 1] on [1, 768, 18, 18]. The smallest valid image is 75.

>>> model = inception_v3(image=75)
>>> [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
[1, 1000]
"""
from __future__ import annotations

import onnx

from tvm_pet.models.graph import GraphWriter, IntOrTuple

#: The smallest image that keeps every feature map non-empty.
MIN_IMAGE = 75


def _basic(g: GraphWriter, name: str, x: str, cin: int, cout: int, kernel: IntOrTuple,
           stride: int = 1, pad: IntOrTuple = 0) -> str:
    """torchvision's ``BasicConv2d``: Conv (no bias), BatchNormalization, Relu."""
    y = g.conv(f"{name}.conv", x, cin, cout, kernel, stride, pad)
    return g.relu(f"{name}.relu", g.batchnorm(f"{name}.bn", y, cout, epsilon=0.001))


def _pool_branch(g: GraphWriter, name: str, x: str, cin: int, cout: int) -> str:
    """3×3 average pool (stride 1, padding 1, padding counted) then a 1×1 BasicConv2d."""
    y = g.avgpool(f"{name}.avgpool", x, 3, 1, pad=1)
    return _basic(g, f"{name}.branch_pool", y, cin, cout, 1)


def _inception_a(g: GraphWriter, name: str, x: str, cin: int, pool_features: int) -> str:
    """InceptionA (Mixed_5b..5d): 64 + 64 + 96 + pool_features channels."""
    b1 = _basic(g, f"{name}.branch1x1", x, cin, 64, 1)
    b5 = _basic(g, f"{name}.branch5x5_1", x, cin, 48, 1)
    b5 = _basic(g, f"{name}.branch5x5_2", b5, 48, 64, 5, pad=2)
    b3 = _basic(g, f"{name}.branch3x3dbl_1", x, cin, 64, 1)
    b3 = _basic(g, f"{name}.branch3x3dbl_2", b3, 64, 96, 3, pad=1)
    b3 = _basic(g, f"{name}.branch3x3dbl_3", b3, 96, 96, 3, pad=1)
    bp = _pool_branch(g, name, x, cin, pool_features)
    return g.concat(f"{name}.concat", [b1, b5, b3, bp])


def _inception_b(g: GraphWriter, name: str, x: str, cin: int) -> str:
    """InceptionB (Mixed_6a): halves the grid; 384 + 96 + cin channels."""
    b3 = _basic(g, f"{name}.branch3x3", x, cin, 384, 3, stride=2)
    bd = _basic(g, f"{name}.branch3x3dbl_1", x, cin, 64, 1)
    bd = _basic(g, f"{name}.branch3x3dbl_2", bd, 64, 96, 3, pad=1)
    bd = _basic(g, f"{name}.branch3x3dbl_3", bd, 96, 96, 3, stride=2)
    bp = g.maxpool(f"{name}.maxpool", x, 3, 2)
    return g.concat(f"{name}.concat", [b3, bd, bp])


def _inception_c(g: GraphWriter, name: str, x: str, cin: int, c7: int) -> str:
    """InceptionC (Mixed_6b..6e): factorised 7×7 convolutions, 4 × 192 channels."""
    b1 = _basic(g, f"{name}.branch1x1", x, cin, 192, 1)
    b7 = _basic(g, f"{name}.branch7x7_1", x, cin, c7, 1)
    b7 = _basic(g, f"{name}.branch7x7_2", b7, c7, c7, (1, 7), pad=(0, 3))
    b7 = _basic(g, f"{name}.branch7x7_3", b7, c7, 192, (7, 1), pad=(3, 0))
    bd = _basic(g, f"{name}.branch7x7dbl_1", x, cin, c7, 1)
    for i, (cout, horizontal) in enumerate([(c7, False), (c7, True), (c7, False), (192, True)]):
        kernel, pad = ((1, 7), (0, 3)) if horizontal else ((7, 1), (3, 0))
        bd = _basic(g, f"{name}.branch7x7dbl_{i + 2}", bd, c7, cout, kernel, pad=pad)
    bp = _pool_branch(g, name, x, cin, 192)
    return g.concat(f"{name}.concat", [b1, b7, bd, bp])


def _inception_d(g: GraphWriter, name: str, x: str, cin: int) -> str:
    """InceptionD (Mixed_7a): halves the grid; 320 + 192 + cin channels."""
    b3 = _basic(g, f"{name}.branch3x3_1", x, cin, 192, 1)
    b3 = _basic(g, f"{name}.branch3x3_2", b3, 192, 320, 3, stride=2)
    b7 = _basic(g, f"{name}.branch7x7x3_1", x, cin, 192, 1)
    b7 = _basic(g, f"{name}.branch7x7x3_2", b7, 192, 192, (1, 7), pad=(0, 3))
    b7 = _basic(g, f"{name}.branch7x7x3_3", b7, 192, 192, (7, 1), pad=(3, 0))
    b7 = _basic(g, f"{name}.branch7x7x3_4", b7, 192, 192, 3, stride=2)
    bp = g.maxpool(f"{name}.maxpool", x, 3, 2)
    return g.concat(f"{name}.concat", [b3, b7, bp])


def _split_3x3(g: GraphWriter, name: str, x: str) -> str:
    """InceptionE's pair of 1×3 and 3×1 convolutions on the same input, concatenated."""
    a = _basic(g, f"{name}a", x, 384, 384, (1, 3), pad=(0, 1))
    b = _basic(g, f"{name}b", x, 384, 384, (3, 1), pad=(1, 0))
    return g.concat(f"{name}.concat", [a, b])


def _inception_e(g: GraphWriter, name: str, x: str, cin: int) -> str:
    """InceptionE (Mixed_7b, 7c): 320 + 768 + 768 + 192 = 2048 channels."""
    b1 = _basic(g, f"{name}.branch1x1", x, cin, 320, 1)
    b3 = _basic(g, f"{name}.branch3x3_1", x, cin, 384, 1)
    b3 = _split_3x3(g, f"{name}.branch3x3_2", b3)
    bd = _basic(g, f"{name}.branch3x3dbl_1", x, cin, 448, 1)
    bd = _basic(g, f"{name}.branch3x3dbl_2", bd, 448, 384, 3, pad=1)
    bd = _split_3x3(g, f"{name}.branch3x3dbl_3", bd)
    bp = _pool_branch(g, name, x, cin, 192)
    return g.concat(f"{name}.concat", [b1, b3, bd, bp])


def _stem(g: GraphWriter, x: str) -> str:
    """Conv2d_1a..4a with two 3×3 max pools (stride 2): [N, 3, S, S] -> [N, 192, ~S/8, ~S/8]."""
    x = _basic(g, "Conv2d_1a_3x3", x, 3, 32, 3, stride=2)
    x = _basic(g, "Conv2d_2a_3x3", x, 32, 32, 3)
    x = _basic(g, "Conv2d_2b_3x3", x, 32, 64, 3, pad=1)
    x = g.maxpool("maxpool1", x, 3, 2)
    x = _basic(g, "Conv2d_3b_1x1", x, 64, 80, 1)
    x = _basic(g, "Conv2d_4a_3x3", x, 80, 192, 3)
    return g.maxpool("maxpool2", x, 3, 2)


def inception_v3(batch: int = 1, image: int = 330, seed: int = 0) -> onnx.ModelProto:
    """Inception-v3 on [batch, 3, image, image] images, giving [batch, 1000] logits.

    Args:
        batch: the batch size.
        image: the image height and width (at least 75; 330 gives PET's Table-3 shapes).
        seed: the seed of the weights.

    Returns:
        The ONNX model, input ``"input"``, output ``"output"``.
    """
    if image < MIN_IMAGE:
        raise ValueError(f"inception_v3 needs image >= {MIN_IMAGE}, got {image}")
    g = GraphWriter("inception_v3", seed)
    x = _stem(g, "input")
    for name, cin, pool_features in [("Mixed_5b", 192, 32), ("Mixed_5c", 256, 64),
                                     ("Mixed_5d", 288, 64)]:
        x = _inception_a(g, name, x, cin, pool_features)
    x = _inception_b(g, "Mixed_6a", x, 288)
    for name, c7 in [("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)]:
        x = _inception_c(g, name, x, 768, c7)
    x = _inception_d(g, "Mixed_7a", x, 768)
    x = _inception_e(g, "Mixed_7b", x, 1280)
    x = _inception_e(g, "Mixed_7c", x, 2048)
    x = g.node("GlobalAveragePool", "avgpool", [x])
    x = g.node("Flatten", "flatten", [x], axis=1)
    g.gemm("fc", x, 2048, 1000, out="output")
    return g.model({"input": (batch, 3, image, image)}, ["output"],
                   doc=f"Inception-v3, seeded weights (seed {seed})")
