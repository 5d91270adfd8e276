"""Correct: nanoGPT's CausalSelfAttention, a fused q/k/v projection and
`F.scaled_dot_product_attention(..., is_causal=True)`."""

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


def export_weights(module: CausalSelfAttention) -> dict[str, Tensor]:
    C = module.n_embd
    w, b = module.c_attn.weight, module.c_attn.bias
    return {
        "q_weight": w[:C], "k_weight": w[C:2 * C], "v_weight": w[2 * C:],
        "o_weight": module.c_proj.weight,
        "q_bias": b[:C], "k_bias": b[C:2 * C], "v_bias": b[2 * C:],
        "o_bias": module.c_proj.bias,
    }
