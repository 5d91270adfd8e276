"""SGLang's Triton decode kernel, `decode_attention_fwd` (sglang.kernels.ops.attention.
decode_attention, sglang 0.5.23), as a kernel subject (PROTOCOL = "kernel"): one query per
sequence over all its keys in SGLang's KV pool, split-K (flash decoding): stage 1 gives each of
`num_kv_splits` key ranges a partial o and its natural-log LSE (`attn_logits`, `attn_lse`),
stage 2 merges them into o. Called as SGLang's Triton backend calls it (forward_decode): q
(B, H, D), the pool `k_buffer` [slots, G, D] and each sequence's slots (`kv_indptr`,
`kv_indices`; the new token written into the pool first, _sglang.py), scratch buffers of
`max_kv_splits` = 8 splits (SGLang's default --triton-attention-num-kv-splits), every row given
all 8 (the backend's static_kv_splits path; the scheduled one only ever gives fewer). Nothing
reimplemented.

How attnspec's calls become SGLang's (LAYOUT "bshd"): Tq = 1 only (decode); the query sits
after every key, so causal or not it sees them all (the bottom-right corner). `attention` makes
row b's Tk keys a pool of Tk slots; `attention_with_cache` writes k, v at cache_seqlens, then
row b's cache_seqlens[b] + Tnew keys; a paged cache (N, P, G, D) is the pool with `page_size`
P, a contiguous one B pages of Tcache slots with page_size 1. `softcap` is `logit_cap`, `sinks`
per head, `scale` is `sm_scale` (SGLang passes it; 1/sqrt(D) when None).
The final LSE is not returned (stage 2 writes o alone), so LSE = None. A row with no key gives
0/0 (stage 2 divides by an empty sum): SGLang never decodes a sequence without its own token,
so MASKED_ROWS = "undefined". No backward. Needs sglang and triton; without a GPU it runs in
Triton's interpreter (docs/triton.md)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ._kernels import check_qkv, require
from ._sglang import Pool, cache_pool, dense_pool

__all__ = ["PROTOCOL", "LAYOUT", "CAUSAL", "WINDOW", "LSE", "MASKED_ROWS", "BACKWARD",
           "DETERMINISTIC", "FEATURES", "DTYPES", "PAGED", "TRITON", "MAX_KV_SPLITS",
           "attention", "attention_with_cache", "supports"]

PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "bottom_right"  # the one query is the last token: it sees every key
WINDOW = None
LSE = None
MASKED_ROWS = "undefined"
BACKWARD = False
DETERMINISTIC = True  # fixed splits, each merged in order; no atomics
FEATURES = ("gqa", "scale", "noncausal", "cross", "softcap", "sinks")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
PAGED = 16
TRITON = True
MAX_KV_SPLITS = 8  # SGLang's --triton-attention-num-kv-splits default

_decode = require("sglang.kernels.ops.attention.decode_attention", subject=__name__,
                  library="SGLang's Triton decode attention",
                  install="pip install sglang (docs/triton.md lists what it imports)",
                  needs_cuda=False)


def _run(where: str, q: Tensor, pool: Pool, *, scale: float | None, softcap: float | None,
         sinks: Tensor | None) -> Tensor:
    """o (B, 1, H, Dv): each row's one query over all its pool slots."""
    B, Tq, H, D = q.shape
    if Tq != 1:
        raise ValueError(f"{where}: decode takes one query per sequence, Tq = 1, not {Tq}.")
    Dv = pool.v_buffer.size(-1)
    if B == 0:
        return q.new_zeros((0, 1, H, Dv))
    kv_indptr, kv_indices = pool.indices(pool.slots)
    o = q.new_empty((B, H, Dv))
    logits = torch.empty((B, H, MAX_KV_SPLITS, Dv), dtype=torch.float32, device=q.device)
    lse = torch.empty((B, H, MAX_KV_SPLITS), dtype=torch.float32, device=q.device)
    splits = torch.full((B,), MAX_KV_SPLITS, dtype=torch.int32, device=q.device)
    _decode.decode_attention_fwd(
        q.reshape(B, H, D), pool.k_buffer, pool.v_buffer, o, kv_indptr, kv_indices, logits,
        lse, splits, MAX_KV_SPLITS, D ** -0.5 if scale is None else scale, 1.0, 1.0,
        logit_cap=softcap or 0.0, sinks=sinks, page_size=pool.page_size)
    return o.reshape(B, 1, H, Dv)


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, scale: float | None = None,
              softcap: float | None = None, sinks: Tensor | None = None) -> Tensor:
    """o (B, 1, H, Dv) in q's dtype: the one query of each row over its Tk keys."""
    check_qkv(__name__, LAYOUT, q, k, v)
    return _run(f"{__name__}.attention(q {tuple(q.shape)}, k {tuple(k.shape)})", q,
                dense_pool(k, v), scale=scale, softcap=softcap, sinks=sinks)


def attention_with_cache(q: Tensor, k_cache: Tensor, v_cache: Tensor, *, cache_seqlens: Tensor,
                         causal: bool, block_table: Tensor | None = None,
                         k: Tensor | None = None, v: Tensor | None = None,
                         scale: float | None = None, softcap: float | None = None) -> Tensor:
    """o over a paged cache (k_cache, v_cache (N, P, G, D), block_table (B, M)) or a contiguous
    one ((B, Tcache, G, D)), k and v (B, Tnew, G, D) written in at cache_seqlens first."""
    where = (f"{__name__}.attention_with_cache(q {tuple(q.shape)}, k_cache "
             f"{tuple(k_cache.shape)}, k {None if k is None else tuple(k.shape)}, block_table "
             f"{None if block_table is None else tuple(block_table.shape)})")
    if q.dim() != 4 or k_cache.dim() != 4 or q.size(-1) != k_cache.size(-1) \
            or k_cache.size(2) == 0 or q.size(2) % k_cache.size(2):
        raise ValueError(f"{where}: q must be (B, 1, H, D) with D the caches' head dim and H a "
                         "multiple of the caches' G.")
    pool = cache_pool(where, k_cache, v_cache, cache_seqlens, block_table, k, v)
    if len(pool.slots) != q.size(0):
        raise ValueError(f"{where}: cache_seqlens holds {len(pool.slots)} rows, q {q.size(0)}.")
    return _run(where, q, pool, scale=scale, softcap=softcap, sinks=None)


def supports(case: dict[str, Any]) -> bool:
    """One query per row (decode), head dims to 256 (BLOCK_DMODEL is the next power of two)."""
    return int(case.get("Tq", 1)) == 1 and int(case.get("D", 64)) <= 256
