"""The reference on inference paths: a cache, key padding, queries and keys of their own lengths.

One core serves them all. Query i (index `q_index[i]`) may see key j iff
`k_index[j] <= q_index[i]` (the causal corner is in the indices), inside the window, and
`key_mask[b, j]`. Positions (RoPE's angles, ALiBi's distances) are per row: with padding they
count the real tokens, so a left-padded row and the same tokens unpadded mean the same thing.
A query that sees no key gets a zero attention output (so the output projection's bias), and
zero gradients, never NaN.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from .module import merge_heads
from .pieces import frequencies, project_heads, spec_core, turn
from .spec import AttentionSpec, DynamicNTK, RoPE

__all__ = ["CORNERS", "MASKED_ROWS", "PADDING_VALUES", "Corner", "KVCache", "attend_at",
           "corner_shift", "cross_attention", "decode_attention", "decode_step",
           "padded_attention", "padded_decode_attention", "padded_decode_step",
           "padding_positions"]

Corner = Literal["bottom_right", "top_left"]
CORNERS: tuple[str, ...] = ("bottom_right", "top_left")
"""Where causal attention's diagonal sits when queries are fewer (or more) than keys."""
MASKED_ROWS: tuple[str, ...] = ("zero", "finite")
"""What a query with no visible key gives: a zero attention output (so the output projection's
bias), or anything finite (some kernels attend to every key instead, as HF's SDPA path does)."""

PADDING_VALUES: tuple[str, ...] = ("any", "finite")
"""What padding may hold without reaching a real token: anything (NaN and inf included), or
finite values only (an additive mask times NaN values is NaN: HF's eager attention)."""

KVCache = tuple[Tensor, Tensor]
"""The reference's cache: keys (rotated) and values so far, each (B, G, T so far, D)."""


def corner_shift(corner: str, n_queries: int, n_keys: int) -> int:
    """Index of query 0 on the key axis: Tk - Tq at the bottom right, 0 at the top left."""
    return n_keys - n_queries if corner == "bottom_right" else 0


def rotate_at(t: Float[Tensor, "B N T D"], rope: RoPE, pos: Int[Tensor, "B T"],
              length: int | None = None) -> Float[Tensor, "B N T D"]:
    """RoPE with each row's own positions (padding shifts them); `length` (dynamic NTK's) is
    1 + the largest position unless given."""
    rot = rope.rotary_dim(t.size(-1))
    exact = torch.float64 if t.dtype == torch.float64 else torch.float32
    seen = int(pos.max()) + 1 if length is None else length
    freq, factor = frequencies(rope, rot, seen, exact, t.device)
    angle = pos.to(device=t.device, dtype=exact)[:, None, :, None] * freq  # (B, 1, T, rot / 2)
    return turn(t, rope, angle, factor)


def _sinks(weights: Mapping[str, Tensor], spec: AttentionSpec) -> Tensor | None:
    return weights["sinks"] if spec.sinks else None


def _qkv(x_q: Tensor, x_kv: Tensor, weights: Mapping[str, Tensor], spec: AttentionSpec,
         ) -> tuple[Tensor, Tensor, Tensor]:
    return (project_heads(x_q, weights, "q", spec), project_heads(x_kv, weights, "k", spec),
            project_heads(x_kv, weights, "v", spec))


def _core(q: Float[Tensor, "B H Tq D"], k: Float[Tensor, "B G Tk D"],
          v: Float[Tensor, "B G Tk D"], spec: AttentionSpec, q_index: Int[Tensor, " Tq"],
          k_index: Int[Tensor, " Tk"], q_pos: Int[Tensor, "B Tq"], k_pos: Int[Tensor, "B Tk"],
          key_mask: Bool[Tensor, "B Tk"] | None, sinks: Tensor | None = None,
          ) -> Float[Tensor, "B H Tq D"]:
    """The core on rotated queries and keys, at their indices and positions."""
    return spec_core(q, k, v, spec, q_index=q_index, k_index=k_index, q_pos=q_pos, k_pos=k_pos,
                     key_mask=key_mask, sinks=sinks)[0]


