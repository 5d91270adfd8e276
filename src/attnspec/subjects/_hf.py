"""What the transformers decoder-layer adapters (hf_llama, hf_mistral) share: one run of the
attention layer with HF's own mask and rotary embedding, used by forward, decode (against a
DynamicCache) and padded (HF's 2-D attention mask and position ids). Needs transformers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from transformers import DynamicCache

from ._float32_buffers import Float32Buffers


class HFDecoderAttention(Float32Buffers):
    """Subclasses set `config`, `attn` (the layer's attention), `rotary` and `make_mask` (HF's
    create_causal_mask or its sliding-window twin). The rotary frequencies stay float32 through
    .to(dtype), as transformers loads them."""

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
    if layers["q"].bias is not None:
        out |= {f"{n}_bias": layer.bias for n, layer in layers.items()}
    return out


def decode(module: nn.Module, x: Tensor, cache: object, offset: int) -> tuple[Tensor, object]:
    assert isinstance(module, HFDecoderAttention)
    return module.decode(x, cache, offset)


def decode_padded(module: nn.Module, x: Tensor, key_mask: Tensor, cache: object, offset: int,
                  ) -> tuple[Tensor, object]:
    assert isinstance(module, HFDecoderAttention)
    return module.decode_padded(x, key_mask, cache, offset)


def shifted(module: nn.Module, x: Tensor, offset: int) -> Tensor:
    assert isinstance(module, HFDecoderAttention)
    return module.shifted(x, offset)


def padded(module: nn.Module, x: Tensor, key_mask: Tensor) -> Tensor:
    assert isinstance(module, HFDecoderAttention)
    return module.padded(x, key_mask)
