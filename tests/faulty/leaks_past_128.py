"""Causal up to T = 128; longer sequences take a "long" path that forgets the mask (a tiled
kernel whose second block of 128 keys is never masked). Only --max-seq above 128 can see it."""

import torch
import torch.nn.functional as F
from _base import export_weights, reference_build
from torch import Tensor, nn

__all__ = ["build", "export_weights"]

BLOCK = 128


class LongPathUnmasked(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)
        self.n_head = n_head

    def forward(self, x: Tensor) -> Tensor:
        if x.size(1) <= BLOCK:
            return self.inner(x)  # type: ignore[no-any-return]
        B, T, C = x.shape
        H = self.n_head
        q, k, v = self.inner.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        allowed[:, BLOCK:] = True  # the bug: keys past the first block are never masked
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return self.inner.c_proj(y.transpose(1, 2).reshape(B, T, C))  # type: ignore[no-any-return]


def build(n_embd: int, n_head: int) -> nn.Module:
    return LongPathUnmasked(n_embd, n_head)
