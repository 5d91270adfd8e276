"""Broken: the causal mask left off the diagonal block (the last key block of each query block), so
a query there sees up to BLOCK_N - 1 later keys. The Triton forward of ../_flash.py with that
one mistake."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _flash  # noqa: E402

EXPECTED = frozenset({"causality"})
_flash.dense_kernel(globals(), bug=_flash.LAST_BLOCK_UNMASKED)
