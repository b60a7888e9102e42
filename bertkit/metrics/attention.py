"""Where a model's attention heads look: the mean attention weight on each offset around a query
(offset_mass), and the most of it any head puts on one neighbouring token (neighbour_attention). torch
loads when they are called.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


def offset_mass(attentions: Iterable[Tensor], max_offset: int = 2) -> Tensor:
    """(layers, heads, 2 * max_offset + 1) tensor: the mean attention weight from a query at i to the key
    at i + d, d = -max_offset..max_offset, over rows and over the queries that have such a key.

    `attentions` are the model's output_attentions, (B, heads, S, S) per layer, of rows without padding.
    Uniform attention gives 1/S at every offset; a head that has learned "the previous token" gives
    nearly 1 at d = -1. (Each offset averages over its own queries, so a head's sum over offsets can
    pass 1 slightly.)"""
    import torch

    per_layer = []
    for probs in attentions:  # (B, heads, S, S)
        per_layer.append(
            torch.stack(
                [
                    torch.diagonal(probs.float(), offset=d, dim1=-2, dim2=-1).mean(dim=(0, 2))
                    for d in range(-max_offset, max_offset + 1)
                ],
                dim=-1,
            )
        )  # (heads, 2k+1)
    return torch.stack(per_layer)


def neighbour_attention(attentions: Iterable[Tensor], max_offset: int = 2) -> float:
    """The largest share of its attention any head puts on one neighbouring offset (+-1..+-max_offset):
    about 1/S for uniform heads, 0.99 for the previous-token head of a real BERT."""
    mass = offset_mass(attentions, max_offset)
    neighbours = [d for d in range(2 * max_offset + 1) if d != max_offset]  # every offset but 0
    return float(mass[..., neighbours].max())
