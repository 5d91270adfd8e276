"""Correct: FlashInfer's ragged-prefill convention. Packed sequences as in varlen, the causal
diagonal at the bottom right, the window as FlashInfer's `window_left` (an int, inclusive: keys
i' - left .. i', -1 unbounded), and the LSE in **base 2** laid out (total_q, H), as FlashInfer
returns it (its tests build references as logsumexp / ln 2). A check that forgets to divide by
ln 2, or reads the LSE as (H, total_q), false-alarms on it."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, PROTOCOL, Kernel, bind

EXPECTED: frozenset[str] = frozenset()
LAYOUT = "varlen"
CAUSAL = "bottom_right"
WINDOW = "left"
LSE = "base2"
LSE_GRAD = True  # its LSE is plain torch math: differentiable
LSE_LAYOUT = "sh"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES
DTYPES = (torch.float32, torch.float64, torch.bfloat16)

attention, supports = bind(Kernel, globals())

__all__ = ["BACKWARD", "CAUSAL", "DETERMINISTIC", "DTYPES", "EXPECTED", "FEATURES", "LAYOUT",
           "LSE", "LSE_LAYOUT", "MASKED_ROWS", "PROTOCOL", "WINDOW", "attention", "supports"]
