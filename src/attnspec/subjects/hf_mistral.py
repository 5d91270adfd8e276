"""transformers' MistralAttention (eager path) with its rotary embedding and HF's own
sliding-window causal mask (`create_sliding_window_causal_mask`), built from a spec (protocol
v2): a window of W keys, grouped-query attention, rotate-half RoPE. The window lives in the mask
HF builds, which is where off-by-one windows have shipped. Needs `pip install attnspec[hf]`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ..reference.spec import AttentionSpec, RoPE

try:
    from transformers import MistralConfig
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
    from transformers.models.mistral.modeling_mistral import (
        MistralAttention,
        MistralRotaryEmbedding,
    )

    from ._hf import HFDecoderAttention, projections
    from ._hf import decode as decode  # the protocol's hooks, shared
    from ._hf import decode_padded as decode_padded
    from ._hf import padded as padded
    from ._hf import shifted as shifted
except ImportError as error:  # the TARGET loader turns this into a one-line exit-2 message
    raise ImportError("attnspec.subjects.hf_mistral needs transformers: "
                      "pip install 'attnspec[hf]'") from error

PROTOCOL = "2.1"  # VARIANTS "any" as revision 2.1 draws it (scaled RoPE, given ALiBi slopes)
# The rotary embedding computes cos and sin in float32 (as Llama's): float64 is not claimed.
DTYPES = (torch.float32, torch.bfloat16)
VARIANTS = {"n_kv_head": "any", "window": "any", "bias": [False], "positions": [RoPE()]}
# As hf_llama: the eager path lets NaN or inf padding reach real tokens (0 x NaN), and a query
# with no visible key attends to every key evenly.
PADDING_VALUES = "finite"
MASKED_ROWS = "finite"


def supports(spec: AttentionSpec) -> bool:
    """Rotate-half RoPE over the whole head, the default scale, and C % H == 0 (its config).

    Not a window of 1: attnspec's decode property found that transformers' sliding-window cache
    (DynamicSlidingWindowLayer.update, 5.24) keeps `states[:, :, -sliding_window + 1:]`, which
    for a window of 1 is `[-0:]`, every token: decoding then attends to all the past, and a
    chunk of more than one token fails on the mask's shape (docs/findings.md).
    """
    rope = spec.positions
    return (isinstance(rope, RoPE) and rope.fraction == 1.0 and not rope.interleaved
            and spec.scale is None and spec.softcap is None and spec.head_dim is None
            and not spec.bias and spec.window != 1)


class HFMistralAttention(HFDecoderAttention):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        assert isinstance(spec.positions, RoPE)
        self.config = MistralConfig(
            hidden_size=spec.n_embd, num_attention_heads=spec.n_head,
            num_key_value_heads=spec.G, head_dim=spec.D, sliding_window=spec.window,
            attention_dropout=0.0, max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": spec.positions.theta})
        self.config._attn_implementation = "eager"
        self.attn = MistralAttention(self.config, layer_idx=0)
        self.rotary = MistralRotaryEmbedding(self.config)
        # The window lives in the mask HF builds (a DynamicCache gets a sliding-window layer).
        self.make_mask = (create_causal_mask if spec.window is None
                          else create_sliding_window_causal_mask)


def build(spec: AttentionSpec) -> nn.Module:
    return HFMistralAttention(spec)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, HFMistralAttention)
    return projections(module.attn)
