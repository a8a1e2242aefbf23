"""A BERT-Base encoder stack (post-LayerNorm Transformer layers) with seeded weights.

Each layer, on hidden states ``h`` of shape [batch, seq, hidden]:

1. Q, K and V as three separate ``MatMul`` + ``Add`` on ``h`` (PET merges them into one);
2. reshape to [batch, seq, heads, d] and transpose to [batch, heads, seq, d] (K to
   [batch, heads, d, seq]); scores ``Q K^T`` scaled by ``1/sqrt(d)`` (a ``Mul``), ``Softmax``;
   context ``P V``, transposed and reshaped back to [batch, seq, hidden];
3. the output projection, the residual ``+ h`` and ``LayerNormalization``;
4. the feed-forward network ``Gelu(h W1 + b1) W2 + b2`` with the exact (``Erf``) Gelu written as
   ``Mul``, ``Erf``, ``Add``, ``Mul``; the residual and a second ``LayerNormalization``.

There is no embedding and no attention mask: the input ``"hidden"`` holds the hidden states.

>>> model = bert_encoder(seq=8, layers=2)
>>> sum(n.op_type == "LayerNormalization" for n in model.graph.node)
4
"""
from __future__ import annotations

import math

import numpy as np
import onnx

from tvm_pet.models.graph import GraphWriter


def _attention(g: GraphWriter, name: str, h: str, batch: int, seq: int, hidden: int,
               heads: int) -> str:
    """Multi-head self-attention up to (and excluding) the output projection: [b, s, hidden]."""
    d = hidden // heads
    split = (batch, seq, heads, d)
    q = g.linear(f"{name}.query", h, hidden, hidden)
    k = g.linear(f"{name}.key", h, hidden, hidden)
    v = g.linear(f"{name}.value", h, hidden, hidden)
    q = g.transpose(f"{name}.query.heads", g.reshape(f"{name}.query.split", q, split), (0, 2, 1, 3))
    k = g.transpose(f"{name}.key.heads", g.reshape(f"{name}.key.split", k, split), (0, 2, 3, 1))
    v = g.transpose(f"{name}.value.heads", g.reshape(f"{name}.value.split", v, split), (0, 2, 1, 3))
    scores = g.scale(f"{name}.scores", g.node("MatMul", f"{name}.qk", [q, k]), 1.0 / math.sqrt(d))
    probs = g.node("Softmax", f"{name}.softmax", [scores], axis=-1)
    context = g.node("MatMul", f"{name}.context", [probs, v])
    context = g.transpose(f"{name}.context.merge", context, (0, 2, 1, 3))
    return g.reshape(f"{name}.context.reshape", context, (batch, seq, hidden))


def _gelu(g: GraphWriter, name: str, x: str) -> str:
    """Exact Gelu, ``x * 0.5 * (1 + erf(x / sqrt(2)))``, as BERT exports it (Mul for the Div)."""
    e = g.node("Erf", f"{name}.erf", [g.scale(f"{name}.div", x, 1.0 / math.sqrt(2.0))])
    one = g.add(f"{name}.add", e, g.constant(f"{name}.one", np.float32(1.0)))
    return g.scale(f"{name}.half", g.node("Mul", f"{name}.mul", [x, one]), 0.5)


def _layer(g: GraphWriter, name: str, h: str, batch: int, seq: int, hidden: int, heads: int,
           ffn: int, out: str | None) -> str:
    """One encoder layer: attention, Add & LayerNorm, feed-forward, Add & LayerNorm."""
    context = _attention(g, f"{name}.attention.self", h, batch, seq, hidden, heads)
    a = g.linear(f"{name}.attention.output.dense", context, hidden, hidden)
    a = g.add(f"{name}.attention.output.residual", a, h)
    a = g.layernorm(f"{name}.attention.output.LayerNorm", a, hidden)
    f = g.linear(f"{name}.intermediate.dense", a, hidden, ffn)
    f = _gelu(g, f"{name}.intermediate.gelu", f)
    f = g.linear(f"{name}.output.dense", f, ffn, hidden)
    f = g.add(f"{name}.output.residual", f, a)
    return g.layernorm(f"{name}.output.LayerNorm", f, hidden, out=out)


def bert_encoder(batch: int = 1, seq: int = 128, layers: int = 1, hidden: int = 768,
                 heads: int = 12, ffn: int = 3072, seed: int = 0) -> onnx.ModelProto:
    """``layers`` BERT encoder layers on hidden states [batch, seq, hidden].

    Args:
        batch: the batch size.
        seq: the sequence length.
        layers: the number of encoder layers (BERT-Base has 12).
        hidden: the hidden width (a multiple of ``heads``).
        heads: the number of attention heads.
        ffn: the feed-forward width.
        seed: the seed of the weights.

    Returns:
        The ONNX model, input ``"hidden"`` and output ``"output"``, both [batch, seq, hidden].
    """
    if hidden % heads:
        raise ValueError(f"bert_encoder: hidden ({hidden}) must be a multiple of heads ({heads})")
    if layers < 1:
        raise ValueError(f"bert_encoder needs at least one layer, got {layers}")
    g = GraphWriter("bert_encoder", seed)
    h = "hidden"
    for i in range(layers):
        last = i == layers - 1
        h = _layer(g, f"encoder.layer.{i}", h, batch, seq, hidden, heads, ffn,
                   out="output" if last else None)
    return g.model({"hidden": (batch, seq, hidden)}, ["output"],
                   doc=f"BERT encoder, {layers} layer(s), seeded weights (seed {seed})")
