"""FlashInfer's paged kernels as a kernel subject (PROTOCOL = "kernel"):
`BatchPrefillWithPagedKVCacheWrapper` (plan, then run) for every call, and
`append_paged_kv_cache` for the new keys and values of `attention_with_cache`. Signatures read
from flashinfer-ai/flashinfer @fb28d724 (version.txt 0.6.18, 2026-08-22): flashinfer/prefill.py
(the wrapper's __init__, plan, run), flashinfer/page.py (append_paged_kv_cache,
get_batch_indices_positions, get_seq_lens) and include/flashinfer/page.cuh (get_length, the
append kernel's addressing).

How attnspec's calls become FlashInfer's (kv_layout "NHD", which is attnspec's "bshd"):
- q (B, Tq, H, D) is ragged as [B * Tq, H, D] with qo_indptr = [0, Tq, 2 Tq, ...].
- a paged cache (N, P, G, D) with block_table (B, M): row b holds n_b = cache_seqlens[b] + Tnew
  keys on its first ceil(n_b / P) pages, so paged_kv_indptr is their running count,
  paged_kv_indices the concatenated block_table prefixes, paged_kv_last_page_len
  n_b - (pages - 1) P (0 for a row of no pages; page.cuh's get_length gives such a row 0 keys).
- a contiguous cache (B, Tcache, G, D) is the same thing with one page per row of size Tcache.
- `attention` (no cache) is a contiguous cache of Tk keys with nothing appended.
- the new k, v (B, Tnew, G, D) go in first through append_paged_kv_cache, with batch_indices
  and positions from get_batch_indices_positions(append_indptr, seq_lens = n_b, nnz); its
  docstring says the page table must already count the appended tokens, as it does here.
The causal diagonal sits bottom-right (the wrapper's docstring builds its custom-mask example as
tril(..., diagonal=kv_len - qo_len)), query i of Tq at n_b - Tq + i as flash_attn_with_kvcache
puts it; `window_left` inclusive (causal calls only, as attnspec.subjects.flashinfer);
logits_soft_cap; sm_scale; run(return_lse=True) gives lse [B * Tq, H] float32, returned as
(B, Tq, H): base 2, as include/flashinfer/attention/prefill.cuh writes it (log2(d) + m, m in
the log2 domain, in BatchPrefillWithPagedKVCacheDevice). A row that sees no key: o 0, lse -inf,
which that source gives (init_states: m = -inf, d = 1, o 0) and the single-prefill kernel's
tests check; read for the FA2 backend only (backend "auto" may pick FA3 on Hopper, whose
source was not read), and not measured on a GPU here. PAGED = 16: FlashInfer takes any
page size at run time (uint_fastdiv in page.cuh); 16 is the one its docstrings and tests use
most. FlashInfer has no backward. Needs flashinfer and a CUDA GPU. The batch decode wrapper is
not used: the prefill wrapper takes Tq = 1 rows as well, and one code path is one thing to
trust."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ._kernels import check_qkv, require

PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "bottom_right"
WINDOW = "left"
LSE = "base2"
LSE_LAYOUT = "bsh"
MASKED_ROWS = "zero"
BACKWARD = False
DETERMINISTIC = False
FEATURES = ("gqa", "scale", "noncausal", "cross", "softcap")
DTYPES = (torch.float16, torch.bfloat16)
PAGED = 16

_flashinfer = require("flashinfer", subject=__name__, library="FlashInfer",
                      install="pip install flashinfer-python", needs_cuda=True)

_WORKSPACE_BYTES = 128 * 1024 * 1024  # the wrapper docstring's recommended size
_workspaces: dict[torch.device, Tensor] = {}


def _workspace(device: torch.device) -> Tensor:
    """One float workspace per device, reused: the wrapper only needs it 16-byte aligned."""
    if device not in _workspaces:
        _workspaces[device] = torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    return _workspaces[device]


def _check_window(where: str, window: Any, causal: bool) -> int:
    if window is None:
        return -1
    if not isinstance(window, int) or isinstance(window, bool) or window < -1 or not causal:
        raise ValueError(f"{where}(window={window!r}, causal={causal}): WINDOW is 'left', an "
                         "int >= -1 (-1 unbounded) for causal calls only, since without causal "
                         "FlashInfer bounds the left side alone.")
    return window


def _page_table(lengths: list[int], page: int, table: Tensor, device: torch.device,
                ) -> tuple[Tensor, Tensor, Tensor]:
    """(paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len), int32, for rows of
    `lengths` keys on the first pages each row of `table` (B, M) names."""
    counts = [-(-n // page) for n in lengths]
    indices = [table[b, :m].to(torch.int32) for b, m in enumerate(counts)]
    indptr = torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int32)
    last = [n - (m - 1) * page if m else 0 for n, m in zip(lengths, counts, strict=True)]
    return (indptr.to(device),
            (torch.cat(indices) if indices else torch.zeros(0, dtype=torch.int32)).to(device),
            torch.tensor(last, dtype=torch.int32, device=device))


def _run(q: Tensor, k_cache: Tensor, v_cache: Tensor, lengths: list[int], page: int,
         table: Tensor, *, causal: bool, scale: float | None, softcap: float | None,
         window_left: int, k: Tensor | None, v: Tensor | None) -> tuple[Tensor, Tensor]:
    """Append k, v (if any) then plan and run the prefill wrapper; q (B, Tq, H, D), caches
    (pages, page, G, D) NHD, `lengths` each row's keys after the append."""
    B, Tq, H, D = q.shape
    G, Dv = k_cache.size(2), v_cache.size(-1)
    device = q.device
    indptr, indices, last = _page_table(lengths, page, table, device)
    if k is not None and v is not None and k.size(1):
        Tnew = k.size(1)
        append_indptr = torch.arange(B + 1, dtype=torch.int32, device=device) * Tnew
        seq_lens = torch.tensor(lengths, dtype=torch.int32, device=device)
        batch_indices, positions = _flashinfer.get_batch_indices_positions(
            append_indptr, seq_lens, B * Tnew)
        _flashinfer.append_paged_kv_cache(
            k.reshape(B * Tnew, G, D), v.reshape(B * Tnew, G, Dv), batch_indices, positions,
            (k_cache, v_cache), indices, indptr, last, kv_layout="NHD")
    if B == 0 or Tq == 0:
        return q.new_zeros((B, Tq, H, Dv)), q.new_zeros((B, Tq, H), dtype=torch.float32)
    wrapper = _flashinfer.BatchPrefillWithPagedKVCacheWrapper(_workspace(device), "NHD")
    qo_indptr = torch.arange(B + 1, dtype=torch.int32, device=device) * Tq
    wrapper.plan(qo_indptr, indptr, indices, last, H, G, D, page, head_dim_vo=Dv,
                 causal=causal, sm_scale=scale, window_left=window_left,
                 logits_soft_cap=softcap, q_data_type=q.dtype, kv_data_type=k_cache.dtype)
    out, lse = wrapper.run(q.reshape(B * Tq, H, D), (k_cache, v_cache), return_lse=True)
    return out.reshape(B, Tq, H, Dv), lse.reshape(B, Tq, H)


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, scale: float | None = None,
              window: int | None = None, softcap: float | None = None) -> tuple[Tensor, Tensor]:
    """o (B, Tq, H, Dv) in q's dtype and lse (B, Tq, H), base 2: each row's k, v as one page of
    Tk keys."""
    B, H, G, Tq, Tk, D = check_qkv(__name__, LAYOUT, q, k, v)
    left = _check_window(f"{__name__}.attention", window, causal)
    if Tk == 0:
        raise ValueError(f"{__name__}.attention(k {tuple(k.shape)}): Tk = 0 keys cannot be one "
                         "page of a paged cache (a page holds at least one slot); supports() "
                         "declines such cases.")
    table = torch.arange(B, dtype=torch.int32).view(B, 1)
    return _run(q, k, v, [Tk] * B, Tk, table, causal=causal, scale=scale, softcap=softcap,
                window_left=left, k=None, v=None)


