"""Correct: the Triton forward of ../_flash.py on packed sequences (flash_attn_varlen_func's
convention): q (total_q, H, D), k and v (total_k, G, D) bounded by cu_seqlens_q and
cu_seqlens_k, the bottom-right corner within each sequence, the LSE (H, total_q)."""

from __future__ import annotations

import os
import sys

import torch
from torch import Tensor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _flash  # noqa: E402

EXPECTED: frozenset[str] = frozenset()
PROTOCOL = "kernel"
LAYOUT = "varlen"
CAUSAL = "bottom_right"
WINDOW = None
LSE = "natural"
LSE_LAYOUT = "hs"
MASKED_ROWS = "zero"
BACKWARD = False
DETERMINISTIC = True
FEATURES = ("gqa", "scale", "noncausal", "cross")
DTYPES = (torch.float32, torch.float16)


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool,
              cu_seqlens_q: Tensor | None = None, cu_seqlens_k: Tensor | None = None,
              max_seqlen_q: int = 0, max_seqlen_k: int = 0,
              scale: float | None = None) -> tuple[Tensor, Tensor]:
    if cu_seqlens_q is None or cu_seqlens_k is None:
        raise ValueError("a varlen kernel: give cu_seqlens_q and cu_seqlens_k")
    return _flash.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal, scale)
