"""Correct: split-K (flash-decoding): the keys in 3 chunks, each chunk's o and LSE from the Triton
forward of ../_flash.py, merged by weights exp(lse_i - max_j lse_j)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _flash  # noqa: E402

EXPECTED: frozenset[str] = frozenset()
_flash.split_kernel(globals(), splits=3)
