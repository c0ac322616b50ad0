"""Padding-free attention for packed batches without flash-attention (CPUs, or GPUs without it).

With padding-free packing, a batch is one long row of several conversations whose position ids
restart at 0. FlashAttention's varlen kernel attends within each conversation only. Plain SDPA
instead needs a dense block-diagonal mask over the whole row, so it pays for (sum of lengths)^2
scores, most of them masked: packing then runs slower than padding. `segment_sdpa` runs causal
SDPA on each conversation separately, which costs the sum of squared lengths, as varlen does.

Select it with `[model] attn_implementation = "segment_sdpa"`; cosmos-train picks it by itself for
packed text data when no varlen kernel was asked for.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "segment_sdpa"


def _segments(position_ids: torch.Tensor) -> list[tuple[int, int]]:
    """(start, end) of each packed sequence in one row, from where the position ids restart."""
    starts = (position_ids == 0).nonzero().flatten().tolist()
    if not starts or starts[0] != 0:
        starts = [0, *starts]
    return list(zip(starts, [*starts[1:], position_ids.shape[-1]], strict=True))


def segment_sdpa(
    module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs
):
    position_ids = kwargs.get("position_ids")
    packed = attention_mask is None and position_ids is not None and position_ids.dim() == 2
    if not packed or query.shape[2] != key.shape[2]:  # padded batches, or generation with a cache
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    rows = []
    for row in range(query.shape[0]):
        pieces = [
            F.scaled_dot_product_attention(
                query[row : row + 1, :, start:end],
                key[row : row + 1, :, start:end],
                value[row : row + 1, :, start:end],
                is_causal=True,
                scale=scaling,
                dropout_p=dropout if module.training else 0.0,
                enable_gqa=query.shape[1] != key.shape[1],
            )
            for start, end in _segments(position_ids[row])
        ]
        rows.append(torch.cat(pieces, dim=2))
    # Same layout as transformers' SDPA integration: (batch, seq, heads, head_dim).
    return torch.cat(rows, dim=0).transpose(1, 2).contiguous(), None


def _mask(*args, attention_mask=None, **kwargs):
    """No dense mask without padding (the kernel finds the sequences itself); SDPA's mask otherwise."""
    if attention_mask is None:
        return None
    return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


AttentionInterface.register(NAME, segment_sdpa)
AttentionMaskInterface.register(NAME, _mask)
