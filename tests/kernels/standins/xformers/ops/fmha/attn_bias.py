"""Stand-in for `xformers.ops.fmha.attn_bias`: the three masks attnspec's adapters use, with
`materialize` as xformers writes it (@115df95f): an additive bias, 0 where a query may look and
-inf where it may not."""

from __future__ import annotations

from dataclasses import dataclass

import torch


class AttentionBias:
    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        raise NotImplementedError


def _causal(shape, dtype, device, from_bottomright):
    num_queries, num_keys = shape[-2:]
    shift = num_keys - num_queries if from_bottomright else 0
    mask = torch.tril(torch.ones(shape, dtype=torch.float32, device=device), diagonal=shift)
    return torch.log(mask).to(dtype)


class LowerTriangularMask(AttentionBias):
    """Causal, aligned top-left: query i sees keys j <= i."""

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        return _causal(shape, dtype, device, False)


class LowerTriangularFromBottomRightMask(AttentionBias):
    """Causal, shifted so that the last query sees the last key."""

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        return _causal(shape, dtype, device, True)


@dataclass
class LocalAttentionFromBottomRightMask(AttentionBias):
    """q - window_left <= k + s <= q + window_right with s = num_queries - num_keys."""

    window_left: int
    window_right: int

    def __post_init__(self):
        if self.window_left < 0 or self.window_right < 0:
            raise ValueError("Invalid window value passed to `LocalAttentionFromBottomRightMask`")

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        num_queries, num_keys = shape[-2:]
        shift = num_keys - num_queries
        mask = torch.ones(shape, dtype=torch.float32, device=device)
        mask = torch.triu(mask, diagonal=shift - self.window_left)
        mask = torch.tril(mask, diagonal=shift + self.window_right)
        return torch.log(mask).to(dtype)
