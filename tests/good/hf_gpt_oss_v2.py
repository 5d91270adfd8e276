"""transformers' GptOssAttention (eager): learned attention sinks (one exported logit per head),
GQA, rotate-half RoPE, biases, and its DynamicCache, padding mask and position ids through
attnspec's HF hooks. Its sinks are drawn of the scores' size (HF initialises them to zeros), so
some take most of a row. A model with sinks, verified with the oracle on: every property must
pass it."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn
from transformers import GptOssConfig
from transformers.masking_utils import create_causal_mask
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention, GptOssRotaryEmbedding

from attnspec import AttentionSpec, RoPE
from attnspec.subjects._hf import HFDecoderAttention, decode, decode_padded, padded, projections
from attnspec.subjects._hf import shifted as shifted

EXPECTED: frozenset[str] = frozenset()
PROTOCOL = "2.1"  # VARIANTS "any" as revision 2.1 draws it (scaled RoPE, given ALiBi slopes)
DTYPES = (torch.float32, torch.bfloat16)  # its rotary embedding computes in float32
VARIANTS = {"n_kv_head": "any", "head_dim": "any", "positions": [RoPE(theta=150000.0)],
            "sinks": [True]}
PADDING_VALUES = "finite"  # HF's eager path: 0 x NaN in the padding (docs/findings.md)
MASKED_ROWS = "finite"  # a query that sees no key attends to every key and the sink evenly


def supports(spec: AttentionSpec) -> bool:
    rope = spec.positions
    return (isinstance(rope, RoPE) and rope.fraction == 1.0 and not rope.interleaved
            and rope.scaling is None and spec.window is None and spec.scale is None
            and spec.softcap is None and spec.n_embd % spec.n_head == 0 and spec.bias
            and spec.qk_norm is None and spec.sinks)


class HFGptOssAttention(HFDecoderAttention):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        assert isinstance(spec.positions, RoPE)
        self.config = GptOssConfig(
            hidden_size=spec.n_embd, num_attention_heads=spec.n_head,
            num_key_value_heads=spec.G, head_dim=spec.D, attention_bias=True,
            attention_dropout=0.0, num_hidden_layers=1, layer_types=["full_attention"],
            max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": spec.positions.theta})
        self.config._attn_implementation = "eager"
        self.attn = GptOssAttention(self.config, layer_idx=0)
        with torch.no_grad():  # trained sinks are not zeros
            self.attn.sinks.copy_(2 * torch.randn(spec.n_head))
        self.rotary = GptOssRotaryEmbedding(self.config)
        self.make_mask = create_causal_mask


def build(spec: AttentionSpec) -> nn.Module:
    return HFGptOssAttention(spec)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, HFGptOssAttention)
    return {**projections(module.attn), "sinks": module.attn.sinks}


__all__ = ["DTYPES", "EXPECTED", "MASKED_ROWS", "PADDING_VALUES", "PROTOCOL", "VARIANTS",
           "build", "decode", "decode_padded", "export_weights", "padded", "shifted",
           "supports"]