def attend_at(x_q: Float[Tensor, "B Tq C"], x_kv: Float[Tensor, "B Tk C"],
              weights: Mapping[str, Tensor], spec: AttentionSpec, *,
              q_index: Tensor, k_index: Tensor, q_pos: Tensor, k_pos: Tensor,
              key_mask: Tensor | None = None) -> Float[Tensor, "B Tq C"]:
    """The whole attention with queries from `x_q` and keys and values from `x_kv`."""
    q, k, v = _qkv(x_q, x_kv, weights, spec)
    if isinstance(spec.positions, RoPE):
        seen = int(max(q_pos.max(), k_pos.max())) + 1  # one length for the call's q and k
        q = rotate_at(q, spec.positions, q_pos, seen)
        k = rotate_at(k, spec.positions, k_pos, seen)
    y = _core(q, k, v, spec, q_index, k_index, q_pos, k_pos, key_mask, _sinks(weights, spec))
    return F.linear(merge_heads(y), weights["o_weight"], weights.get("o_bias"))


def _rows(index: Tensor, B: int) -> Tensor:
    return index[None, :].expand(B, -1)


def padding_positions(key_mask: Bool[Tensor, "B T"]) -> Int[Tensor, "B T"]:
    """Each real token's position among its row's real tokens (0 for padding)."""
    return (key_mask.long().cumsum(dim=1) - 1).clamp(min=0)


def padded_attention(x: Float[Tensor, "B T C"], weights: Mapping[str, Tensor],
                     spec: AttentionSpec, key_mask: Bool[Tensor, "B T"]) -> Float[Tensor, "B T C"]:
    """Self-attention over a padded batch: padded keys are never read (their inputs are zeroed
    first, so NaN or inf there cannot reach a real token), positions count real tokens."""
    mask = key_mask.to(device=x.device, dtype=torch.bool)
    x0 = x.masked_fill(~mask[..., None], 0.0)
    index = torch.arange(x.size(1), device=x.device)
    pos = padding_positions(mask)
    return attend_at(x0, x0, weights, spec, q_index=index, k_index=index, q_pos=pos,
                     k_pos=pos, key_mask=mask)


def cross_attention(x_q: Float[Tensor, "B Tq C"], x_kv: Float[Tensor, "B Tk C"],
                    weights: Mapping[str, Tensor], spec: AttentionSpec,
                    corner: str = "bottom_right") -> Float[Tensor, "B Tq C"]:
    """Tq queries on Tk keys, causal from the declared corner; positions follow the indices."""
    B, Tq, Tk = x_q.size(0), x_q.size(1), x_kv.size(1)
    q_index = torch.arange(Tq, device=x_q.device) + corner_shift(corner, Tq, Tk)
    k_index = torch.arange(Tk, device=x_q.device)
    return attend_at(x_q, x_kv, weights, spec, q_index=q_index, k_index=k_index,
                     q_pos=_rows(q_index, B), k_pos=_rows(k_index, B))


def decode_attention(x: Float[Tensor, "B T C"], weights: Mapping[str, Tensor],
                     spec: AttentionSpec, chunks: list[int]) -> Float[Tensor, "B T C"]:
    """The full forward computed chunk by chunk, each chunk's queries on every key so far
    (recomputed, not cached: the runner's yardstick for a decode's own discrepancy). With
    dynamic NTK the cache's keys keep the turn they got when cached, so it is decoded."""
    if _dynamic(spec):
        return _decoded(x, weights, spec, chunks, None)
    outs, start = [], 0
    for size in chunks:
        end = start + size
        outs.append(cross_attention(x[:, start:end], x[:, :end], weights, spec))
        start = end
    return torch.cat(outs, dim=1)


def _dynamic(spec: AttentionSpec) -> bool:
    return isinstance(spec.positions, RoPE) and isinstance(spec.positions.scaling, DynamicNTK)


