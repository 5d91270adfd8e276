"""transformers' Qwen3Attention (eager): per-head q/k RMSNorm with its own weights (QKNorm),
rotate-half RoPE, GQA, and its DynamicCache, padding mask and position ids through attnspec's
HF hooks. Its norm weights are drawn near 1 (not HF's ones), so a misapplied norm shows. A
model with q/k norms, verified with the oracle on: every property must pass it."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn
from transformers import Qwen3Config
from transformers.masking_utils import create_causal_mask
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding

from attnspec import AttentionSpec, QKNorm, RoPE
from attnspec.subjects._hf import HFDecoderAttention, decode, decode_padded, padded, projections
from attnspec.subjects._hf import shifted as shifted

EXPECTED: frozenset[str] = frozenset()
PROTOCOL = "2.1"  # VARIANTS "any" as revision 2.1 draws it (scaled RoPE, given ALiBi slopes)
DTYPES = (torch.float32, torch.bfloat16)  # its rotary embedding computes in float32
VARIANTS = {"n_kv_head": "any", "head_dim": "any", "bias": "any",
            "positions": [RoPE(), RoPE(theta=1000000.0)], "qk_norm": [QKNorm()]}
PADDING_VALUES = "finite"  # HF's eager path: 0 x NaN in the padding (docs/findings.md)
MASKED_ROWS = "finite"  # a query that sees no key attends to every key evenly


def supports(spec: AttentionSpec) -> bool:
    rope = spec.positions
    return (isinstance(rope, RoPE) and rope.fraction == 1.0 and not rope.interleaved
            and rope.scaling is None and spec.window is None and spec.scale is None
            and spec.softcap is None and spec.n_embd % spec.n_head == 0 and not spec.sinks)


class HFQwen3Attention(HFDecoderAttention):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        assert isinstance(spec.positions, RoPE) and spec.qk_norm is not None
        self.config = Qwen3Config(
            hidden_size=spec.n_embd, num_attention_heads=spec.n_head,
            num_key_value_heads=spec.G, head_dim=spec.D, attention_bias=spec.bias,
            attention_dropout=0.0, rms_norm_eps=spec.qk_norm.eps, max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": spec.positions.theta})
        self.config._attn_implementation = "eager"
        self.attn = Qwen3Attention(self.config, layer_idx=0)
        with torch.no_grad():  # trained norms are not ones
            for norm in (self.attn.q_norm, self.attn.k_norm):
                norm.weight.copy_(1 + 0.3 * (torch.rand(norm.weight.shape) * 2 - 1))
        self.rotary = Qwen3RotaryEmbedding(self.config)
        self.make_mask = create_causal_mask


def build(spec: AttentionSpec) -> nn.Module:
    return HFQwen3Attention(spec)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, HFQwen3Attention)
    return {**projections(module.attn), "q_norm_weight": module.attn.q_norm.weight,
            "k_norm_weight": module.attn.k_norm.weight}


__all__ = ["DTYPES", "EXPECTED", "MASKED_ROWS", "PADDING_VALUES", "PROTOCOL", "VARIANTS",
           "build", "decode", "decode_padded", "export_weights", "padded", "shifted",
           "supports"]
