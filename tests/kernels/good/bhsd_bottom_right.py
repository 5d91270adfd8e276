"""Correct: a FlashAttention-2-convention kernel in BHSD. The causal diagonal sits at the bottom
right (query i sees keys j <= i + Tk - Tq), windows are FA2's inclusive (left, right) pair with -1
unbounded, the LSE is natural log in (B, H, Tq), rows that see no key give o = 0 and lse = -inf.
It takes every feature: GQA, a scale, non-causal, Tq != Tk, softcap, ALiBi and sinks."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, PROTOCOL, Kernel, bind

EXPECTED: frozenset[str] = frozenset()
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_GRAD = True  # its LSE is plain torch math: differentiable
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES
DTYPES = (torch.float32, torch.float64, torch.bfloat16)

attention, supports = bind(Kernel, globals())

__all__ = ["BACKWARD", "CAUSAL", "DETERMINISTIC", "DTYPES", "EXPECTED", "FEATURES", "LAYOUT",
           "LSE", "LSE_LAYOUT", "MASKED_ROWS", "PROTOCOL", "WINDOW", "attention", "supports"]
