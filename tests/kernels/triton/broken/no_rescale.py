"""Broken: the online softmax that never rescales the running sum and output when a later key block
raises the row max (right only while one key block suffices). The Triton forward of ../_flash.py
with that one mistake."""

from __future__ import annotations

import os
import sys

import torch
from torch import Tensor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _flash  # noqa: E402

EXPECTED = frozenset({"oracle"})
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
    return _flash.dense(q, k, v, causal, scale, bug=_flash.NO_RESCALE)
