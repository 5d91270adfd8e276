"""What SGLang's Triton extend and decode adapters share: turning attnspec's caches into
SGLang's KV pool. SGLang keeps every layer's keys in one pool `k_buffer` [slots, G, D] (a page
of P slots is P consecutive rows) and names a sequence's keys by their slot numbers
(`kv_indices`, with `kv_indptr` the running count per sequence); new tokens are written into
their slots before attention runs (`MHATokenToKVPool.set_kv_buffer`: `k_buffer[loc] = k`).
Read from sglang 0.5.23: kernels/ops/attention/extend_attention.py, decode_attention.py
(`_extract_kv_strides`: page p's token t is row p * P + t), srt/layers/attention/
triton_backend.py."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Pool:
    """A batch's keys as SGLang sees them: the pools, each row's slot numbers in order, the
    page size the kernel addresses them with."""

    k_buffer: Tensor  # [slots, G, D]
    v_buffer: Tensor  # [slots, G, Dv]
    slots: list[Tensor]  # row b's keys, oldest first (int64)
    page_size: int

    def indices(self, rows: list[Tensor]) -> tuple[Tensor, Tensor]:
        """(kv_indptr, kv_indices), int32, of `rows` (each row's slots)."""
        counts = torch.tensor([0, *(len(r) for r in rows)]).cumsum(0)
        flat = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.int64)
        device = self.k_buffer.device
        return counts.to(torch.int32).to(device), flat.to(torch.int32).to(device)


def dense_pool(k: Tensor, v: Tensor) -> Pool:
    """k, v (B, Tk, G, D) as a pool of B * Tk slots, row b's keys at b * Tk .. b * Tk + Tk - 1."""
    B, Tk, G, D = k.shape
    slots = [torch.arange(b * Tk, (b + 1) * Tk) for b in range(B)]
    return Pool(k.reshape(B * Tk, G, D), v.reshape(B * Tk, G, v.size(-1)), slots, 1)


def cache_pool(where: str, k_cache: Tensor, v_cache: Tensor, cache_seqlens: Tensor,
               block_table: Tensor | None, k: Tensor | None, v: Tensor | None) -> Pool:
    """The caches (B, Tcache, G, D), or pages (N, P, G, D) with block_table (B, M), with k, v
    (B, Tnew, G, D) written in at cache_seqlens first (in place, as SGLang's pool does), as a
    pool whose row b holds cache_seqlens[b] + Tnew keys."""
    if k_cache.dim() != 4 or v_cache.dim() != 4:
        raise ValueError(f"{where}: the caches must be 4-D, (B, Tcache, G, D) or pages "
                         f"(N, P, G, D) with a block_table.")
    if (k is None) != (v is None):
        raise ValueError(f"{where}: k and v are written together, so give both or neither.")
    rows, P, G = k_cache.size(0), k_cache.size(1), k_cache.size(2)
    seqlens = [int(n) for n in torch.as_tensor(cache_seqlens).reshape(-1).tolist()]
    B = len(seqlens)
    Tnew = 0 if k is None else k.size(1)
    if k is not None and v is not None and (
            k.dim() != 4 or tuple(k.shape[::2]) != (B, G) or k.size(3) != k_cache.size(3)
            or v.dim() != 4 or tuple(v.shape[:3]) != tuple(k.shape[:3])
            or k.dtype != k_cache.dtype or v.dtype != v_cache.dtype):
        raise ValueError(f"{where}: k and v must be (B, Tnew, G, D) with B={B}, G={G}, in the "
                         "caches' dtype: SGLang's pool stores them as they are.")
    lengths = [n + Tnew for n in seqlens]
    if any(n < 0 for n in seqlens):
        raise ValueError(f"{where}: cache_seqlens {seqlens} must all be >= 0.")
    if block_table is None:
        if rows != B or max(lengths, default=0) > P:
            raise ValueError(f"{where}: a contiguous cache needs B={B} rows of room for "
                             f"cache_seqlens + Tnew = {lengths} tokens, but holds {rows} rows "
                             f"of {P}.")
        table = torch.arange(B).view(B, 1)
        page = max(P, 1)  # a row is one page of Tcache slots
    else:
        table = torch.as_tensor(block_table).cpu().long()
        page = P
        need = max((-(-n // page) for n in lengths), default=0) if page else 1
        if page == 0 or table.dim() != 2 or table.size(0) != B or need > table.size(1):
            raise ValueError(f"{where}: block_table must be (B, pages) = ({B}, >= {need}): "
                             f"pages of P={page} slots for cache_seqlens + Tnew = {lengths} "
                             "tokens.")
    slots = [table[b, torch.arange(n) // page] * page + torch.arange(n) % page
             for b, n in enumerate(lengths)]
    k_pool = k_cache.view(-1, G, k_cache.size(3)) if k_cache.is_contiguous() else None
    v_pool = v_cache.view(-1, G, v_cache.size(3)) if v_cache.is_contiguous() else None
    if k_pool is None or v_pool is None:
        raise ValueError(f"{where}: the caches (strides {k_cache.stride()}, "
                         f"{v_cache.stride()}) must be contiguous: SGLang's pool is one "
                         "[slots, G, D] buffer that the new tokens are written into.")
    if k is not None and v is not None and Tnew:
        for b, n in enumerate(seqlens):
            loc = slots[b][n:].to(k_pool.device)
            k_pool[loc] = k[b]  # MHATokenToKVPool.set_kv_buffer
            v_pool[loc] = v[b]
    return Pool(k_pool, v_pool, slots, 1 if block_table is None else page)
