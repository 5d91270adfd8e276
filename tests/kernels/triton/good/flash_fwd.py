"""Correct: a FlashAttention-style Triton forward (../_flash.py), dense (B, H, T, D), bottom-right
causal corner, grouped kv heads, a scale of its own, Tq != Tk, o and the natural-log LSE."""

from __future__ import annotations

import os
import sys

import torch
from torch import Tensor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _flash  # noqa: E402

EXPECTED: frozenset[str] = frozenset()
PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
WINDOW = None
LSE = "natural"
MASKED_ROWS = "zero"
BACKWARD = False
DETERMINISTIC = True
FEATURES = ("gqa", "scale", "noncausal", "cross")
DTYPES = (torch.float32, torch.float16)


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool,
              scale: float | None = None) -> tuple[Tensor, Tensor]:
    return _flash.dense(q, k, v, causal, scale)
