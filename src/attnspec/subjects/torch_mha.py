"""torch.nn.MultiheadAttention as causal self-attention (query = key = value = x)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ..reference.config import check_config


class CausalMHA(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        check_config(n_embd, n_head)
        self.mha = nn.MultiheadAttention(n_embd, n_head, bias=True, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        T = x.size(1)
        # True marks a key the query may NOT see: everything above the diagonal.
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        out: Tensor = self.mha(x, x, x, attn_mask=future, need_weights=False)[0]
        return out


def build(n_embd: int, n_head: int) -> nn.Module:
    return CausalMHA(n_embd, n_head)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, CausalMHA)
    mha = module.mha
    C = mha.embed_dim
    w, b = mha.in_proj_weight, mha.in_proj_bias
    assert w is not None and b is not None and mha.out_proj.bias is not None
    return {"q_weight": w[:C], "k_weight": w[C:2 * C], "v_weight": w[2 * C:],
            "o_weight": mha.out_proj.weight, "q_bias": b[:C], "k_bias": b[C:2 * C],
            "v_bias": b[2 * C:], "o_bias": mha.out_proj.bias}
