"""vLLM's Triton prefix-prefill kernel, `context_attention_fwd` (vllm/v1/attention/ops/
prefix_prefill.py, from LightLLM; the prefill half of chunked_prefill_paged_decode, which the
ROCM_ATTN backend calls), as a kernel subject (PROTOCOL = "kernel"). Read from the vllm 0.34.0
wheel: prefix_prefill.py (context_attention_fwd, _fwd_kernel, _fwd_kernel_alibi,
_paged_kv_cache_offsets) and chunked_prefill_paged_decode.py (how vLLM calls it). Called with
dense k, v for the new tokens and the context in a paged cache, as vLLM calls it; nothing of the
attention is reimplemented.

How attnspec's calls become vLLM's:
- q (B, Tq, H, D) is packed as [B * Tq, H, D], b_start_loc = query_start_loc = [0, Tq, ...],
  b_seq_len = seq_lens (context + query tokens per row), max_input_len = Tq; o is written into
  a tensor of q's packed shape.
- the Tq new tokens' k, v (the query chunk's own keys) are passed dense, packed like q: the
  kernel reads them at b_start_loc, so a row appends exactly as many tokens as it has queries
  (Tnew = Tq; supports() declines other cache calls).
- the context (the keys before the chunk) is read from vLLM's head-major paged cache, K
  [num_blocks, G, D / x, block_size, x] with x = 16 / element size (vLLM's 16-byte vectors),
  V [num_blocks, G, D, block_size], through b_loc = the block table. attnspec's paged cache
  (N, 16, G, D) is copied into that layout page for page (physical page numbers and the
  block table kept); `attention`'s first Tk - Tq keys, and a contiguous cache, are copied into
  pages of 16. The new tokens are also written into attnspec's cache at cache_seqlens, by
  indexing (vLLM's reshape_and_cache writes them separately; it is no attention).
Queries sit at context_len + i (bottom-right). Causal by default (causal=False: every query
sees the whole chunk); sliding_window = left + 1, left only (keys i' - left .. i', in the
context loop and the chunk loop alike), so causal windows are (left, 0) and non-causal ones
(left, unbounded). ALiBi (causal only; _fwd_kernel_alibi takes no window and no sinks), sinks
(H,) float32 as the initial row max, sm_scale. No LSE. Needs vllm (--no-deps) and triton; the
Triton placeholder is avoided under the interpreter as in attnspec.subjects.vllm_unified
(CUDA_VISIBLE_DEVICES="" where it is unset; vllm/triton_utils/importing.py:64-76)."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor

from ._kernels import KernelUnavailable, check_qkv, per_head, require, window_pair

__all__ = ["PROTOCOL", "LAYOUT", "CAUSAL", "WINDOW", "LSE", "MASKED_ROWS", "BACKWARD",
           "DETERMINISTIC", "FEATURES", "PAGED", "DTYPES", "TRITON", "attention",
           "attention_with_cache", "supports"]

PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = None
MASKED_ROWS = "zero"
BACKWARD = False
DETERMINISTIC = True  # one program per (sequence, head, query block), no atomics
FEATURES = ("gqa", "scale", "noncausal", "cross", "alibi", "sinks")
PAGED = 16
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TRITON = True

_PAGE = 16

if os.environ.get("TRITON_INTERPRET") == "1":
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

_ops = require("vllm.v1.attention.ops.prefix_prefill", subject=__name__,
               library="vLLM's Triton prefix-prefill attention",
               install="pip install --no-deps vllm (docs/triton.md)", needs_cuda=False)
if not getattr(_ops.triton, "__file__", None):  # vllm.triton_utils' TritonPlaceholder
    raise KernelUnavailable(
        __name__, "vLLM with Triton enabled",
        "vllm.triton_utils replaced triton by its placeholder (no active Triton GPU driver)",
        "run on a GPU, or under TRITON_INTERPRET=1 with CUDA_VISIBLE_DEVICES set empty.")


def _x(dtype: torch.dtype) -> int:
    return 16 // torch.empty((), dtype=dtype).element_size()


def _head_major(k_pages: Tensor, v_pages: Tensor) -> tuple[Tensor, Tensor]:
    """(N, P, G, D) pages as vLLM's K (N, G, D / x, P, x) and V (N, G, D, P), copied."""
    N, P, G, D = k_pages.shape
    x = _x(k_pages.dtype)
    k5 = k_pages.reshape(N, P, G, D // x, x).permute(0, 2, 3, 1, 4).contiguous()
    v4 = v_pages.permute(0, 2, 3, 1).contiguous()
    return k5, v4


def _paged_rows(rows: Tensor, keep: list[int]) -> tuple[Tensor, Tensor]:
    """The first keep[b] tokens of rows (B, T, G, D) on pages of 16: (B * n, 16, G, D), table."""
    B, T, G, D = rows.shape
    n = max(-(-max(keep, default=0) // _PAGE), 1)
    paged = rows.new_zeros((B, n * _PAGE, G, D))
    for b, m in enumerate(keep):
        paged[b, :m] = rows[b, :m]
    table = torch.arange(B * n, dtype=torch.int32, device=rows.device).view(B, n)
    return paged.view(B * n, _PAGE, G, D), table


def _run(q: Tensor, k_new: Tensor, v_new: Tensor, k_pages: Tensor, v_pages: Tensor,
         table: Tensor, context: list[int], *, causal: bool, scale: float | None,
         window: Any, alibi_slopes: Tensor | None, sinks: Tensor | None) -> Tensor:
    """context_attention_fwd for q, k_new, v_new (B, Tq, H|G, D) after `context` cached tokens
    per row on pages (N, 16, G, D): o (B, Tq, H, D)."""
    B, Tq, H, D = q.shape
    out = q.new_empty((B * Tq, H, D))
    if B * Tq == 0:
        return out.view(B, Tq, H, D)
    left, right = window_pair(__name__, window, causal)
    if right != (0 if causal else -1):
        raise ValueError(f"{__name__}(window={window!r}, causal={causal}): the kernel bounds "
                         "the left side alone (sliding_window = left + 1); give (left, -1).")
    if alibi_slopes is not None and (not causal or left >= 0 or sinks is not None):
        raise ValueError(f"{__name__}(alibi, causal={causal}, window={window!r}, sinks "
                         f"{sinks is not None}): vLLM's ALiBi kernel is causal only and takes "
                         "no window and no sinks.")
    device = q.device
    k5, v4 = _head_major(k_pages, v_pages)
    one = torch.ones((), dtype=torch.float32, device=device)
    _ops.context_attention_fwd(
        q.reshape(B * Tq, H, D), k_new.reshape(B * Tq, -1, D), v_new.reshape(B * Tq, -1, D),
        out, "auto", k5, v4, table.to(device),
        torch.arange(B + 1, dtype=torch.int32, device=device) * Tq,
        torch.tensor([n + Tq for n in context], dtype=torch.int32, device=device),
        max(context) + Tq, Tq, one, one,
        alibi_slopes=None if alibi_slopes is None else per_head(
            __name__, "alibi_slopes", alibi_slopes, H).float().to(device),
        sliding_window=left + 1 if left >= 0 else None,
        sm_scale=None if scale is None else float(scale),
        sinks=None if sinks is None else per_head(__name__, "sinks", sinks, H).float().to(
            device),
        causal=causal)
    return out.view(B, Tq, H, D)


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, scale: float | None = None,
              window: Any = None, alibi_slopes: Tensor | None = None,
              sinks: Tensor | None = None) -> Tensor:
    """o (B, Tq, H, D): the first Tk - Tq keys of each row as cached context, the last Tq as
    the chunk's dense k, v."""
    B, H, G, Tq, Tk, D = check_qkv(__name__, LAYOUT, q, k, v)
    if Tq > Tk or D % _x(q.dtype):
        raise ValueError(f"{__name__}.attention(Tq={Tq}, Tk={Tk}, D={D}, {q.dtype}): the "
                         "queries are the last query_len of seq_len tokens (Tq <= Tk) and the "
                         f"K cache packs D in vectors of x = {_x(q.dtype)}; supports() "
                         "declines this.")
    ctx = Tk - Tq
    kp, table = _paged_rows(k, [ctx] * B)
    vp, _ = _paged_rows(v, [ctx] * B)
    return _run(q, k[:, ctx:], v[:, ctx:], kp, vp, table, [ctx] * B, causal=causal,
                scale=scale, window=window, alibi_slopes=alibi_slopes, sinks=sinks)


def attention_with_cache(q: Tensor, k_cache: Tensor, v_cache: Tensor, *, cache_seqlens: Tensor,
                         causal: bool, block_table: Tensor | None = None,
                         k: Tensor | None = None, v: Tensor | None = None,
                         scale: float | None = None) -> Tensor:
    """o (B, Tq, H, D) with cache_seqlens tokens of context in a paged ((N, 16, G, D),
    block_table (B, M)) or contiguous ((B, Tcache, G, D)) cache and k, v (B, Tq, G, D), the
    chunk's own tokens, passed dense and written into the cache at cache_seqlens."""
    where = (f"{__name__}.attention_with_cache(q {tuple(q.shape)}, k_cache "
             f"{tuple(k_cache.shape)}, k {None if k is None else tuple(k.shape)}, "
             f"block_table {None if block_table is None else tuple(block_table.shape)})")
    if q.dim() != 4 or k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        raise ValueError(f"{where}: q must be (B, Tq, H, D) and both caches one 4-D shape.")
    B, Tq, H, D = q.shape
    G = k_cache.size(2)
    if k is None or v is None or tuple(k.shape) != (B, Tq, G, D) or v.shape != k.shape:
        raise ValueError(f"{where}: context_attention_fwd reads the chunk's keys densely at "
                         "the queries' offsets, so k and v must be (B, Tq, G, D), one new "
                         "token per query; supports() declines other calls.")
    if k_cache.size(3) != D or G == 0 or H % G or D % _x(q.dtype):
        raise ValueError(f"{where}: the caches' head dim must be q's D={D}, a multiple of "
                         f"x = {_x(q.dtype)}, and H={H} a positive multiple of G={G}.")
    seqlens = [int(n) for n in torch.as_tensor(cache_seqlens).reshape(-1).tolist()]
    if len(seqlens) != B or any(n < 0 for n in seqlens):
        raise ValueError(f"{where}: cache_seqlens {seqlens} must hold B={B} counts >= 0.")
    if block_table is None:
        if k_cache.size(0) != B or max(seqlens, default=0) + Tq > k_cache.size(1):
            raise ValueError(f"{where}: a contiguous cache needs B={B} rows of room for "
                             f"cache_seqlens + Tq tokens.")
        for b, n in enumerate(seqlens):
            k_cache[b, n:n + Tq] = k[b]
            v_cache[b, n:n + Tq] = v[b]
        kp, table = _paged_rows(k_cache, seqlens)
        vp, _ = _paged_rows(v_cache, seqlens)
    else:
        table = torch.as_tensor(block_table).to(torch.int32)
        need = max((-(-(n + Tq) // _PAGE) for n in seqlens), default=0)
        if k_cache.size(1) != _PAGE or table.dim() != 2 or table.size(0) != B \
                or need > table.size(1):
            raise ValueError(f"{where}: PAGED = {_PAGE}: pages of {_PAGE} slots and a "
                             f"block_table (B, >= {need}).")
        pos = torch.tensor(seqlens, device=table.device)[:, None] + torch.arange(
            Tq, device=table.device)
        pages = table.gather(1, (pos // _PAGE).long()).long()
        k_cache[pages, pos % _PAGE] = k
        v_cache[pages, pos % _PAGE] = v
        kp, vp = k_cache, v_cache
    return _run(q, k, v, kp, vp, table, seqlens, causal=causal, scale=scale, window=None,
                alibi_slopes=None, sinks=None)


def supports(case: dict[str, Any]) -> bool:
    """Queries that are the last of their row's tokens (Tq <= Tk), one new token per query in
    cache calls, head dims in whole 16-byte vectors (D % x == 0, the K cache's layout), windows
    bounded on the left only (right 0 causal, unbounded otherwise), ALiBi only causal and
    without a window or sinks (_fwd_kernel_alibi)."""
    dtype = getattr(torch, str(case.get("dtype", "float32")).replace("torch.", ""))
    if int(case.get("D", 64)) % _x(dtype):
        return False
    if case.get("cache"):
        return int(case.get("new_tokens", 0)) == int(case.get("Tq", 1))
    if int(case.get("Tq", 1)) > int(case.get("Tk", 1)):
        return False
    causal = bool(case.get("causal", True))
    window = case.get("window")
    if window is not None and (window[1] is not None and not (causal and window[1] == 0)):
        return False
    return not (case.get("alibi") and (not causal or window is not None or case.get("sinks")))
