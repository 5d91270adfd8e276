"""Correct: a FlashAttention-style Triton forward (../_flash.py), dense (B, H, T, D), bottom-right
causal corner, grouped kv heads, a scale of its own, Tq != Tk, o and the natural-log LSE."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _flash  # noqa: E402

EXPECTED: frozenset[str] = frozenset()
_flash.dense_kernel(globals())
