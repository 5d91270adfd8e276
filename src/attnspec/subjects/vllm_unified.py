"""vLLM's Triton unified attention, `unified_attention` (vllm/v1/attention/ops/
triton_unified_attention.py, the kernel of the TRITON_ATTN backend), as a kernel subject
(PROTOCOL = "kernel"). Read from the vllm 0.34.0 wheel: triton_unified_attention.py
(unified_attention, kernel_unified_attention, reduce_segments), triton_attention_helpers.py
(the masks, the online softmax, the tile bounds) and v1/attention/backends/triton_attn.py
(TritonAttentionImpl.forward and do_kv_cache_update, the metadata builder, the backend's
declared limits). Called as TritonAttentionImpl.forward calls it; nothing of the attention is
reimplemented.

How attnspec's calls become vLLM's:
- q (B, Tq, H, D) is packed as vLLM's query [B * Tq, H, D] with cu_seqlens_q = query_start_loc
  = [0, Tq, 2 Tq, ...]; o is written into an `out` of that shape, as forward does.
- a paged cache (N, P, G, D) with block_table (B, M) is vLLM's key_cache / value_cache as
  forward hands them over ([num_blocks, block_size, num_kv_heads, head_size], strided views of
  one kv_cache there, separate tensors here: the kernel takes any strides), passed as they
  are, with seqused_k = seq_lens = cache_seqlens + Tnew. PAGED = 16: the backend takes block
  sizes that are multiples of 16 (TritonAttentionBackend.get_supported_kernel_block_sizes).
- the new k, v are written into their slots (slot = block_table[b, pos // P] * P + pos % P,
  vLLM's slot_mapping) before the call, as do_kv_cache_update does first. vLLM writes them
  with triton_reshape_and_cache_flash, which cannot run without CUDA (it asks
  torch.cuda.get_device_capability, triton_reshape_and_cache_flash.py:445), so they are
  written here by indexing: a copy, not attention.
- a contiguous cache (B, Tcache, G, D), and `attention`'s k, v (B, Tk, G, D), are copied into
  pages of 16 (row b on pages b * n .. b * n + n - 1), since vLLM has no contiguous-cache
  entry; the new tokens go into the contiguous cache first.
The queries are the last query_len of each sequence's seq_len keys (context_len = seq_len -
query_len in the kernel), so the causal diagonal sits bottom-right. The window is vLLM's
window_size pair, of which the kernel reads only the left side (SLIDING_WINDOW = 1 +
window_size[0]): causal calls get (left, 0) as the backend builds it; a non-causal window is
symmetric (|q - k| < left + 1 in compute_kv_seq_mask), so only equal sides are taken.
softcap as logits_soft_cap (0 off), ALiBi slopes (H,) float32 (slope x (j - context_len):
the causal -slope x (i - j) up to a per-row constant), sinks (H,) float32 (the initial row
max, L = 1). No LSE is returned. `split_kv` gives the kernel the split-K scratch vLLM's
metadata builder allocates (16 softmax segments, seq_threshold_3D = 128 // G), with which it
runs its 3D kernel and reduce_segments for causal calls of up to 8 queries per sequence.

Without a GPU, vllm.triton_utils disables Triton and swaps in a placeholder (so @triton.jit
returns the plain Python function) unless exactly one Triton GPU driver is active
(triton_utils/importing.py:71-76), except where CUDA_VISIBLE_DEVICES is set and empty, which it
takes for a distributed setup (importing.py:64). Under TRITON_INTERPRET=1 this module therefore
sets CUDA_VISIBLE_DEVICES="" when it is not set, before vLLM is imported: no GPU is hidden
(attnspec interprets only where it sees none) and nothing vLLM computes changes. Needs vllm
(installed --no-deps: these modules import no compiled extension) and triton."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor

from ._kernels import KernelUnavailable, check_qkv, per_head, require, window_pair

__all__ = ["PROTOCOL", "LAYOUT", "CAUSAL", "WINDOW", "LSE", "MASKED_ROWS", "BACKWARD",
           "DETERMINISTIC", "FEATURES", "KNOBS", "PAGED", "DTYPES", "TRITON", "attention",
           "attention_with_cache", "supports"]

PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = None
MASKED_ROWS = "zero"  # a sequence of no keys runs no tile: o = 0 / L = 1 = 0
BACKWARD = False
DETERMINISTIC = True  # one program per (query block, kv head[, segment]); no atomics
FEATURES = ("gqa", "scale", "noncausal", "cross", "softcap", "alibi", "sinks")
KNOBS = {"split_kv": (False, True)}
PAGED = 16
DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # TritonAttentionBackend.supported_dtypes
TRITON = True

_MIN_HEAD_DIM = 32  # TritonAttentionBackend.supports_head_size: head_size >= 32
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
_PAGE = 16
_SEGMENTS = 16  # triton_attn.py NUM_PAR_SOFTMAX_SEGMENTS
_MIN_LAUNCH_GRID_SIZE_2D = 128  # triton_attn.py: seq_threshold_3D = this // num_kv_heads

if os.environ.get("TRITON_INTERPRET") == "1":
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

_ops = require("vllm.v1.attention.ops.triton_unified_attention", subject=__name__,
               library="vLLM's Triton unified attention",
               install="pip install --no-deps vllm (docs/triton.md)", needs_cuda=False)
if not getattr(_ops.triton, "__file__", None):  # vllm.triton_utils' TritonPlaceholder
    raise KernelUnavailable(
        __name__, "vLLM with Triton enabled",
        "vllm.triton_utils replaced triton by its placeholder (no active Triton GPU driver)",
        "run on a GPU, or under TRITON_INTERPRET=1 with CUDA_VISIBLE_DEVICES set empty.")


def _pages_of(rows: Tensor, lengths: list[int]) -> tuple[Tensor, Tensor]:
    """A contiguous (B, T, G, D) cache as pages of 16: (B * n, 16, G, D) and block_table (B, n)."""
    B, T, G, D = rows.shape
    n = max(-(-max(lengths, default=0) // _PAGE), 1)
    paged = rows.new_zeros((B, n * _PAGE, G, D))
    keep = min(T, n * _PAGE)
    paged[:, :keep] = rows[:, :keep]
    table = torch.arange(B * n, dtype=torch.int32, device=rows.device).view(B, n)
    return paged.view(B * n, _PAGE, G, D), table


def _run(q: Tensor, k_cache: Tensor, v_cache: Tensor, table: Tensor, lengths: list[int], *,
         causal: bool, scale: float | None, window: Any, softcap: float | None,
         alibi_slopes: Tensor | None, sinks: Tensor | None, split_kv: bool) -> Tensor:
    """unified_attention over pages (N, 16, G, D) for q (B, Tq, H, D): o (B, Tq, H, D)."""
    B, Tq, H, D = q.shape
    G = k_cache.size(2)
    out = q.new_empty((B * Tq, H, D))
    if B * Tq == 0:
        return out.view(B, Tq, H, D)
    left, right = window_pair(__name__, window, causal)
    if not causal and left != right:
        raise ValueError(f"{__name__}(window={window!r}, causal=False): vLLM's non-causal "
                         "window is symmetric (SLIDING_WINDOW = 1 + window_size[0] on both "
                         "sides); give left == right, or no window.")
    device = q.device
    packed = q.reshape(B * Tq, H, D)
    extra: dict[str, Any] = {}
    if split_kv:  # the scratch TritonAttentionMetadataBuilder.__init__ allocates
        rows, padded = B * Tq, 1 << max(D - 1, 0).bit_length()
        extra = {"seq_threshold_3D": _MIN_LAUNCH_GRID_SIZE_2D // G,
                 "num_par_softmax_segments": _SEGMENTS,
                 "softmax_segm_output": torch.empty((rows, H, _SEGMENTS, padded),
                                                    dtype=torch.float32, device=device),
                 "softmax_segm_max": torch.empty((rows, H, _SEGMENTS), dtype=torch.float32,
                                                 device=device),
                 "softmax_segm_expsum": torch.empty((rows, H, _SEGMENTS),
                                                    dtype=torch.float32, device=device)}
    if alibi_slopes is not None:
        alibi_slopes = per_head(__name__, "alibi_slopes", alibi_slopes, H).float().to(device)
    if sinks is not None:
        sinks = per_head(__name__, "sinks", sinks, H).float().to(device)
    _ops.unified_attention(
        q=packed, k=k_cache, v=v_cache, out=out,
        cu_seqlens_q=torch.arange(B + 1, dtype=torch.int32, device=device) * Tq,
        max_seqlen_q=Tq, seqused_k=torch.tensor(lengths, dtype=torch.int32, device=device),
        max_seqlen_k=max(lengths), softmax_scale=float(D ** -0.5 if scale is None else scale),
        causal=causal, window_size=(left, 0 if causal else left), block_table=table,
        softcap=0.0 if softcap is None else float(softcap), q_descale=None, k_descale=None,
        v_descale=None, alibi_slopes=alibi_slopes, sinks=sinks, **extra)
    return out.view(B, Tq, H, D)


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, scale: float | None = None,
              window: Any = None, softcap: float | None = None,
              alibi_slopes: Tensor | None = None, sinks: Tensor | None = None,
              split_kv: bool = False) -> Tensor:
    """o (B, Tq, H, D): each row's Tk keys copied into pages of 16, the queries its last Tq."""
    B, H, G, Tq, Tk, D = check_qkv(__name__, LAYOUT, q, k, v)
    if Tq > Tk:
        raise ValueError(f"{__name__}.attention(Tq={Tq}, Tk={Tk}): vLLM's queries are the last "
                         "query_len of seq_len tokens, so Tq <= Tk; supports() declines this.")
    k_cache, table = _pages_of(k, [Tk] * B)
    v_cache, _ = _pages_of(v, [Tk] * B)
    return _run(q, k_cache, v_cache, table, [Tk] * B, causal=causal, scale=scale,
                window=window, softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks,
                split_kv=split_kv)


