"""Which matrix products are offered as products over pieces of their columns (pure; the
lowering is :func:`tvm_pet.relax.lower.columns_matmul`).

A MATMUL node whose attributes carry ``columns=p`` computes the same function as without it:
``A B = [A B[:, :n/p], ..., A B[:, -n/p:]]``, the products of ``A`` by ``p`` column pieces of
``B``, concatenated (a fully equivalent rewrite: every output element is the same sum, added in
the same order). It is lowered to Relax as those ``p`` products and a concatenation, and the
verifier, the interpreters and the exporters read it as the MATMUL it is.

Why it was tried: TVM's ``CombineParallelMatmul`` (on in the baseline, as the issue asks)
merges BERT's Q, K and V projections into one ``[768, 2304]`` product. Tuned at 32 trials per
task, that product ran at about half the rate per multiply-add of the layer's ``[768, 768]``
output projection (``benchmarks/results/profile-bert_encoder.md``), and the layer with its three
projections apart ran x1.20 faster than TVM's build (``benchmarks/results/qkv_apart.md``). As
pieces of its columns, the merged product is again three ``[768, 768]`` products, one workload
tuned once for all of them (and for BERT's first feed-forward product, in four pieces).

Why it is off by default (``SearchConfig.columns``, ``--columns``): on the shipped records PET
kept it on BERT's Q, K and V and first feed-forward products, x1.379 (stop 71, an Intel Xeon);
but there its pieces were tuned on that CPU, and TVM's merged product came from records another
CPU tuned. On two fresh tunings of that CPU (both sides alike, seeds 1 and 2), PET kept the
original (its best candidates measured x1.05 and x1.02). Like the product in pieces of its
reduction (:mod:`tvm_pet.ir.splitk`), its untuned time cannot rank it, so where it is asked for
the tuning plan gives these mutants places of their own, and the search keeps them only where
they measure faster.
"""
from __future__ import annotations

from collections.abc import Sequence

#: The most pieces the search offers.
MOST_PIECES = 8
#: How summaries name a MATMUL computed in pieces of its columns
#: (:attr:`tvm_pet.ir.node.Node.label`).
LABEL = "ColumnsMatMul"


def offers(a_shape: Sequence[int], b_shape: Sequence[int]) -> tuple[int, ...]:
    """The numbers of pieces offered for ``A B`` with these shapes: for a 2-D ``B`` of
    ``[k, n]`` whose width is a multiple ``p`` of its reduction (``n = p k``, ``2 <= p <=
    MOST_PIECES``), ``p`` pieces, each product's weight a square ``[k, k]`` block (a wide
    product, such as a merged one, as the square products it may have been).

    >>> offers((1, 128, 768), (768, 2304)), offers((1, 128, 768), (768, 3072))
    ((3,), (4,))
    >>> offers((1, 128, 3072), (3072, 768)), offers((128, 768), (768, 768))
    ((), ())
    >>> offers((128, 64), (64, 64 * 9)), offers((2, 8, 64, 256), (2, 256, 512))
    ((), ())
    """
    if len(b_shape) != 2 or len(a_shape) < 2 or a_shape[-1] != b_shape[0]:
        return ()
    k, n = b_shape
    return (n // k,) if n % k == 0 and 2 <= n // k <= MOST_PIECES else ()


def uses(program) -> bool:
    """Whether any MATMUL of ``program`` is computed in pieces of its columns."""
    return any(n.attrs.get("columns") for n in program.nodes)
