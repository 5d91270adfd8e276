"""Correct: split-K (flash-decoding): the keys in 3 chunks, each chunk's o and LSE from the Triton
forward of ../_flash.py, merged by weights exp(lse_i - max_j lse_j)."""

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
    return _flash.split_keys(q, k, v, causal, scale, splits=3)
