"""Compat subject: written once against the published protocol named below and never
edited afterwards (tests/compat/README.md).

Written against: protocol v2 as published at the end of 2026-12-01 (docs/design.md section 3
and README.md at that commit) (commit 9e645bb3d1a0ef61416548d4afe2f4165b3595dc).
Copied from: src/attnspec/subjects/hf_llama.py @ 9e645bb with the helpers it imported from
src/attnspec/subjects/_hf.py @ 9e645bb (HFDecoderAttention, projections and the hooks)
inlined; changed: LlamaConfig/LlamaAttention/LlamaRotaryEmbedding -> transformers' Qwen2
classes; VARIANTS without "bias" (Qwen2's q, k and v always have biases, its o_proj has none,
so the spec keeps the default bias=True); projections() exports the biases the layer has (q, k,
v: no o_bias); `from attnspec import ...` instead of the package-relative import. No real
Qwen2 wrapper existed in history on 2026-12-01; this is the wrapper that protocol allowed:
design.md @ 9e645bb line 69-71 ("plus optional q_bias ... o_bias") and line 120 ("biases to
match"), the reference reading a missing bias as none (weights.get("o_bias")). Needs
transformers (tested with 5.24.0).

The original docstring (hf_llama.py):

    transformers' LlamaAttention (eager path) with its rotary embedding and causal mask, built
    from a spec (protocol v2): grouped-query attention, rotate-half RoPE with any theta, any
    head_dim, biases or none; decoding against its DynamicCache, and padded batches through its
    own padding mask and position ids. Needs `pip install attnspec[hf]`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from transformers import DynamicCache, Qwen2Config
from transformers.masking_utils import create_causal_mask
from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention, Qwen2RotaryEmbedding

from attnspec import AttentionSpec, RoPE


# ---- inlined from src/attnspec/subjects/_hf.py @ 9e645bb ----
class HFDecoderAttention(nn.Module):
    """Subclasses set `config`, `attn` (the layer's attention), `rotary` and `make_mask` (HF's
    create_causal_mask or its sliding-window twin)."""

    config: Any
    attn: nn.Module
    rotary: nn.Module
    make_mask: Callable[..., Any]

    def _run(self, x: Tensor, positions: Tensor, attention_mask: Tensor | None,
             cache: DynamicCache | None) -> Tensor:
        mask = self.make_mask(config=self.config, inputs_embeds=x,
                              attention_mask=attention_mask, cache=cache,
                              position_ids=positions)
        out = self.attn(x, position_embeddings=self.rotary(x, positions), attention_mask=mask,
                        cache=cache)
        result: Tensor = out[0] if isinstance(out, tuple) else out
        return result

    def forward(self, x: Tensor) -> Tensor:
        return self._run(x, torch.arange(x.size(1), device=x.device)[None], None, None)

    def decode(self, x: Tensor, cache: DynamicCache | None, offset: int,
               ) -> tuple[Tensor, DynamicCache]:
        """Tokens at offset.. against the DynamicCache, as generate() runs the layer."""
        cache = DynamicCache(config=self.config) if cache is None else cache
        positions = torch.arange(offset, offset + x.size(1), device=x.device)[None]
        return self._run(x, positions, None, cache), cache

    def decode_padded(self, x: Tensor, key_mask: Tensor, cache: DynamicCache | None,
                      offset: int) -> tuple[Tensor, DynamicCache]:
        """A left-padded batch decoded as generate() does: the 2-D attention mask of every
        token so far, and position ids counting each row's real tokens."""
        cache = DynamicCache(config=self.config) if cache is None else cache
        attention_mask = key_mask.to(torch.long)
        positions = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
        return self._run(x, positions[:, offset:offset + x.size(1)], attention_mask, cache), cache

    def shifted(self, x: Tensor, offset: int) -> Tensor:
        """x at positions offset.. with no cache: HF's position ids, as a continued sequence
        whose earlier tokens are out of sight."""
        positions = torch.arange(offset, offset + x.size(1), device=x.device)[None]
        return self._run(x, positions, None, None)

    def padded(self, x: Tensor, key_mask: Tensor) -> Tensor:
        """A padded batch as generate() prepares it: the 2-D attention mask, and position ids
        counting real tokens (padding gets 1, as transformers does)."""
        attention_mask = key_mask.to(torch.long)
        positions = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
        return self._run(x, positions, attention_mask, None)


