"""Correct: flash_attn_with_kvcache's conventions with a paged cache. BSHD, the causal diagonal
at the bottom right, a natural LSE (B, H, Tq); attention_with_cache appends k and v in place at
cache_seqlens into the pages block_table names (page size PAGED = 4, so short caches cross page
boundaries), then attends over each row's cache_seqlens + Tnew keys."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, PROTOCOL, Kernel, bind_cache

EXPECTED: frozenset[str] = frozenset()
LAYOUT = "bshd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES
PAGED = 4
DTYPES = (torch.float32, torch.bfloat16)

attention, attention_with_cache, supports = bind_cache(Kernel, globals())

__all__ = ["BACKWARD", "CAUSAL", "DETERMINISTIC", "DTYPES", "EXPECTED", "FEATURES", "LAYOUT",
           "LSE", "MASKED_ROWS", "PAGED", "PROTOCOL", "WINDOW", "attention",
           "attention_with_cache", "supports"]
