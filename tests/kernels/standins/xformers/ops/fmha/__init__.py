"""Stand-in for `xformers.ops.fmha`: memory_efficient_attention (autograd) and
memory_efficient_attention_forward_requires_grad (out, lse), written from xformers'
signatures and docstrings (@115df95f). BMHK, or BMGHK for GQA with K/V already expanded
("xFormers will not automatically broadcast"; the backward does not take BMGHK here, as xformers
documents that form for the forward pass only). The LSE is [B, (G,) H, M] with M padded to a
multiple of 32 by NaN, as CUTLASS pads it. A row that sees no key comes out NaN: xformers does
not define it."""

from __future__ import annotations

import math

import torch

from . import attn_bias
from .attn_bias import LowerTriangularMask

ATTNSPEC_STANDIN = True
__all__ = ["LowerTriangularMask", "attn_bias", "memory_efficient_attention",
           "memory_efficient_attention_forward_requires_grad"]


def _forward(query, key, value, attn_bias, scale):
    if query.dim() not in (4, 5) or key.shape[:-1] != value.shape[:-1]:
        raise ValueError(f"Incompatible shapes: query {tuple(query.shape)}, key "
                         f"{tuple(key.shape)}, value {tuple(value.shape)}")
    if query.shape[2:-1] != key.shape[2:-1]:
        raise ValueError("xFormers will not automatically broadcast: expand key and value to "
                         f"query's heads (query {tuple(query.shape)}, key {tuple(key.shape)})")
    heads = query.shape[2:-1]
    B, Mq, Mk = query.size(0), query.size(1), key.size(1)
    q, k, v = (t.reshape(B, t.size(1), -1, t.size(-1)) for t in (query, key, value))
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q.to(work), k.to(work)) * scale
    if attn_bias is not None:
        s = s + attn_bias.materialize((Mq, Mk), dtype=work, device=q.device)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1)  # NaN for a row with no visible key: not defined
    out = torch.einsum("bhqk,bkhd->bqhd", p, v.to(work)).to(query.dtype)
    return out.reshape(*query.shape[:-1], value.size(-1)), lse.reshape(B, *heads, Mq)


def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None, *,
                               op=None, output_dtype=None):
    if p:
        raise NotImplementedError("xformers stand-in: no dropout")
    if query.dim() == 5 and torch.is_grad_enabled() and any(
            t.requires_grad for t in (query, key, value)):
        raise NotImplementedError("xformers stand-in: BMGHK (GQA) is supported only for the "
                                  "forward pass")
    return _forward(query, key, value, attn_bias, scale)[0]


def memory_efficient_attention_forward_requires_grad(query, key, value, attn_bias=None, p=0.0,
                                                     scale=None, *, op=None, output_dtype=None):
    """(out, lse): no autograd graph (the lse is for memory_efficient_attention_backward)."""
    if p:
        raise NotImplementedError("dropout is not supported on the non-autograd API.")
    with torch.no_grad():
        out, lse = _forward(query, key, value, attn_bias, scale)
    pad = -lse.size(-1) % 32
    lse = torch.cat([lse.float() if lse.dtype != torch.float64 else lse,
                     lse.new_full((*lse.shape[:-1], pad), float("nan"))], dim=-1)
    return out, lse
