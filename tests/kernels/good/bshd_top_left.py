"""Correct: an xformers-convention kernel in BSHD (q (B, Tq, H, D), k and v (B, Tk, G, D)) with
the causal diagonal at the top left, as `LowerTriangularMask` and SDPA's `is_causal` put it (query
i sees keys j <= i). Windows are FA4's pair with None unbounded; the LSE is natural log laid out
(B, Tq, H). A layout-blind check (one that reads dim 1 as heads) false-alarms on it."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, PROTOCOL, Kernel, bind

EXPECTED: frozenset[str] = frozenset()
LAYOUT = "bshd"
CAUSAL = "top_left"
WINDOW = "pair_none"
LSE = "natural"
LSE_GRAD = True  # its LSE is plain torch math: differentiable
LSE_LAYOUT = "bsh"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES
DTYPES = (torch.float32, torch.float64, torch.bfloat16)

attention, supports = bind(Kernel, globals())

__all__ = ["BACKWARD", "CAUSAL", "DETERMINISTIC", "DTYPES", "EXPECTED", "FEATURES", "LAYOUT",
           "LSE", "LSE_LAYOUT", "MASKED_ROWS", "PROTOCOL", "WINDOW", "attention", "supports"]