def attention_with_cache(q: Tensor, k_cache: Tensor, v_cache: Tensor, *, cache_seqlens: Tensor,
                         causal: bool, block_table: Tensor | None = None,
                         k: Tensor | None = None, v: Tensor | None = None,
                         scale: float | None = None, softcap: float | None = None,
                         ) -> tuple[Tensor, Tensor]:
    """(o, lse base 2) over a paged cache (k_cache, v_cache (N, P, G, D), block_table (B, M)) or
    a contiguous one ((B, Tcache, G, D)), k and v (B, Tnew, G, D) appended in place at
    cache_seqlens first."""
    where = (f"{__name__}.attention_with_cache(q {tuple(q.shape)}, k_cache "
             f"{tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)}, k "
             f"{None if k is None else tuple(k.shape)}, block_table "
             f"{None if block_table is None else tuple(block_table.shape)})")
    if q.dim() != 4 or k_cache.dim() != 4 or v_cache.dim() != 4:
        raise ValueError(f"{where}: q must be (B, Tq, H, D) and the caches (B, Tcache, G, D), "
                         "or (pages, P, G, D) with a block_table: all 4-D.")
    B, Tq, H, D = q.shape
    G = k_cache.size(2)
    if k_cache.shape[:3] != v_cache.shape[:3] or k_cache.size(3) != D or G == 0 or H % G:
        raise ValueError(f"{where}: k_cache and v_cache must agree on their first three axes, "
                         f"k_cache's head dim must be q's D={D}, and H={H} must be a positive "
                         f"multiple of G={G}, as FlashInfer's NHD cache is "
                         "[pages, page_size, num_kv_heads, head_dim].")
    if (k is None) != (v is None):
        raise ValueError(f"{where}: k and v are appended together, so give both or neither.")
    Tnew = 0 if k is None else k.size(1)
    if k is not None and v is not None and (
            k.dim() != 4 or tuple(k.shape) != (B, Tnew, G, D)
            or tuple(v.shape) != (B, Tnew, G, v_cache.size(3))
            or k.dtype != k_cache.dtype or v.dtype != v_cache.dtype):
        raise ValueError(f"{where}: k and v must be (B, Tnew, G, D) = ({B}, {Tnew}, {G}, ...) "
                         "in the caches' dtype, since append_paged_kv_cache copies them "
                         "into the cache's slots as they are.")
    seqlens = torch.as_tensor(cache_seqlens).reshape(-1).tolist()
    if len(seqlens) != B or any(n < 0 for n in seqlens):
        raise ValueError(f"{where}: cache_seqlens {seqlens} must hold B={B} counts >= 0, one "
                         "per row of q.")
    lengths = [int(n) + Tnew for n in seqlens]
    if block_table is None:
        if k_cache.size(0) != B or max(lengths, default=0) > k_cache.size(1):
            raise ValueError(f"{where}: a contiguous cache must have B={B} rows of room for "
                             f"cache_seqlens + Tnew = {lengths} tokens, but holds "
                             f"{k_cache.size(0)} rows of {k_cache.size(1)}.")
        page = max(k_cache.size(1), 1)
        table = torch.arange(B, dtype=torch.int32).view(B, 1)
    else:
        page = k_cache.size(1)
        table = torch.as_tensor(block_table).cpu()
        need = max((-(-n // page) for n in lengths), default=0) if page else 1
        if page == 0 or table.dim() != 2 or table.size(0) != B or need > table.size(1):
            raise ValueError(f"{where}: block_table must be (B, pages) = ({B}, >= {need}), "
                             f"enough pages of P={page} slots for cache_seqlens + Tnew = "
                             f"{lengths} tokens, as FlashInfer reads row b's pages from "
                             "paged_kv_indices in order.")
    return _run(q, k_cache, v_cache, lengths, page, table, causal=causal, scale=scale,
                softcap=softcap, window_left=-1, k=k, v=v)


def supports(case: dict[str, Any]) -> bool:
    """A window only with causal (the "left" encoding), at least one query, and for dense
    calls at least one key (Tk keys are one page; a cache row may hold none). Head dims are
    not screened: which ones a FlashInfer build takes (AOT or JIT) was not measured here."""
    window_ok = case.get("window") is None or bool(case.get("causal", True))
    keys_ok = bool(case.get("cache")) or int(case.get("Tk", 1)) >= 1
    return window_ok and keys_ok and int(case.get("Tq", 1)) >= 1
