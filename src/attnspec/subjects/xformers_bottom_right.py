"""xformers' `memory_efficient_attention` as a kernel subject with its bottom-right biases:
`LowerTriangularFromBottomRightMask` for causal, `LocalAttentionFromBottomRightMask(window_left,
window_right)` for a window (keys i' - left .. i' + right inclusive, i' = i + Tk - Tq; -1 is
passed as Tq + Tk, since xformers wants bounds >= 0). Otherwise as attnspec.subjects.xformers
(BMHK, 5-D GQA, the LSE cut back from CUTLASS's padding). xformers says its bottom-right causal
forward "is not defined" when there are more queries than keys, so supports() keeps Tk >= Tq
for causal and windowed cases, where every query sees its diagonal key: no row is masked."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ._kernels import require, window_pair

# Checked here first, so that a missing xformers is reported under this subject's name.
require("xformers.ops", subject=__name__, library="xformers", install="pip install xformers",
        needs_cuda=True)
from .xformers import _attn_bias, attend  # noqa: E402

PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_LAYOUT = "bhs"
MASKED_ROWS = "undefined"  # not defined by xformers; supports() leaves no such row
BACKWARD = True
DETERMINISTIC = False
FEATURES = ("gqa", "scale", "noncausal", "cross")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, scale: float | None = None,
              window: tuple[int, int] | None = None) -> tuple[Tensor, Tensor]:
    """o (B, Tq, H, Dv) in q's dtype and lse (B, H, Tq) natural log."""
    left, right = window_pair(__name__, window, causal)
    if window is not None:
        unbounded = q.size(1) + k.size(1)
        bias = _attn_bias.LocalAttentionFromBottomRightMask(
            window_left=left if left >= 0 else unbounded,
            window_right=right if right >= 0 else unbounded)
    elif causal:
        bias = _attn_bias.LowerTriangularFromBottomRightMask()
    else:
        bias = None
    return attend(__name__, q, k, v, bias, scale)


def supports(case: dict[str, Any]) -> bool:
    """Tk >= Tq whenever the corner or a window applies (module docstring), and Tk >= 1."""
    Tq, Tk = int(case.get("Tq", 1)), int(case.get("Tk", 1))
    bounded = bool(case.get("causal", True)) or case.get("window") is not None
    return Tk >= 1 and (Tk >= Tq or not bounded)
