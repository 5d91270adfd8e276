"""The Triton catalogue's one kernel: a FlashAttention-style forward, one program per (query
block, batch x head), an online softmax over key blocks (the running max and sum rescaled as
blocks arrive), causal blocks past the diagonal skipped, tails masked. Dense (B, H, T, D) and
packed varlen inputs (offsets per sequence) share it. `BUG` switches on one known mistake, each
the subject of one file in broken/ (0: none)."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch import Tensor

NONE, LAST_BLOCK_UNMASKED, NO_RESCALE, LSE_WITHOUT_MAX, TAIL_KEYS_UNMASKED, \
    VARLEN_OFFSET_OFF_BY_ONE = range(6)
BLOCK_M, BLOCK_N = 16, 16


@triton.jit
def _fwd(Q, K, V, Out, L, CU_Q, CU_K, sm_scale, Tq_all, Tk_all, H, G, extra,
         sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sob, soh, sot, slb, slh, slt,
         CAUSAL: tl.constexpr, VARLEN: tl.constexpr, BUG: tl.constexpr,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    g = h // (H // G)
    if VARLEN:  # packed: sequence b's rows start at its offset, batch strides unused
        q0 = tl.load(CU_Q + b)
        k0 = tl.load(CU_K + b)
        Tq = tl.load(CU_Q + b + 1) - q0
        Tk = tl.load(CU_K + b + 1) - k0
        if BUG == 5:
            Tk = tl.maximum(Tk - 1, 0)  # the length one short: cu_seqlens_k[b + 1] - 1 - ...
        bq = q0 * sqt
        bk = k0 * skt
        bv = k0 * svt
        bo = q0 * sot
        bl = q0 * slt
    else:
        Tq = Tq_all
        Tk = Tk_all
        bq = b * sqb
        bk = b * skb
        bv = b * svb
        bo = b * sob
        bl = b * slb
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    q = tl.load(Q + bq + h * sqh + offs_m[:, None] * sqt + offs_d[None, :],
                mask=(offs_m[:, None] < Tq) & (offs_d[None, :] < D), other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # The bottom-right corner: query i sees keys j <= i + Tk - Tq (+ `extra`: keys of this
    # call that sit that much before the end of the whole sequence's).
    shift = Tk - Tq + extra
    hi = Tk
    if CAUSAL:
        hi = tl.maximum(0, tl.minimum(Tk, (start_m + 1) * BLOCK_M + shift))
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + bk + g * skh + cols[:, None] * skt + offs_d[None, :],
                    mask=(cols[:, None] < Tk) & (offs_d[None, :] < D), other=0.0)
        s = tl.dot(q, tl.trans(k)).to(tl.float32) * sm_scale
        if BUG == 4:
            seen = cols[None, :] < hi + BLOCK_N  # the keys padding the last block count too
        else:
            seen = cols[None, :] < Tk
        if CAUSAL:
            if BUG != 1 or start_n + BLOCK_N < hi:  # BUG 1: the diagonal block left unmasked
                seen = seen & (cols[None, :] <= offs_m[:, None] + shift)
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        if BUG == 2:
            alpha = alpha * 0.0 + 1.0  # the running sum and output never rescaled
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + bv + g * svh + cols[:, None] * svt + offs_d[None, :],
                    mask=(cols[:, None] < Tk) & (offs_d[None, :] < D), other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(tl.float32)
        m_i = m_new
    some = l_i > 0
    o = tl.where(some[:, None], acc / tl.where(some, l_i, 1.0)[:, None], 0.0)
    if BUG == 3:
        lse = tl.where(some, tl.log(tl.where(some, l_i, 1.0)), float("-inf"))  # the max left out
    else:
        lse = tl.where(some, m_i + tl.log(tl.where(some, l_i, 1.0)), float("-inf"))
    tl.store(Out + bo + h * soh + offs_m[:, None] * sot + offs_d[None, :],
             o.to(Out.dtype.element_ty), mask=(offs_m[:, None] < Tq) & (offs_d[None, :] < D))
    tl.store(L + bl + h * slh + offs_m * slt, lse, mask=offs_m < Tq)


def _scale(D: int, scale: float | None) -> float:
    return 1.0 / math.sqrt(D) if scale is None else scale


def dense(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float | None,
          bug: int = NONE, extra: int = 0) -> tuple[Tensor, Tensor]:
    """o (B, H, Tq, D) and the natural-log LSE (B, H, Tq) in float32; `extra`: the keys given
    end that many positions before the end of the sequence's keys (a split of them)."""
    B, H, Tq, D = q.shape
    G, Tk = k.shape[1], k.shape[2]
    o = torch.empty_like(q)
    lse = torch.empty((B, H, Tq), dtype=torch.float32, device=q.device)
    if B * H * Tq == 0:
        return o, lse
    cu = torch.zeros(1, dtype=torch.int32, device=q.device)  # unused when not varlen
    grid = (triton.cdiv(Tq, BLOCK_M), B * H)
    _fwd[grid](q, k, v, o, lse, cu, cu, _scale(D, scale), Tq, Tk, H, G, extra,
               *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
               *lse.stride(), CAUSAL=causal, VARLEN=False, BUG=bug, BLOCK_M=BLOCK_M,
               BLOCK_N=BLOCK_N, D=D, BLOCK_D=max(16, triton.next_power_of_2(D)))
    return o, lse


def varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
           max_seqlen_q: int, causal: bool, scale: float | None,
           bug: int = NONE) -> tuple[Tensor, Tensor]:
    """Packed q (total_q, H, D), k and v (total_k, G, D): o (total_q, H, D) and the LSE
    (H, total_q) in float32, as flash_attn_varlen_func returns them."""
    total_q, H, D = q.shape
    G = k.shape[1]
    B = cu_seqlens_q.numel() - 1
    o = torch.zeros_like(q)
    lse = torch.full((H, total_q), float("-inf"), dtype=torch.float32, device=q.device)
    if B == 0 or max_seqlen_q == 0:
        return o, lse
    grid = (triton.cdiv(max_seqlen_q, BLOCK_M), B * H)
    _fwd[grid](q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, _scale(D, scale), 0, 0, H, G, 0,
               0, q.stride(1), q.stride(0), 0, k.stride(1), k.stride(0), 0, v.stride(1),
               v.stride(0), 0, o.stride(1), o.stride(0), 0, lse.stride(0), lse.stride(1),
               CAUSAL=causal, VARLEN=True, BUG=bug, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, D=D,
               BLOCK_D=max(16, triton.next_power_of_2(D)))
    return o, lse


def split_keys(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float | None,
               splits: int, subtract_max: bool = True) -> tuple[Tensor, Tensor]:
    """Split-K: the keys in `splits` chunks, each chunk's (o, lse) by the kernel, merged by
    their LSEs (flash-decoding's merge: weights exp(lse_i - max_j lse_j))."""
    Tk = k.size(2)
    bounds = [round(Tk * i / splits) for i in range(splits + 1)]
    parts = [dense(q, k[:, :, a:b], v[:, :, a:b], causal, scale, extra=Tk - b)
             for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    if not parts:
        return dense(q, k, v, causal, scale)
    lses = torch.stack([lse for _, lse in parts])  # (S, B, H, Tq)
    outs = torch.stack([o.float() for o, _ in parts])
    top = lses.amax(0) if subtract_max else torch.zeros_like(lses[0])
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    w = torch.exp(lses - top)  # without the max: exp(lse) overflows past 88 in float32
    total = w.sum(0)
    o = torch.where(total[..., None] > 0, (w[..., None] * outs).sum(0) / total[..., None],
                    torch.zeros_like(outs[0]))
    lse = torch.where(total > 0, top + torch.log(total), torch.full_like(total, -math.inf))
    return o.to(q.dtype), lse


# What every kernel of the catalogue declares (docs/kernels.md), dense or packed.
DENSE = {"PROTOCOL": "kernel", "LAYOUT": "bhsd", "CAUSAL": "bottom_right", "WINDOW": None,
         "LSE": "natural", "MASKED_ROWS": "zero", "BACKWARD": False, "DETERMINISTIC": True,
         "FEATURES": ("gqa", "scale", "noncausal", "cross"),
         "DTYPES": (torch.float32, torch.float16)}
VARLEN = {**DENSE, "LAYOUT": "varlen", "LSE_LAYOUT": "hs"}


def dense_kernel(space: dict, bug: int = NONE) -> None:
    """Declare a dense kernel in module namespace `space`: DENSE, and attention with `bug`."""
    def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool,
                  scale: float | None = None) -> tuple[Tensor, Tensor]:
        return dense(q, k, v, causal, scale, bug=bug)

    space.update(DENSE, attention=attention)


def varlen_kernel(space: dict, bug: int = NONE) -> None:
    """Declare a packed (varlen) kernel in `space`: VARLEN, and attention with `bug`."""
    def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool,
                  cu_seqlens_q: Tensor | None = None, cu_seqlens_k: Tensor | None = None,
                  max_seqlen_q: int = 0, max_seqlen_k: int = 0,
                  scale: float | None = None) -> tuple[Tensor, Tensor]:
        if cu_seqlens_q is None or cu_seqlens_k is None:
            raise ValueError("a varlen kernel: give cu_seqlens_q and cu_seqlens_k "
                             f"(got {cu_seqlens_q!r}, {cu_seqlens_k!r})")
        return varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal, scale, bug=bug)

    space.update(VARLEN, attention=attention)


def split_kernel(space: dict, splits: int, subtract_max: bool = True) -> None:
    """Declare a split-K kernel in `space`: DENSE, and attention over `splits` key chunks."""
    def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool,
                  scale: float | None = None) -> tuple[Tensor, Tensor]:
        return split_keys(q, k, v, causal, scale, splits=splits, subtract_max=subtract_max)

    space.update(DENSE, attention=attention)
