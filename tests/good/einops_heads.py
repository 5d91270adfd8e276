"""Correct: heads split and merged with `einops.rearrange`, scores and attend written as einsums."""

from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor, nn

EXPECTED: frozenset[str] = frozenset()


class EinopsAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        if n_embd < 1 or n_head < 1 or n_embd % n_head:
            raise ValueError(f"n_head={n_head} must divide n_embd={n_embd} (both >= 1)")
        self.n_head = n_head
        self.to_qkv = nn.Linear(n_embd, 3 * n_embd)
        self.to_out = nn.Linear(n_embd, n_embd)

    def forward(self, x: Tensor) -> Tensor:
        T = x.size(1)
        q, k, v = rearrange(self.to_qkv(x), "b t (three h d) -> three b h t d", three=3,
                            h=self.n_head)
        scores = torch.einsum("bhid,bhjd->bhij", q, k) * q.size(-1) ** -0.5
        allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        y = torch.einsum("bhij,bhjd->bhid", weights, v)
        return self.to_out(rearrange(y, "b h t d -> b t (h d)"))


def build(n_embd: int, n_head: int) -> EinopsAttention:
    return EinopsAttention(n_embd, n_head)


def export_weights(module: EinopsAttention) -> dict[str, Tensor]:
    w, b = module.to_qkv.weight.chunk(3), module.to_qkv.bias.chunk(3)
    return {
        "q_weight": w[0], "k_weight": w[1], "v_weight": w[2], "o_weight": module.to_out.weight,
        "q_bias": b[0], "k_bias": b[1], "v_bias": b[2], "o_bias": module.to_out.bias,
    }
