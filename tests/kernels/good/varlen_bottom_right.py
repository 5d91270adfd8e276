"""Correct: `flash_attn_varlen_func`'s convention. Sequences are packed, q (total_q, H, D) and k,
v (total_k, G, D), bounded by cu_seqlens_q / cu_seqlens_k; the corner (bottom right), the window
(FA2's pair, -1 unbounded) and ALiBi apply within each sequence; the LSE is natural log in
(H, total_q). A sequence with no keys gives o = 0 and lse = -inf on its queries; one with no
queries gives nothing (FA4 tests both)."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, PROTOCOL, Kernel, bind

EXPECTED: frozenset[str] = frozenset()
LAYOUT = "varlen"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_GRAD = True  # its LSE is plain torch math: differentiable
LSE_LAYOUT = "hs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES
DTYPES = (torch.float32, torch.float64, torch.bfloat16)

attention, supports = bind(Kernel, globals())

__all__ = ["BACKWARD", "CAUSAL", "DETERMINISTIC", "DTYPES", "EXPECTED", "FEATURES", "LAYOUT",
           "LSE", "LSE_LAYOUT", "MASKED_ROWS", "PROTOCOL", "WINDOW", "attention", "supports"]
