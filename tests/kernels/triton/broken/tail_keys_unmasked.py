"""Broken: the last key block's padding (keys past Tk, loaded as zeros) left in the softmax: every
row gets the zero keys' weight when Tk is not a multiple of BLOCK_N. The Triton forward of
../_flash.py with that one mistake."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _flash  # noqa: E402

EXPECTED = frozenset({"oracle", "fresh_results"})
_flash.dense_kernel(globals(), bug=_flash.TAIL_KEYS_UNMASKED)
