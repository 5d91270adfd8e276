"""torch's `F.scaled_dot_product_attention` with `torch.nn.attention.bias.causal_lower_right(Tq,
Tk)` as its attn_mask, as a kernel subject (PROTOCOL = "kernel"): BHSD, the causal diagonal at
the bottom-right corner (query i sees keys j <= i + Tk - Tq), `enable_gqa` when G < H, `scale`.
With Tq > Tk the first Tq - Tk queries see no key. torch warns that those rows "will produce
NaNs", but on CPU (torch 2.13.0, float32, float64 and bfloat16, with and without gradients) the
output rows and their dq are exactly 0, and dk, dv get nothing from them: MASKED_ROWS is "zero"
as measured there. On CUDA the mask dispatches to other backends, not measured here."""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.bias import causal_lower_right

from ._kernels import check_qkv

PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
WINDOW = None
LSE = None
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = False  # as kernel_sdpa: CUDA backends' backward uses atomics
FEATURES = ("gqa", "scale", "noncausal", "cross")
DTYPES = (torch.float32, torch.float64, torch.bfloat16)

_NAME = "attnspec.subjects.kernel_sdpa_lower_right"


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool,
              scale: float | None = None) -> Tensor:
    """o (B, H, Tq, Dv) in q's dtype."""
    B, H, G, Tq, Tk, D = check_qkv(_NAME, LAYOUT, q, k, v)
    mask = None
    if causal:
        with warnings.catch_warnings():
            # Its NaN warning for Tq > Tk: those rows are measured 0 on CPU (module docstring).
            warnings.simplefilter("ignore", UserWarning)
            mask = causal_lower_right(Tq, Tk)
    out: Tensor = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                                 enable_gqa=G < H)
    return out


def supports(case: dict[str, Any]) -> bool:
    """Every case the features allow."""
    return True
