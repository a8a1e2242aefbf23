"""Which matrix products are offered as partial products over pieces of their reduction (pure;
the lowering is :func:`tvm_pet.relax.lower.split_k_matmul`).

A MATMUL node whose attributes carry ``pieces=p`` computes the same function as without it:
``A B = A[..., :k/p] B[:k/p] + ... + A[..., -k/p:] B[-k/p:]``, the sum of ``p`` products each
over ``k/p`` of the reduction (a fully equivalent rewrite: only the order of the additions
changes). It is lowered to Relax as those ``p`` products, each added to the sum so far (so that
each addition fuses into its product's kernel), and the verifier, the interpreters and the
exporters read it as the MATMUL it is.

Why it was tried: BERT's second feed-forward product, ``[128, 3072] x [3072, 768]``, took 2.75
ms of its layer's 8.87 ms (summed over kernels, in the model, tuned at 32 trials per task on
this project's CPU), where the layer's ``[768, 768]`` products ran 1.6 times as fast per
multiply-add; as four such products it took 2.09 ms (``profile-bert_encoder-split_k.md`` in
``benchmarks/results``). Why it is off by default (``SearchConfig.split_k``):
end to end, the layer with it (and GELU's ``x 0.5`` moved after it) ran x1.054 and x1.137
faster than TVM's with two tunings' kernels, where what the default search keeps ran x1.149
and x1.121 (12 processes each; ``benchmarks/split_k.py``, 2026-11-30, stop 64): the tuner's
draw, not a lever, and its kernels are more tuning. Where it is asked for, the tuning plan gives
these mutants places of their own (their untuned time cannot rank them), and the search keeps
them only where they measure faster.
"""
from __future__ import annotations

from collections.abc import Sequence

#: The most pieces the search offers.
MOST_PIECES = 8
#: How summaries name a MATMUL computed in pieces (:attr:`tvm_pet.ir.node.Node.label`).
LABEL = "SplitKMatMul"


def offers(a_shape: Sequence[int], b_shape: Sequence[int]) -> tuple[int, ...]:
    """The numbers of pieces offered for ``A B`` with these shapes: for a 2-D ``B`` of
    ``[k, n]`` whose reduction is a multiple ``p`` of the output's width (``k = p n``, ``2 <= p
    <= MOST_PIECES``), ``p`` pieces, each product's weight a square ``[n, n]`` block (a long
    reduction into a narrow output, the shape where one product was a poor fit for a tuned tile).

    >>> offers((1, 128, 3072), (3072, 768)), offers((1, 128, 768), (768, 3072))
    ((4,), ())
    >>> offers((128, 1536), (1536, 768)), offers((128, 3000), (3000, 1000))
    ((2,), (3,))
    >>> offers((1, 128, 768), (768, 768)), offers((128, 3000), (3000, 700))
    ((), ())
    """
    if len(b_shape) != 2 or len(a_shape) < 2 or a_shape[-1] != b_shape[0]:
        return ()
    k, n = b_shape
    return (k // n,) if k % n == 0 and 2 <= k // n <= MOST_PIECES else ()


def uses(program) -> bool:
    """Whether any MATMUL of ``program`` is computed in pieces of its reduction."""
    return any(n.attrs.get("pieces") for n in program.nodes)
