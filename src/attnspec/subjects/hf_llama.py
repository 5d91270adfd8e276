"""transformers' LlamaAttention (eager path) with its rotary embedding and causal mask, built from
a spec (protocol v2): grouped-query attention, rotate-half RoPE with any theta, any head_dim,
biases or none; decoding against its DynamicCache, and padded batches through its own padding
mask and position ids. Needs `pip install attnspec[hf]`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ..reference.spec import AttentionSpec, RoPE

try:
    from transformers import LlamaConfig
    from transformers.masking_utils import create_causal_mask
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

    from ._hf import HFDecoderAttention, projections
    from ._hf import decode as decode  # the protocol's hooks, shared
    from ._hf import decode_padded as decode_padded
    from ._hf import padded as padded
    from ._hf import shifted as shifted
    from ._hf_families import rope_parameters
except ImportError as error:  # the TARGET loader turns this into a one-line exit-2 message
    raise ImportError("attnspec.subjects.hf_llama needs transformers: "
                      "pip install 'attnspec[hf]'") from error

PROTOCOL = "2.1"  # VARIANTS "any" as revision 2.1 draws it (scaled RoPE, given ALiBi slopes)
# LlamaRotaryEmbedding computes cos and sin in float32 whatever the input's dtype, so its float64
# results are float32-accurate only (attnspec's oracle says so): float64 is not claimed.
DTYPES = (torch.float32, torch.bfloat16)
VARIANTS = {"n_kv_head": "any", "head_dim": "any", "bias": "any",
            "positions": [RoPE(), RoPE(theta=500000.0)]}
# The eager path adds a large negative number to padded keys' scores, then multiplies the
# weights into the values: a NaN or inf held in the padding reaches real tokens (0 x NaN).
# generate() feeds pad-token embeddings there, which are finite: that is what it guarantees.
PADDING_VALUES = "finite"
# A query that sees no key (left padding) gets the same score for every key, so it attends to
# all of them evenly: finite, but not zero.
MASKED_ROWS = "finite"


def supports(spec: AttentionSpec) -> bool:
    """Llama's rotary embedding (rotate-half, whole head), the default scale, and a width its
    config accepts (LlamaConfig requires C % H == 0 even with its own head_dim)."""
    rope = spec.positions
    return (isinstance(rope, RoPE) and rope.fraction == 1.0 and not rope.interleaved
            and spec.window is None and spec.scale is None and spec.softcap is None
            and spec.n_embd % spec.n_head == 0)


class HFLlamaAttention(HFDecoderAttention):
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
    return HFLlamaAttention(spec)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, HFLlamaAttention)
    return projections(module.attn)
