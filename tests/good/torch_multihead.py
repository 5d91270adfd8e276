"""Correct: `torch.nn.MultiheadAttention(batch_first=True)` used as self-attention with a boolean
causal `attn_mask` (True = not allowed)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

EXPECTED: frozenset[str] = frozenset()


class TorchMultihead(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        if n_embd < 1 or n_head < 1:
            raise ValueError(f"n_embd={n_embd} and n_head={n_head} must be >= 1")
        self.n_embd = n_embd
        self.mha = nn.MultiheadAttention(n_embd, n_head, bias=True, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        T = x.size(1)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(diagonal=1)
        y, _ = self.mha(x, x, x, attn_mask=future, need_weights=False)
        return y


def build(n_embd: int, n_head: int) -> TorchMultihead:
    return TorchMultihead(n_embd, n_head)  # MultiheadAttention rejects n_embd % n_head != 0


def export_weights(module: TorchMultihead) -> dict[str, Tensor]:
    mha, C = module.mha, module.n_embd
    w, b = mha.in_proj_weight, mha.in_proj_bias
    return {
        "q_weight": w[:C], "k_weight": w[C:2 * C], "v_weight": w[2 * C:],
        "o_weight": mha.out_proj.weight,
        "q_bias": b[:C], "k_bias": b[C:2 * C], "v_bias": b[2 * C:],
        "o_bias": mha.out_proj.bias,
    }
