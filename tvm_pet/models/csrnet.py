"""CSRNet (crowd counting, Li et al. CVPR'18) with seeded weights, and its dilated back end alone.

The front end is VGG-16's first ten 3×3 convolutions (with bias and ReLU, no batch norm) and three
2×2 max pools, so a [N, 3, H, W] image becomes a [N, 512, H/8, W/8] feature map. The back end is
six 3×3 convolutions with dilation 2 and padding 2 and a 1×1 convolution to the one-channel
density map. PET's Table-3 dilated convolution, [1, 512, 14, 14] ⊛ [256, 512, 3, 3], has the shape
of the fourth back-end layer on a 112×112 image (see also
:func:`~tvm_pet.models.operators.dilated_conv`).

>>> model = csrnet_backend(h=8, w=8)
>>> [n.op_type for n in model.graph.node].count("Conv")
7
"""
from __future__ import annotations

import onnx

from tvm_pet.models.graph import GraphWriter

#: VGG-16's first ten convolutions ("M" is a 2×2 max pool with stride 2).
FRONTEND = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512)
#: The dilated back end's channels.
BACKEND = (512, 512, 512, 256, 128, 64)


def _frontend(g: GraphWriter, x: str) -> str:
    """VGG-16's first ten convolutions; tensor names follow CSRNet's ``frontend.<index>``."""
    cin = 3
    for index, item in enumerate(FRONTEND):
        if item == "M":
            x = g.maxpool(f"frontend.{index}.pool", x, 2, 2)
            continue
        x = g.conv(f"frontend.{index}.conv", x, cin, item, 3, pad=1, bias=True)
        x = g.relu(f"frontend.{index}.relu", x)
        cin = item
    return x


def _backend(g: GraphWriter, x: str, cin: int) -> str:
    """The six dilated convolutions with ReLU and the 1×1 output convolution (``"output"``)."""
    for index, cout in enumerate(BACKEND):
        x = g.conv(f"backend.{index}.conv", x, cin, cout, 3, pad=2, dilation=2, bias=True)
        x = g.relu(f"backend.{index}.relu", x)
        cin = cout
    return g.conv("output_layer", x, cin, 1, 1, bias=True, out="output")


def csrnet(batch: int = 1, image: int = 224, seed: int = 0) -> onnx.ModelProto:
    """CSRNet on [batch, 3, image, image] images, giving a [batch, 1, image/8, image/8] density map.

    Args:
        batch: the batch size.
        image: the image height and width (at least 8).
        seed: the seed of the weights.

    Returns:
        The ONNX model, input ``"input"``, output ``"output"``.
    """
    if image < 8:
        raise ValueError(f"csrnet max-pools three times: needs image >= 8, got {image}")
    g = GraphWriter("csrnet", seed)
    _backend(g, _frontend(g, "input"), FRONTEND[-1])
    return g.model({"input": (batch, 3, image, image)}, ["output"],
                   doc=f"CSRNet, seeded weights (seed {seed})")


def csrnet_backend(batch: int = 1, h: int = 14, w: int = 14, seed: int = 0) -> onnx.ModelProto:
    """CSRNet's back end alone on a [batch, 512, h, w] feature map.

    Six 3×3 convolutions with dilation 2, padding 2 and ReLU (512, 512, 512, 256, 128, 64
    channels), then a 1×1 convolution to one channel.

    Args:
        batch: the batch size.
        h, w: the feature map's height and width.
        seed: the seed of the weights.

    Returns:
        The ONNX model, input ``"input"``, output ``"output"`` of shape [batch, 1, h, w].
    """
    g = GraphWriter("csrnet_backend", seed)
    _backend(g, "input", BACKEND[0])
    return g.model({"input": (batch, BACKEND[0], h, w)}, ["output"],
                   doc=f"CSRNet back end, seeded weights (seed {seed})")
