"""SGLang's Triton extend kernel, `extend_attention_fwd` (sglang.kernels.ops.attention.
extend_attention, sglang 0.5.23), as a kernel subject (PROTOCOL = "kernel"): a batch of
sequences whose first tokens (the prefix) are already in SGLang's KV pool and whose last
tokens (the extend part) are the queries, each attending to its whole prefix and, causally or
not, to the extend tokens. Called as SGLang's Triton backend calls it (forward_extend): q, k, v
of the extend tokens packed (total, H or G, D) with `qo_indptr`, the prefix named by slot
numbers (`kv_indptr`, `kv_indices`) into the pool `k_buffer` [slots, G, D], the extend tokens
written into the pool first (_sglang.py); it writes o and, given `lse_extend`, the natural-log
LSE (total, H) float32. Nothing reimplemented.

How attnspec's calls become SGLang's (LAYOUT "bshd"):
- `attention(q (B, Tq, H, D), k, v (B, Tk, G, D))`: row b's keys are a pool of Tk slots; the
  last Tq are its extend tokens and the first Tk - Tq its prefix, so query i sits at
  Tk - Tq + i: the bottom-right corner. Tq > Tk has no such split (declined).
- `attention_with_cache`: the new k, v are written at cache_seqlens (SGLang writes them before
  attention too); row b then holds n_b = cache_seqlens[b] + Tnew keys, the last Tq the extend
  tokens (their k, v read back from the pool), the rest the prefix. A paged cache (N, P, G, D)
  is the pool with `page_size` P (kv_indices are slot numbers page * P + t); a contiguous one is
  B pages of Tcache slots, page_size 1.
- `window` ("left", causal only) is `sliding_window_size`: query i' sees keys i' - W .. i',
  and SGLang's 0 means none (so W = 0 is declined); `softcap` is `logit_cap` (cap x tanh(s /
  cap) after the scale); `sinks` per head; `scale` is `sm_scale` (None: 1/sqrt(D)).
The kernel has no backward. Needs sglang and triton; without a GPU it runs in Triton's
interpreter (docs/triton.md)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ._kernels import check_qkv, require
from ._sglang import Pool, cache_pool, dense_pool

__all__ = ["PROTOCOL", "LAYOUT", "CAUSAL", "WINDOW", "LSE", "LSE_LAYOUT", "MASKED_ROWS",
           "BACKWARD", "DETERMINISTIC", "FEATURES", "DTYPES", "PAGED", "TRITON", "attention",
           "attention_with_cache", "supports"]

PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "bottom_right"  # the extend tokens are the last of each sequence
WINDOW = "left"
LSE = "natural"
LSE_LAYOUT = "bsh"
MASKED_ROWS = "zero"
BACKWARD = False
DETERMINISTIC = True  # one program per (sequence, head, query block), no atomics
FEATURES = ("gqa", "scale", "noncausal", "cross", "softcap", "sinks")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
PAGED = 16  # a page size SGLang's paged pools use; any P is addressed the same way
TRITON = True

_extend = require("sglang.kernels.ops.attention.extend_attention", subject=__name__,
                  library="SGLang's Triton extend attention",
                  install="pip install sglang (docs/triton.md lists what it imports)",
                  needs_cuda=False)


def _run(where: str, q: Tensor, pool: Pool, *, causal: bool, scale: float | None,
         window: int | None, softcap: float | None, sinks: Tensor | None,
         ) -> tuple[Tensor, Tensor]:
    """o (B, Tq, H, Dv) and lse (B, Tq, H): the last Tq keys of each pool row are the extend
    tokens, the rest the prefix."""
    B, Tq, H, D = q.shape
    short = [b for b, s in enumerate(pool.slots) if len(s) < Tq]
    if short:
        raise ValueError(f"{where}: rows {short} hold fewer than Tq={Tq} keys "
                         f"({[len(pool.slots[b]) for b in short]}); each query is one of its "
                         "sequence's extend tokens, the last Tq keys.")
    Dv = pool.v_buffer.size(-1)
    if B == 0 or Tq == 0:
        return q.new_zeros((B, Tq, H, Dv)), q.new_zeros((B, Tq, H), dtype=torch.float32)
    prefix = [s[:len(s) - Tq] for s in pool.slots]
    extend = torch.cat([s[len(s) - Tq:] for s in pool.slots]).to(pool.k_buffer.device)
    kv_indptr, kv_indices = pool.indices(prefix)
    qo_indptr = torch.arange(B + 1, dtype=torch.int32, device=q.device) * Tq
    q_extend = q.reshape(B * Tq, H, D)
    o = q.new_empty((B * Tq, H, Dv))
    lse = torch.empty((B * Tq, H), dtype=torch.float32, device=q.device)
    _extend.extend_attention_fwd(
        q_extend, pool.k_buffer[extend], pool.v_buffer[extend], o, pool.k_buffer,
        pool.v_buffer, qo_indptr, kv_indptr, kv_indices, None, causal, None, Tq, 1.0, 1.0,
        sm_scale=scale, logit_cap=softcap or 0.0,
        sliding_window_size=-1 if window is None else window, sinks=sinks, lse_extend=lse,
        page_size=pool.page_size)
    return o.reshape(B, Tq, H, Dv), lse.reshape(B, Tq, H)


def _window(where: str, window: Any, causal: bool) -> int | None:
    if window is None or window == -1:
        return None
    if not isinstance(window, int) or isinstance(window, bool) or window < 1 or not causal:
        raise ValueError(f"{where}(window={window!r}, causal={causal}): WINDOW is 'left', an "
                         "int >= 1 for causal calls only: SGLang's sliding_window_size 0 means "
                         "no window, and without causal it bounds both sides.")
    return window


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, scale: float | None = None,
              window: int | None = None, softcap: float | None = None,
              sinks: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """o (B, Tq, H, Dv) in q's dtype and lse (B, Tq, H), natural log: row b's last Tq keys are
    its extend tokens, the first Tk - Tq its prefix."""
    B, H, G, Tq, Tk, D = check_qkv(__name__, LAYOUT, q, k, v)
    where = f"{__name__}.attention"
    return _run(where, q, dense_pool(k, v), causal=causal, scale=scale,
                window=_window(where, window, causal), softcap=softcap, sinks=sinks)


def attention_with_cache(q: Tensor, k_cache: Tensor, v_cache: Tensor, *, cache_seqlens: Tensor,
                         causal: bool, block_table: Tensor | None = None,
                         k: Tensor | None = None, v: Tensor | None = None,
                         scale: float | None = None, softcap: float | None = None,
                         ) -> tuple[Tensor, Tensor]:
    """(o, lse) over a paged cache (k_cache, v_cache (N, P, G, D), block_table (B, M)) or a
    contiguous one ((B, Tcache, G, D)), k and v (B, Tnew, G, D) written in at cache_seqlens
    first; the last Tq keys of each row are the queries' extend tokens."""
    where = (f"{__name__}.attention_with_cache(q {tuple(q.shape)}, k_cache "
             f"{tuple(k_cache.shape)}, k {None if k is None else tuple(k.shape)}, block_table "
             f"{None if block_table is None else tuple(block_table.shape)})")
    if q.dim() != 4 or k_cache.dim() != 4 or q.size(-1) != k_cache.size(-1) \
            or k_cache.size(2) == 0 or q.size(2) % k_cache.size(2):
        raise ValueError(f"{where}: q must be (B, Tq, H, D) with D the caches' head dim and "
                         "H a multiple of the caches' G.")
    pool = cache_pool(where, k_cache, v_cache, cache_seqlens, block_table, k, v)
    if len(pool.slots) != q.size(0):
        raise ValueError(f"{where}: cache_seqlens holds {len(pool.slots)} rows, q {q.size(0)}.")
    return _run(where, q, pool, causal=causal, scale=scale, window=None, softcap=softcap,
                sinks=None)


def supports(case: dict[str, Any]) -> bool:
    """At least one query, no more queries than keys (each query is one of the last Tq
    tokens), for a cache at least one new token (no new token is decode:
    attnspec.subjects.sglang_decode); a window of at least 1 (SGLang's 0 is none); head dims
    to 256 (BLOCK_DMODEL is the next power of two)."""
    Tq, Tk = int(case.get("Tq", 1)), int(case.get("Tk", 1))
    window = case.get("window")
    left = None if window is None else window[0]
    window_ok = left is None or (bool(case.get("causal", True)) and int(left) >= 1)
    if case.get("cache"):
        return Tq >= 1 and int(case.get("new_tokens", 0)) >= Tq and int(case["D"]) <= 256
    return 1 <= Tq <= Tk and window_ok and int(case.get("D", 64)) <= 256
