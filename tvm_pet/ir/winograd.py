"""Which convolutions have a Winograd form here (pure; the lowering is
:mod:`tvm_pet.relax.winograd`).

A CONV node whose attributes carry ``winograd=m`` computes the same function as without it, and
is lowered to Relax as Winograd's F(m×m, 3×3): ``(m + 2)² / (9 m²)`` of the direct form's
multiplications. The verifier, the interpreters and the exporters read it as the CONV it is;
only the lowering and the analytic cost see the attribute.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

#: The output tile sides the lowering offers: F(2×2, 3×3) and F(4×4, 3×3).
TILES = (2, 4)
#: The tile side the mutant generator offers (F(4×4, 3×3): tuned, it ran x1.11-x2.20 faster than
#: the direct convolution on a 2-core AVX-512 CPU, F(2×2) x0.82-x2.06:
#: ``benchmarks/results/winograd_forms.md``).
SEARCH_TILE = 4
#: The lowering transforms the input tiles by rows, then by columns (two grouped convolutions,
#: ``2 a`` multiplications an entry), not by ``B ⊗ B`` at once (``a²``): tuned at 32 trials per
#: task, the F(4×4) form ran x1.07-x1.34 faster by it in all seven draws (CSRNet's 512-channel
#: dilated 14×14 layer x1.12-x1.20 in three seeds, VGG's 512-channel 28×28 x1.07 and x1.15,
#: ResNet's 256-channel 14×14 x1.20 and x1.34; ``benchmarks/results/winograd_forms_separable*``).
SEPARABLE_INPUT = True
#: The lowering works on channels-last maps inside (``[n, h, w, c]``): its gathers, scatters and
#: the dilation's classes move whole channel vectors, and ``Bᵀ`` applies by matrix products.
CHANNELS_LAST = True
#: The two orders of the batched products the search offers (the attribute
#: ``winograd_products``): ``"tk"``, the tiles by the filters (``[a², T, C] x [a², C, K]``), and
#: ``"kt"``, the filters by the tiles (``[a², K, C] x [a², C, T]``, the tiles permuted to
#: ``[a², C, T]`` and the products back). They compute the same sums; MetaSchedule tunes them
#: differently, and neither order won on every shape (each tuned at 32 trials per task, timed
#: alone: the CSRNet back end's 512-channel products, 16 tiles, x1.20-x1.74 faster as ``"kt"``
#: in three seeds, its 512 -> 256 ones x0.40-x0.71; 64 tiles x1.30 and x0.77, 4 tiles x0.46
#: and x0.60, ResNet's 256-channel ones x1.04 and x0.47 in two;
#: ``benchmarks/results/product_forms*.md``), so the search measures both.
PRODUCTS = ("tk", "kt")
#: How summaries name a Winograd CONV (:attr:`tvm_pet.ir.node.Node.label`), by the order of its
#: products: the tuning plan reads a mutant's order back from these (:func:`order_of`).
LABELS = {"tk": "WinogradConv", "kt": "WinogradConvKT"}


def eligible(x_shape: Sequence[int], w_shape: Sequence[int], attrs: Mapping) -> bool:
    """Whether a CONV with these shapes and attributes has a Winograd form: 2-D, a 3×3 kernel,
    stride 1, no groups, equal dilations ``d`` on both axes, the map's sides and every pad
    multiples of ``d`` (a dilated convolution is regular on each of its ``d²`` classes of
    positions), and an output of at least one position.

    >>> conv = {"strides": (1, 1), "dilations": (2, 2), "pads": (2, 2, 2, 2), "groups": 1}
    >>> eligible((1, 8, 14, 14), (8, 8, 3, 3), conv), eligible((1, 8, 15, 15), (8, 8, 3, 3), conv)
    (True, False)
    """
    if len(x_shape) != 4 or tuple(w_shape[2:]) != (3, 3) or attrs["groups"] != 1:
        return False
    d = attrs["dilations"][0]
    return (tuple(attrs["strides"]) == (1, 1) and tuple(attrs["dilations"]) == (d, d)
            and all(s % d == 0 for s in x_shape[2:]) and all(p % d == 0 for p in attrs["pads"])
            and all(x_shape[2 + i] + attrs["pads"][i] + attrs["pads"][2 + i] > 2 * d
                    for i in range(2)))


def tiles(x_shape: Sequence[int], attrs: Mapping, m: int) -> int:
    """How many ``m × m`` output tiles the Winograd form computes: per image and class of
    positions (``d²`` of them), the output's sides rounded up to multiples of ``m``. Each tile
    costs ``(m + 2)² C K`` multiply-adds where the direct form spends ``9 m² C K``.

    >>> conv = {"strides": (1, 1), "dilations": (1, 1), "pads": (1, 1, 1, 1), "groups": 1}
    >>> tiles((1, 512, 28, 28), conv, 4), tiles((1, 512, 14, 14), {**conv, "dilations": (2, 2),
    ...                                                             "pads": (2, 2, 2, 2)}, 4)
    (49, 16)
    """
    n, _, h, w = x_shape
    d = attrs["dilations"][0]
    p = attrs["pads"]
    oh, ow = (h + p[0] + p[2]) // d - 2, (w + p[1] + p[3]) // d - 2
    return d * d * n * (-(-oh // m)) * (-(-ow // m))


def products(attrs: Mapping) -> str:
    """The order of a Winograd CONV's batched products (:data:`PRODUCTS`; ``"tk"`` unless the
    attributes say otherwise).

    >>> products({"winograd": 4}), products({"winograd": 4, "winograd_products": "kt"})
    ('tk', 'kt')
    """
    return attrs.get("winograd_products", PRODUCTS[0])


def order_of(labels: Sequence[str]) -> str:
    """The order of the products of the Winograd CONV among operators named ``labels`` (a
    mutant's, as summaries name them: :data:`LABELS`).

    >>> order_of(("Pad", "WinogradConvKT")), order_of(("WinogradConv", "Slice"))
    ('kt', 'tk')
    """
    return next((order for order in PRODUCTS[1:] if LABELS[order] in labels), PRODUCTS[0])


def uses(program) -> bool:
    """Whether any CONV of ``program`` is lowered by Winograd's algorithm."""
    return any(n.attrs.get("winograd") for n in program.nodes)
