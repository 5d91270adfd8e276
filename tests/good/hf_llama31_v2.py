"""transformers' LlamaAttention (eager) with scaled RoPE: Llama-3.1's `llama3` scaling, linear
scaling and YaRN, from its own rope_parameters (ROPE_INIT_FUNCTIONS), with its DynamicCache,
padding mask and position ids through attnspec's HF hooks. A model with RoPE scaling, verified
with the oracle on: every property must pass it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn
from transformers import LlamaConfig
from transformers.masking_utils import create_causal_mask
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

from attnspec import AttentionSpec, LinearScaling, Llama3Scaling, RoPE, YaRN
from attnspec.subjects._hf import HFDecoderAttention, decode, decode_padded, padded, projections
from attnspec.subjects._hf import shifted as shifted

EXPECTED: frozenset[str] = frozenset()
PROTOCOL = 2
DTYPES = (torch.float32, torch.bfloat16)  # its rotary embedding computes in float32
VARIANTS = {"n_kv_head": "any", "bias": "any", "positions": [
    RoPE(theta=500000.0, scaling=Llama3Scaling()),
    RoPE(theta=500000.0, scaling=Llama3Scaling(32.0, 1.0, 4.0, 16)),  # Llama-3.2's, short
    RoPE(scaling=LinearScaling(4.0)), RoPE(scaling=YaRN(4.0, 16))]}
PADDING_VALUES = "finite"  # HF's eager path: 0 x NaN in the padding (docs/findings.md)
MASKED_ROWS = "finite"  # a query that sees no key attends to every key evenly


def supports(spec: AttentionSpec) -> bool:
    rope = spec.positions
    return (isinstance(rope, RoPE) and rope.fraction == 1.0 and not rope.interleaved
            and spec.window is None and spec.scale is None and spec.softcap is None
            and spec.n_embd % spec.n_head == 0 and spec.qk_norm is None and not spec.sinks)


def rope_parameters(rope: RoPE) -> dict[str, Any]:
    """transformers' rope_parameters for attnspec's RoPE and its scaling."""
    out: dict[str, Any] = {"rope_type": "default", "rope_theta": rope.theta}
    scaling = rope.scaling
    if isinstance(scaling, Llama3Scaling):
        out |= {"rope_type": "llama3", "factor": scaling.factor,
                "low_freq_factor": scaling.low_freq_factor,
                "high_freq_factor": scaling.high_freq_factor,
                "original_max_position_embeddings": scaling.original_max_position}
    elif isinstance(scaling, LinearScaling):
        out |= {"rope_type": "linear", "factor": scaling.factor}
    elif isinstance(scaling, YaRN):
        out |= {"rope_type": "yarn", "factor": scaling.factor, "beta_fast": scaling.beta_fast,
                "beta_slow": scaling.beta_slow,
                "original_max_position_embeddings": scaling.original_max_position}
    return out


class HFLlama31Attention(HFDecoderAttention):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        assert isinstance(spec.positions, RoPE)
        self.config = LlamaConfig(
            hidden_size=spec.n_embd, num_attention_heads=spec.n_head,
            num_key_value_heads=spec.G, head_dim=spec.D, attention_bias=spec.bias,
            attention_dropout=0.0, max_position_embeddings=4096,
            rope_parameters=rope_parameters(spec.positions))
        self.config._attn_implementation = "eager"
        self.attn = LlamaAttention(self.config, layer_idx=0)
        self.rotary = LlamaRotaryEmbedding(self.config)
        self.make_mask = create_causal_mask


def build(spec: AttentionSpec) -> nn.Module:
    return HFLlama31Attention(spec)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, HFLlama31Attention)
    return projections(module.attn)


__all__ = ["DTYPES", "EXPECTED", "MASKED_ROWS", "PADDING_VALUES", "PROTOCOL", "VARIANTS",
           "build", "decode", "decode_padded", "export_weights", "padded", "shifted",
           "supports"]
