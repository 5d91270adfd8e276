"""A typical fused implementation: one QKV projection, torch's SDPA with is_causal=True."""

from __future__ import annotations

from collections.abc import Mapping

import torch.nn.functional as F
from torch import Tensor, nn

from ..reference.config import check_config


class SDPAAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        check_config(n_embd, n_head)
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.out = nn.Linear(n_embd, n_embd)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: Tensor = self.out(y.transpose(1, 2).reshape(B, T, C))
        return out


def build(n_embd: int, n_head: int) -> nn.Module:
    return SDPAAttention(n_embd, n_head)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, SDPAAttention)
    C = module.out.in_features
    w, b = module.qkv.weight, module.qkv.bias
    return {"q_weight": w[:C], "k_weight": w[C:2 * C], "v_weight": w[2 * C:],
            "o_weight": module.out.weight, "q_bias": b[:C], "k_bias": b[C:2 * C],
            "v_bias": b[2 * C:], "o_bias": module.out.bias}
