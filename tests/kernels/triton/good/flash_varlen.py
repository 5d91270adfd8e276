"""Correct: the Triton forward of ../_flash.py on packed sequences (flash_attn_varlen_func's
convention): q (total_q, H, D), k and v (total_k, G, D) bounded by cu_seqlens_q and
cu_seqlens_k, the bottom-right corner within each sequence, the LSE (H, total_q)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _flash  # noqa: E402

EXPECTED: frozenset[str] = frozenset()
_flash.varlen_kernel(globals())
