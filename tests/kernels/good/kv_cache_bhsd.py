"""Correct: a contiguous kv cache in BHSD (k_cache (B, G, Tcache, D)) for a kernel whose own
attention puts the causal diagonal at the top left, as SDPA's is_causal does: its
attention_with_cache still sits query i at cache_seqlens + Tnew - Tq + i (the bottom right, as
flash_attn_with_kvcache does), which a check that took CAUSAL for the cache call would miss."""

from __future__ import annotations

import torch
from _kernel import PROTOCOL, Kernel, bind_cache

EXPECTED: frozenset[str] = frozenset()
LAYOUT = "bhsd"
CAUSAL = "top_left"
LSE = None
WINDOW = None
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ("gqa", "scale", "noncausal", "cross", "softcap")
DTYPES = (torch.float32, torch.float64)

attention, attention_with_cache, supports = bind_cache(Kernel, globals())

__all__ = ["BACKWARD", "CAUSAL", "DETERMINISTIC", "DTYPES", "EXPECTED", "FEATURES", "LAYOUT",
           "LSE", "MASKED_ROWS", "PROTOCOL", "WINDOW", "attention", "attention_with_cache",
           "supports"]
