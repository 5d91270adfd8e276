"""A plain-torch stand-in for FlashInfer's `single_prefill_with_kv_cache`, for CPU tests of
attnspec's adapters. Written from flashinfer/prefill.py's signature and docstring (@fb28d724):
q [qo_len, Hq, D], k and v [kv_len, Hkv, D] (NHD) or [Hkv, kv_len, D] (HND); causal aligned
bottom-right; window_left inclusive (-1: none), bounding the left side only; logits_soft_cap
applied to the scaled logits; lse [qo_len, Hq] float32 in base 2; a row that sees no key gives
o 0 and lse -inf. No backward, as FlashInfer has none."""

from __future__ import annotations

import math

import torch
from _standin_dense import attend, keep_mask

ATTNSPEC_STANDIN = True
__version__ = "0.5.0+standin"


def single_prefill_with_kv_cache(q, k, v, scale_q=None, scale_k=None, scale_v=None,
                                 o_dtype=None, custom_mask=None, packed_custom_mask=None,
                                 causal=False, kv_layout="NHD", pos_encoding_mode="NONE",
                                 use_fp16_qk_reduction=False, sm_scale=None, window_left=-1,
                                 logits_soft_cap=None, rope_scale=None, rope_theta=None,
                                 backend="auto", return_lse=False, kv_cache_sf=None,
                                 k_scale=None, v_scale=None):
    if pos_encoding_mode != "NONE" or custom_mask is not None or packed_custom_mask is not None:
        raise NotImplementedError("flashinfer stand-in: no RoPE, ALiBi or custom masks")
    if kv_layout not in ("NHD", "HND"):
        raise KeyError(f"Invalid kv_layout {kv_layout}")
    if kv_layout == "HND":
        k, v = k.transpose(0, 1), v.transpose(0, 1)
    if q.size(1) % k.size(1):
        raise ValueError("num_qo_heads must be a multiple of num_kv_heads")
    Tq, Tk = q.size(0), k.size(0)
    scale = 1.0 / math.sqrt(q.size(-1)) if sm_scale is None else sm_scale
    keep = keep_mask(Tq, Tk, causal=causal, left=window_left, right=-1, device=q.device)
    with torch.no_grad():
        out, lse, _ = attend(q[None], k[None], v[None], keep, scale=scale,
                             softcap=logits_soft_cap or 0.0)
    out = out[0].to(o_dtype or q.dtype)
    lse = (lse[0].transpose(0, 1) / math.log(2)).float()
    return (out, lse) if return_lse else out


# The paged-cache API (BatchPrefillWithPagedKVCacheWrapper, append_paged_kv_cache), re-exported
# at the top level as flashinfer does.
from .paged import (  # noqa: E402
    BatchPrefillWithPagedKVCacheWrapper,
    append_paged_kv_cache,
    get_batch_indices_positions,
    get_seq_lens,
)

__all__ = ["single_prefill_with_kv_cache", "BatchPrefillWithPagedKVCacheWrapper",
           "append_paged_kv_cache", "get_batch_indices_positions", "get_seq_lens"]
