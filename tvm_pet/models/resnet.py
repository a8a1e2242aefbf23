"""ResNet-18 (2-D images) and R3D-18 (3-D videos), torchvision's layouts with seeded weights.

Both are four stages of two basic blocks (conv-bn-relu, conv-bn, shortcut, add, relu) with 64,
128, 256 and 512 channels; the first block of stages 2-4 halves every spatial axis and has a 1×1
convolution + batch norm shortcut. Tensor names follow torchvision (``"layer2.0.downsample.0"``).

>>> model = resnet18(image=64)
>>> [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
[1, 1000]
"""
from __future__ import annotations

import onnx

from tvm_pet.models.graph import GraphWriter

#: Output channels of the four stages.
STAGES = (64, 128, 256, 512)


def _basic_block(g: GraphWriter, name: str, x: str, cin: int, cout: int, stride: int,
                 rank: int) -> str:
    """One basic block; ``rank`` is 2 for ResNet-18 and 3 for R3D-18 (3×3×3 convolutions)."""
    y = g.conv(f"{name}.conv1", x, cin, cout, 3, stride, pad=1, rank=rank)
    y = g.relu(f"{name}.relu1", g.batchnorm(f"{name}.bn1", y, cout))
    y = g.conv(f"{name}.conv2", y, cout, cout, 3, pad=1, rank=rank)
    y = g.batchnorm(f"{name}.bn2", y, cout, gamma=(0.2, 0.5))  # keeps the residual sum O(1)
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = g.conv(f"{name}.downsample.0", x, cin, cout, 1, stride, rank=rank)
        shortcut = g.batchnorm(f"{name}.downsample.1", shortcut, cout)
    return g.relu(f"{name}.relu2", g.add(f"{name}.add", y, shortcut))


def _stages(g: GraphWriter, x: str, rank: int) -> str:
    """The four stages of two basic blocks each; returns the [N, 512, ...] feature map."""
    cin = STAGES[0]
    for i, cout in enumerate(STAGES, start=1):
        for j in range(2):
            stride = 2 if i > 1 and j == 0 else 1
            x = _basic_block(g, f"layer{i}.{j}", x, cin, cout, stride, rank)
            cin = cout
    return x


def _head(g: GraphWriter, x: str, classes: int) -> str:
    """Global average pooling, flatten and the classifier; writes the tensor ``"output"``."""
    x = g.node("GlobalAveragePool", "avgpool", [x])
    x = g.node("Flatten", "flatten", [x], axis=1)
    return g.gemm("fc", x, STAGES[-1], classes, out="output")


def resnet18(batch: int = 1, image: int = 224, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 on [batch, 3, image, image] images, giving [batch, 1000] logits.

    Args:
        batch: the batch size.
        image: the image height and width (at least 32, so that the last stage is non-empty).
        seed: the seed of the weights.

    Returns:
        The ONNX model, input ``"input"``, output ``"output"``.
    """
    if image < 32:
        raise ValueError(f"resnet18 needs image >= 32 (it downsamples 32 times), got {image}")
    g = GraphWriter("resnet18", seed)
    x = g.conv("conv1", "input", 3, STAGES[0], 7, 2, pad=3)
    x = g.relu("relu", g.batchnorm("bn1", x, STAGES[0]))
    x = g.maxpool("maxpool", x, 3, 2, pad=1)
    _head(g, _stages(g, x, rank=2), classes=1000)
    return g.model({"input": (batch, 3, image, image)}, ["output"],
                   doc=f"ResNet-18, seeded weights (seed {seed})")


def resnet3d_18(batch: int = 1, frames: int = 16, image: int = 112,
                seed: int = 0) -> onnx.ModelProto:
    """R3D-18 (torchvision ``video.r3d_18``) on [batch, 3, frames, image, image] clips.

    The stem is a (3, 7, 7) convolution with stride (1, 2, 2) and no max pool; stages 2-4 halve
    time, height and width; the classifier has 400 (Kinetics) classes.

    Args:
        batch: the batch size.
        frames: the clip length (at least 8).
        image: the frame height and width (at least 16).
        seed: the seed of the weights.

    Returns:
        The ONNX model, input ``"input"``, output ``"output"`` of shape [batch, 400].
    """
    if frames < 8 or image < 16:
        raise ValueError(f"resnet3d_18 downsamples time 8 and space 16 times: needs frames >= 8 "
                         f"and image >= 16, got frames={frames}, image={image}")
    g = GraphWriter("resnet3d_18", seed)
    x = g.conv("stem.0", "input", 3, STAGES[0], (3, 7, 7), (1, 2, 2), pad=(1, 3, 3), rank=3)
    x = g.relu("stem.2", g.batchnorm("stem.1", x, STAGES[0]))
    _head(g, _stages(g, x, rank=3), classes=400)
    return g.model({"input": (batch, 3, frames, image, image)}, ["output"],
                   doc=f"R3D-18, seeded weights (seed {seed})")