def _decoded(x: Tensor, weights: Mapping[str, Tensor], spec: AttentionSpec, chunks: list[int],
             mask: Tensor | None) -> Tensor:
    """x decoded chunk by chunk against the reference's own cache (padded where mask given)."""
    outs, cache, start = [], None, 0
    for size in chunks:
        end = start + size
        if mask is None:
            out, cache = decode_step(x[:, start:end], weights, spec, cache, start)
        else:
            out, cache = padded_decode_step(x[:, start:end], weights, spec, cache, start,
                                            mask[:, :end])
        outs.append(out)
        start = end
    return torch.cat(outs, dim=1)


def decode_step(x: Float[Tensor, "B t C"], weights: Mapping[str, Tensor], spec: AttentionSpec,
                cache: KVCache | None, offset: int) -> tuple[Tensor, KVCache]:
    """New tokens at positions offset, offset + 1, ... against a cache of the earlier ones."""
    B, t = x.size(0), x.size(1)
    q, k, v = _qkv(x, x, weights, spec)
    q_index = torch.arange(offset, offset + t, device=x.device)
    if isinstance(spec.positions, RoPE):
        q = rotate_at(q, spec.positions, _rows(q_index, B))
        k = rotate_at(k, spec.positions, _rows(q_index, B))
    if cache is not None:
        k, v = torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)
    k_index = torch.arange(k.size(2), device=x.device)
    y = _core(q, k, v, spec, q_index, k_index, _rows(q_index, B), _rows(k_index, B), None,
              _sinks(weights, spec))
    out = F.linear(merge_heads(y), weights["o_weight"], weights.get("o_bias"))
    return out, (k, v)



def padded_decode_step(x: Float[Tensor, "B t C"], weights: Mapping[str, Tensor],
                       spec: AttentionSpec, cache: KVCache | None, offset: int,
                       key_mask: Bool[Tensor, "B S"]) -> tuple[Tensor, KVCache]:
    """`decode_step` on a padded batch: key_mask (B, offset + t) marks the real tokens so far
    (padding never read); each row's positions count its own real tokens."""
    mask = key_mask.to(device=x.device, dtype=torch.bool)
    t = x.size(1)
    x0 = x.masked_fill(~mask[:, offset:offset + t, None], 0.0)
    q, k, v = _qkv(x0, x0, weights, spec)
    pos = padding_positions(mask)
    q_pos = pos[:, offset:offset + t]
    if isinstance(spec.positions, RoPE):
        q, k = rotate_at(q, spec.positions, q_pos), rotate_at(k, spec.positions, q_pos)
    if cache is not None:
        k, v = torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)
    q_index = torch.arange(offset, offset + t, device=x.device)
    k_index = torch.arange(k.size(2), device=x.device)
    y = _core(q, k, v, spec, q_index, k_index, q_pos, pos, mask, _sinks(weights, spec))
    return F.linear(merge_heads(y), weights["o_weight"], weights.get("o_bias")), (k, v)


def padded_decode_attention(x: Float[Tensor, "B T C"], weights: Mapping[str, Tensor],
                            spec: AttentionSpec, chunks: list[int],
                            key_mask: Bool[Tensor, "B T"]) -> Float[Tensor, "B T C"]:
    """`padded_attention` computed chunk by chunk, each chunk's queries on every key so far
    (recomputed: the runner's yardstick for a padded decode's own discrepancy; decoded with
    dynamic NTK, as `decode_attention`)."""
    mask = key_mask.to(device=x.device, dtype=torch.bool)
    if _dynamic(spec):
        return _decoded(x, weights, spec, chunks, mask)
    x0 = x.masked_fill(~mask[..., None], 0.0)
    pos = padding_positions(mask)
    outs, start = [], 0
    for size in chunks:
        end = start + size
        outs.append(attend_at(x0[:, start:end], x0[:, :end], weights, spec,
                              q_index=torch.arange(start, end, device=x.device),
                              k_index=torch.arange(end, device=x.device),
                              q_pos=pos[:, start:end], k_pos=pos[:, :end],
                              key_mask=mask[:, :end]))
        start = end
    return torch.cat(outs, dim=1)
