"""Compat subject: written once against the published protocol named below and never edited
afterwards (tests/compat/README.md).

Written against: attnspec 0.1.0, protocol v1 as published at the end of 2026-11-29 (README.md
'Checking your implementation') (commit 7f954bfedab285893f8ce18aa41e614e2c57a25b). Copied from:
tests/good/nanogpt_sdpa.py @ 7f954bf; changed: export_weights removed (the v1 protocol made it
optional: without it oracle and oracle_grad skip), nothing else.

The original docstring:

    Correct: nanoGPT's CausalSelfAttention, a fused q/k/v projection and
    `F.scaled_dot_product_attention(..., is_causal=True)`.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

EXPECTED: frozenset[str] = frozenset()


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        if n_embd < 1 or n_head < 1:
            raise ValueError(f"n_embd={n_embd} and n_head={n_head} must be >= 1")
        assert n_embd % n_head == 0, f"n_embd={n_embd} is not divisible by n_head={n_head}"
        self.n_embd = n_embd
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


def build(n_embd: int, n_head: int) -> CausalSelfAttention:
    return CausalSelfAttention(n_embd, n_head)
