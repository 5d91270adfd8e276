"""Correct and minimal: torch's own `scaled_dot_product_attention(is_causal=True)` behind the
protocol, declaring nothing beyond the base case (causal self-attention, H == G, Tq == Tk, scale
1/sqrt(D)), no LSE, no window, top-left corner (SDPA's `is_causal`). Its `attention` takes only
`causal` and raises on any other keyword, so an engine that passes a keyword the subject did not
declare (a scale, a window, a knob) gets a clear error instead of a silent pass. Written without
the shared catalogue code: it checks the self-check's float64 formulation against torch itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

EXPECTED: frozenset[str] = frozenset()
PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "top_left"
WINDOW = None
LSE = None
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = False
FEATURES = ()
DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool) -> Tensor:
    if not causal or q.shape != k.shape or k.shape != v.shape:
        raise ValueError(f"sdpa_minimal attention: causal={causal}, q {tuple(q.shape)}, k "
                         f"{tuple(k.shape)}, v {tuple(v.shape)}: it declares only the base case "
                         "(causal, H == G, Tq == Tk)")
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def supports(case: dict) -> bool:
    return True
