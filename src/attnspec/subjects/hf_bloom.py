"""transformers' BloomAttention (ALiBi) with BLOOM's own ALiBi tensor and causal mask, built from
a spec (protocol v2). BLOOM adds slope_h * j to the scores (a constant per row away from the
spec's -slope_h * (i - j), which softmax cannot see). Needs `pip install attnspec[hf]`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ..reference.spec import ALiBi, AttentionSpec

try:
    from transformers import BloomConfig
    from transformers.models.bloom.modeling_bloom import BloomAttention, build_alibi_tensor
except ImportError as error:  # the TARGET loader turns this into a one-line exit-2 message
    raise ImportError("attnspec.subjects.hf_bloom needs transformers: "
                      "pip install 'attnspec[hf]'") from error

PROTOCOL = "2.1"  # VARIANTS "any" as revision 2.1 draws it (scaled RoPE, given ALiBi slopes)
# BLOOM takes its softmax in float32 whatever the input's dtype: float64 is not claimed.
DTYPES = (torch.float32, torch.bfloat16)
VARIANTS = {"positions": [ALiBi()]}


class HFBloomAttention(nn.Module):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        config = BloomConfig(hidden_size=spec.n_embd, n_head=spec.n_head, attention_dropout=0.0,
                             hidden_dropout=0.0)
        config._attn_implementation = "eager"
        self.n_head = spec.n_head
        self.attn = BloomAttention(config, layer_idx=0)

    def forward(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        alibi = build_alibi_tensor(torch.ones(B, T, device=x.device), self.n_head, x.dtype)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        mask = torch.zeros(T, T, dtype=x.dtype, device=x.device).masked_fill(
            future, torch.finfo(x.dtype).min)[None, None]
        # BloomAttention adds its residual to the output: none here, the output alone.
        out = self.attn(x, torch.zeros_like(x), alibi, mask)
        result: Tensor = out[0] if isinstance(out, tuple) else out
        return result


def build(spec: AttentionSpec) -> nn.Module:
    return HFBloomAttention(spec)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, HFBloomAttention)
    attn, H = module.attn, module.n_head
    C = attn.hidden_size
    # BLOOM's fused rows are per head: (H, 3, D) for q, k, v.
    w = attn.query_key_value.weight.view(H, 3, C // H, C)
    b = attn.query_key_value.bias.view(H, 3, C // H)
    return {"q_weight": w[:, 0].reshape(C, C), "k_weight": w[:, 1].reshape(C, C),
            "v_weight": w[:, 2].reshape(C, C), "o_weight": attn.dense.weight,
            "q_bias": b[:, 0].reshape(C), "k_bias": b[:, 1].reshape(C),
            "v_bias": b[:, 2].reshape(C), "o_bias": attn.dense.bias}
