"""torch's `F.scaled_dot_product_attention` as a kernel subject (PROTOCOL = "kernel"): BHSD,
`is_causal` (its causal diagonal sits top-left), `enable_gqa` when G < H, `scale`. SDPA returns
no log-sum-exp. With the top-left corner every query sees key 0, so the only row that sees no key
is one of a Tk = 0 call; SDPA gives it zeros (measured on CPU, torch 2.13, float32/float64/
bfloat16), so MASKED_ROWS is "zero"."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ._kernels import check_qkv

PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "top_left"
WINDOW = None
LSE = None
MASKED_ROWS = "zero"
BACKWARD = True
# SDPA's CUDA backends accumulate dq with atomics: a bit-exact backward is not promised.
DETERMINISTIC = False
FEATURES = ("gqa", "scale", "noncausal", "cross")
DTYPES = (torch.float32, torch.float64, torch.bfloat16)

_NAME = "attnspec.subjects.kernel_sdpa"


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool,
              scale: float | None = None) -> Tensor:
    """o (B, H, Tq, Dv) in q's dtype."""
    B, H, G, Tq, Tk, D = check_qkv(_NAME, LAYOUT, q, k, v)
    out: Tensor = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                                 enable_gqa=G < H)
    return out


def supports(case: dict[str, Any]) -> bool:
    """Every case the features allow."""
    return True
