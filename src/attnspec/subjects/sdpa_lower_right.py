"""torch's SDPA with an explicit bottom-right causal mask (`torch.nn.attention.bias.
causal_lower_right`): queries fewer than keys, a key/value cache for decoding, and padded
batches through a boolean key mask, built from a spec (protocol v2): grouped-query attention,
any scale, biases or none."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention.bias import causal_lower_right

from ..reference.spec import AttentionSpec

PROTOCOL = "2.1"  # VARIANTS "any" as revision 2.1 draws it (scaled RoPE, given ALiBi slopes)
VARIANTS = {"n_kv_head": "any", "scale": "any", "bias": "any"}
CORNER = "bottom_right"
MASKED_ROWS = "zero"  # SDPA's math path gives a query with no visible key zero weights

KVCache = tuple[Tensor, Tensor]


def _lower_right(n_queries: int, n_keys: int) -> Any:
    with warnings.catch_warnings():
        # It warns of NaN rows when Tq > Tk; causal_corner checks that they come out finite.
        warnings.simplefilter("ignore", UserWarning)
        return causal_lower_right(n_queries, n_keys)


class SDPALowerRight(nn.Module):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        self.spec = spec
        C, H, G, D = spec.n_embd, spec.n_head, spec.G, spec.D
        self.q = nn.Linear(C, H * D, bias=spec.bias)
        self.k = nn.Linear(C, G * D, bias=spec.bias)
        self.v = nn.Linear(C, G * D, bias=spec.bias)
        self.o = nn.Linear(H * D, C, bias=spec.bias)

    def _heads(self, x: Tensor, proj: nn.Linear, n: int) -> Tensor:
        B, T, _ = x.shape
        heads: Tensor = proj(x).view(B, T, n, self.spec.D).transpose(1, 2)
        return heads

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Any) -> Tensor:
        B, H, Tq, D = q.shape
        repeat = H // k.size(1)
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.spec.scale)
        out: Tensor = self.o(y.transpose(1, 2).reshape(B, Tq, H * D))
        return out

    def forward(self, x: Tensor) -> Tensor:
        return self.cross(x, x)

    def cross(self, x_q: Tensor, x_kv: Tensor) -> Tensor:
        s = self.spec
        q = self._heads(x_q, self.q, s.n_head)
        k, v = self._heads(x_kv, self.k, s.G), self._heads(x_kv, self.v, s.G)
        return self._attend(q, k, v, _lower_right(x_q.size(1), x_kv.size(1)))

    def decode(self, x: Tensor, cache: KVCache | None, offset: int) -> tuple[Tensor, KVCache]:
        s = self.spec
        q = self._heads(x, self.q, s.n_head)
        k, v = self._heads(x, self.k, s.G), self._heads(x, self.v, s.G)
        if cache is not None:
            k, v = torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)
        return self._attend(q, k, v, _lower_right(x.size(1), k.size(2))), (k, v)

    def padded(self, x: Tensor, key_mask: Tensor) -> Tensor:
        s = self.spec
        real = key_mask.to(dtype=torch.bool, device=x.device)
        x = x.masked_fill(~real[..., None], 0.0)  # so NaN or inf in the padding is never read
        T = x.size(1)
        seen = torch.ones(T, T, dtype=torch.bool, device=x.device).tril() & real[:, None, :]
        q = self._heads(x, self.q, s.n_head)
        k, v = self._heads(x, self.k, s.G), self._heads(x, self.v, s.G)
        return self._attend(q, k, v, seen[:, None])


def build(spec: AttentionSpec) -> nn.Module:
    return SDPALowerRight(spec)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, SDPALowerRight)
    out = {f"{n}_weight": getattr(module, n).weight for n in "qkvo"}
    if module.spec.bias:
        out |= {f"{n}_bias": getattr(module, n).bias for n in "qkvo"}
    return out


def decode(module: nn.Module, x: Tensor, cache: object, offset: int) -> tuple[Tensor, object]:
    assert isinstance(module, SDPALowerRight)
    return module.decode(x, cache, offset)  # type: ignore[arg-type]


def padded(module: nn.Module, x: Tensor, key_mask: Tensor) -> Tensor:
    assert isinstance(module, SDPALowerRight)
    return module.padded(x, key_mask)


def cross(module: nn.Module, x_q: Tensor, x_kv: Tensor) -> Tensor:
    assert isinstance(module, SDPALowerRight)
    return module.cross(x_q, x_kv)