def projections(attn: nn.Module) -> Mapping[str, Tensor]:
    """q/k/v/o_proj weights (and biases, where the layer has them) in the protocol's names."""
    layers: dict[str, Any] = {n: getattr(attn, f"{n}_proj") for n in "qkvo"}
    out = {f"{n}_weight": layer.weight for n, layer in layers.items()}
    # Qwen2: q, k and v have biases, o has none; each bias the layer has is exported.
    out |= {f"{n}_bias": layer.bias for n, layer in layers.items() if layer.bias is not None}
    return out


def decode(module: nn.Module, x: Tensor, cache: object, offset: int) -> tuple[Tensor, object]:
    assert isinstance(module, HFDecoderAttention)
    return module.decode(x, cache, offset)  # type: ignore[arg-type]


def decode_padded(module: nn.Module, x: Tensor, key_mask: Tensor, cache: object, offset: int,
                  ) -> tuple[Tensor, object]:
    assert isinstance(module, HFDecoderAttention)
    return module.decode_padded(x, key_mask, cache, offset)  # type: ignore[arg-type]


def padded(module: nn.Module, x: Tensor, key_mask: Tensor) -> Tensor:
    assert isinstance(module, HFDecoderAttention)
    return module.padded(x, key_mask)


def shifted(module: nn.Module, x: Tensor, offset: int) -> Tensor:
    assert isinstance(module, HFDecoderAttention)
    return module.shifted(x, offset)


# ---- the subject (hf_llama.py @ 9e645bb, on Qwen2's layer) ----
PROTOCOL = 2
# Qwen2RotaryEmbedding computes cos and sin in float32 whatever the input's dtype, so its float64
# results are float32-accurate only (attnspec's oracle says so): float64 is not claimed.
DTYPES = (torch.float32, torch.bfloat16)
VARIANTS = {"n_kv_head": "any", "head_dim": "any",
            "positions": [RoPE(), RoPE(theta=500000.0)]}
# The eager path adds a large negative number to padded keys' scores, then multiplies the
# weights into the values: a NaN or inf held in the padding reaches real tokens (0 x NaN).
# generate() feeds pad-token embeddings there, which are finite: that is what it guarantees.
PADDING_VALUES = "finite"
# A query that sees no key (left padding) gets the same score for every key, so it attends to
# all of them evenly: finite, but not zero.
MASKED_ROWS = "finite"


def supports(spec: AttentionSpec) -> bool:
    """Qwen2's rotary embedding (rotate-half, whole head), the default scale, and a width its
    config accepts (the config requires C % H == 0 even with its own head_dim)."""
    rope = spec.positions
    return (isinstance(rope, RoPE) and rope.fraction == 1.0 and not rope.interleaved
            and spec.window is None and spec.scale is None and spec.softcap is None
            and spec.n_embd % spec.n_head == 0)


class HFQwen2Attention(HFDecoderAttention):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        assert isinstance(spec.positions, RoPE)
        self.config = Qwen2Config(
            hidden_size=spec.n_embd, num_attention_heads=spec.n_head,
            num_key_value_heads=spec.G, head_dim=spec.D,
            attention_dropout=0.0, max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": spec.positions.theta})
        self.config._attn_implementation = "eager"
        self.attn = Qwen2Attention(self.config, layer_idx=0)
        self.rotary = Qwen2RotaryEmbedding(self.config)
        self.make_mask = create_causal_mask


def build(spec: AttentionSpec) -> nn.Module:
    return HFQwen2Attention(spec)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, HFQwen2Attention)
    return projections(module.attn)
