"""transformers' GPT2Attention (eager path), with the causal mask built for it.

GPT2Attention applies no causal mask of its own on the eager path in recent transformers (the
model builds it), so this adapter passes the additive mask HF's own models would.
Needs `pip install attnspec[hf]`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ..reference.config import check_config

try:
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
except ImportError as error:  # the TARGET loader turns this into a one-line exit-2 message
    raise ImportError("attnspec.subjects.hf_gpt2 needs transformers: "
                      "pip install 'attnspec[hf]'") from error


class HFGPT2Attention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        check_config(n_embd, n_head)
        config = GPT2Config(n_embd=n_embd, n_head=n_head, attn_pdrop=0.0, resid_pdrop=0.0)
        config._attn_implementation = "eager"
        self.attn = GPT2Attention(config, layer_idx=0)

    def forward(self, x: Tensor) -> Tensor:
        T = x.size(1)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        mask = torch.zeros(T, T, dtype=x.dtype, device=x.device)
        mask = mask.masked_fill(future, torch.finfo(x.dtype).min)[None, None]
        out = self.attn(x, attention_mask=mask)
        result: Tensor = out[0] if isinstance(out, tuple) else out
        return result


def build(n_embd: int, n_head: int) -> nn.Module:
    return HFGPT2Attention(n_embd, n_head)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, HFGPT2Attention)
    attn = module.attn
    C = attn.embed_dim
    # HF's Conv1D stores (in, out); the protocol wants nn.Linear's (out, in).
    w, b = attn.c_attn.weight, attn.c_attn.bias
    return {"q_weight": w[:, :C].T, "k_weight": w[:, C:2 * C].T, "v_weight": w[:, 2 * C:].T,
            "o_weight": attn.c_proj.weight.T, "q_bias": b[:C], "k_bias": b[C:2 * C],
            "v_bias": b[2 * C:], "o_bias": attn.c_proj.bias}