def attention_with_cache(q: Tensor, k_cache: Tensor, v_cache: Tensor, *, cache_seqlens: Tensor,
                         causal: bool, block_table: Tensor | None = None,
                         k: Tensor | None = None, v: Tensor | None = None,
                         scale: float | None = None, softcap: float | None = None) -> Tensor:
    """o (B, Tq, H, D) over a paged cache ((N, 16, G, D), block_table (B, M)) or a contiguous
    one ((B, Tcache, G, D)), k and v (B, Tnew, G, D) written in at cache_seqlens first."""
    where = (f"{__name__}.attention_with_cache(q {tuple(q.shape)}, k_cache "
             f"{tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)}, k "
             f"{None if k is None else tuple(k.shape)}, block_table "
             f"{None if block_table is None else tuple(block_table.shape)})")
    if q.dim() != 4 or k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        raise ValueError(f"{where}: q must be (B, Tq, H, D) and both caches one 4-D shape, "
                         "(pages, 16, G, D) with a block_table or (B, Tcache, G, D).")
    B, Tq, H, D = q.shape
    G = k_cache.size(2)
    if k_cache.size(3) != D or G == 0 or H % G:
        raise ValueError(f"{where}: the caches' head dim must be q's D={D} and H={H} a "
                         f"positive multiple of G={G}.")
    if (k is None) != (v is None):
        raise ValueError(f"{where}: k and v are appended together, so give both or neither.")
    Tnew = 0 if k is None else k.size(1)
    if k is not None and v is not None and (tuple(k.shape) != (B, Tnew, G, D)
                                            or tuple(v.shape) != (B, Tnew, G, D)):
        raise ValueError(f"{where}: k and v must be (B, Tnew, G, D) = ({B}, {Tnew}, {G}, {D}).")
    seqlens = [int(n) for n in torch.as_tensor(cache_seqlens).reshape(-1).tolist()]
    if len(seqlens) != B or any(n < 0 for n in seqlens):
        raise ValueError(f"{where}: cache_seqlens {seqlens} must hold B={B} counts >= 0.")
    lengths = [n + Tnew for n in seqlens]
    if block_table is None:
        if k_cache.size(0) != B or max(lengths, default=0) > k_cache.size(1):
            raise ValueError(f"{where}: a contiguous cache needs B={B} rows of room for "
                             f"cache_seqlens + Tnew = {lengths} tokens.")
        for b, n in enumerate(seqlens):  # the new tokens, into the caller's cache
            if k is not None and v is not None and Tnew:
                k_cache[b, n:n + Tnew] = k[b]
                v_cache[b, n:n + Tnew] = v[b]
        kp, table = _pages_of(k_cache, lengths)
        vp, _ = _pages_of(v_cache, lengths)
    else:
        table = torch.as_tensor(block_table).to(torch.int32)
        need = max((-(-n // _PAGE) for n in lengths), default=0)
        if k_cache.size(1) != _PAGE or table.dim() != 2 or table.size(0) != B \
                or need > table.size(1):
            raise ValueError(f"{where}: PAGED = {_PAGE}: pages of {_PAGE} slots and a "
                             f"block_table (B, pages) = ({B}, >= {need}) for cache_seqlens + "
                             f"Tnew = {lengths} tokens.")
        if k is not None and v is not None and Tnew:  # vLLM's slot_mapping
            pos = torch.tensor(seqlens, device=table.device)[:, None] + torch.arange(
                Tnew, device=table.device)
            pages = table.gather(1, (pos // _PAGE).long()).long()
            k_cache[pages, pos % _PAGE] = k
            v_cache[pages, pos % _PAGE] = v
        kp, vp = k_cache, v_cache
    return _run(q, kp, vp, table.to(q.device), lengths, causal=causal, scale=scale,
                window=None, softcap=softcap, alibi_slopes=None, sinks=None, split_kv=False)


def supports(case: dict[str, Any]) -> bool:
    """What vLLM's Triton backend takes: head dims of 32 and more (supports_head_size; not
    screened under the interpreter, where the kernel's masked, padded head dim runs any D and
    attnspec's oracle and cache draws stay below 32: those examples go past the backend's
    use), queries
    that are the last of their sequence's keys (Tq <= Tk; a cache row holds cache_seqlens +
    Tnew keys and attnspec's cache calls keep Tq <= Tnew or one query), a non-causal window
    only symmetric (the kernel reads window_size[0] alone) and ALiBi only causal (the kernel
    adds slope x (j - context_len), which is -slope x |i - j| up to a row constant only where
    j <= i) and not with sinks (the sink logit gets no such constant: the kernel weighs it
    against keys scaled by exp(slope x i) for the i-th query, where -slope x |i - j| gives
    exp(0); prefix_prefill.py asserts the pair unsupported, the unified kernel takes it)."""
    if not _INTERPRETED and int(case.get("D", 64)) < _MIN_HEAD_DIM:
        return False
    if not case.get("cache") and int(case.get("Tq", 1)) > int(case.get("Tk", 1)):
        return False
    causal = bool(case.get("causal", True))
    window = case.get("window")
    if window is not None and not causal:
        left, right = (-1 if w is None else int(w) for w in window)
        if left != right:
            return False
    return not (case.get("alibi") and (not causal or case.get("sinks")))
