"""A plain-torch stand-in for FlashAttention 2's `flash_attn` package, for CPU tests of
attnspec's adapters. Written from flash_attn_interface.py's signatures and docstrings
(Dao-AILab/flash-attention @0251105a), with FA2's two LSE habits that its CUDA source shows:
softmax_lse = +inf for a row that sees no key (softmax.h, non-split path), and for the causal
kernel an ALiBi bias of +slope * j instead of -slope * |i' - j| (mask.h), which leaves o as it is
and raises the LSE by slope * i'. Like FA2's autograd function, the LSE gets no gradient.
Any dtype and device (the real one wants fp16/bf16 on CUDA)."""

from __future__ import annotations

import math

import torch
from _standin_dense import attend, keep_mask
from torch import Tensor

ATTNSPEC_STANDIN = True
__version__ = "2.8.3+standin"


def _check(q: Tensor, k: Tensor, v: Tensor, rank: int) -> None:
    if q.dim() != rank or k.dim() != rank or v.dim() != rank:
        raise RuntimeError(f"flash_attn stand-in: expected {rank}-D q, k, v, got "
                           f"{q.dim()}, {k.dim()}, {v.dim()}")
    if q.size(-2) % k.size(-2):
        raise RuntimeError("Number of heads in key/value must divide number of heads in query")


def _one(q: Tensor, k: Tensor, v: Tensor, softmax_scale: float | None, causal: bool,
         window_size: tuple[int, int], softcap: float, alibi_slopes: Tensor | None,
         ) -> tuple[Tensor, Tensor]:
    """One batch of BSHD tensors: (out, softmax_lse (B, H, Sq) float32 or float64)."""
    B, Tq, H, D = q.shape
    Tk = k.size(1)
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    left, right = window_size
    keep = keep_mask(Tq, Tk, causal=causal, left=left, right=right, device=q.device)
    is_causal = left < 0 and (causal or right == 0)  # flash_api.cpp's params.is_causal
    bias = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(q.device, torch.float64 if q.dtype == torch.float64
                                 else torch.float32)
        slopes = slopes.reshape(-1 if slopes.dim() == 2 else 1, H, 1, 1)
        i = torch.arange(Tq, device=q.device)[:, None] + (Tk - Tq)
        j = torch.arange(Tk, device=q.device)[None, :]
        bias = slopes * j if is_causal else -slopes * (i - j).abs()
    out, lse, empty = attend(q, k, v, keep, scale=scale, softcap=softcap, bias=bias)
    return out, lse.masked_fill(empty, float("inf")).detach()


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False):
    """q (B, Sq, H, D), k and v (B, Sk, Hkv, D); bottom-right causal; window inclusive."""
    if dropout_p:
        raise NotImplementedError("flash_attn stand-in: no dropout")
    _check(q, k, v, 4)
    out, lse = _one(q, k, v, softmax_scale, causal, tuple(window_size), softcap, alibi_slopes)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    """q (total_q, H, D), k and v (total_k, Hkv, D), cu_seqlens int32 (B + 1,); softmax_lse
    (H, total_q). Each sequence alone, as the kernel treats them."""
    if dropout_p or block_table is not None:
        raise NotImplementedError("flash_attn stand-in: no dropout, no paged KV")
    _check(q, k, v, 3)
    if cu_seqlens_q.dtype != torch.int32 or cu_seqlens_k.dtype != torch.int32:
        raise RuntimeError("cu_seqlens_q must have dtype int32")
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    outs, lses = [], []
    for b in range(len(cq) - 1):
        qs, ks, vs = (t[None, s0:s1] for t, (s0, s1) in
                      ((q, cq[b:b + 2]), (k, ck[b:b + 2]), (v, ck[b:b + 2])))
        slopes = None
        if alibi_slopes is not None:
            slopes = alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes
        out, lse = _one(qs, ks, vs, softmax_scale, causal, tuple(window_size), softcap, slopes)
        outs.append(out[0])
        lses.append(lse[0])
    out = torch.cat(outs) if outs else q.new_zeros((0, q.size(1), v.size(-1)))
    lse = torch.cat(lses, dim=-1) if lses else q.new_zeros((q.size(1), 0), dtype=torch.float32)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False):
    """q (B, Sq, H, D); k_cache, v_cache (B, Scache, Hkv, D), or paged (num_blocks,
    page_block_size, Hkv, D) with block_table (B, max_blocks) int32; k, v (B, Snew, Hkv, D)
    written in place at cache_seqlens, then attended over cache_seqlens + Snew keys, the causal
    diagonal at the bottom right. No rotary, no cache_batch_idx or leftpad in this stand-in."""
    if rotary_cos is not None or cache_batch_idx is not None or cache_leftpad is not None:
        raise NotImplementedError("flash_attn stand-in: no rotary, cache_batch_idx or leftpad")
    B = q.size(0)
    lengths = ([0] * B if cache_seqlens is None else
               [int(n) for n in torch.as_tensor(cache_seqlens).tolist()])
    new = 0 if k is None else k.size(1)
    paged = block_table is not None
    page = k_cache.size(1) if paged else None

    def slot(b: int, pos: int) -> tuple[int, int]:  # (row or physical page, position in it)
        if not paged:
            return b, pos
        return int(block_table[b, pos // page]), pos % page

    outs, lses = [], []
    for b in range(B):
        n = lengths[b]
        with torch.no_grad():
            for t in range(new):  # the append, in place
                where = slot(b, n + t)
                k_cache[where[0], where[1]] = k[b, t]
                v_cache[where[0], where[1]] = v[b, t]
        places = [slot(b, p) for p in range(n + new)]
        keys = torch.stack([k_cache[r, p] for r, p in places])[None] if places else \
            k_cache.new_zeros(1, 0, k_cache.size(2), k_cache.size(3))
        values = torch.stack([v_cache[r, p] for r, p in places])[None] if places else \
            v_cache.new_zeros(1, 0, v_cache.size(2), v_cache.size(3))
        out, lse = _one(q[b:b + 1], keys, values, softmax_scale, causal, tuple(window_size),
                        softcap, alibi_slopes)
        outs.append(out)
        lses.append(lse)
    out, lse = torch.cat(outs), torch.cat(lses)
    return (out, lse) if return_softmax_lse else out
