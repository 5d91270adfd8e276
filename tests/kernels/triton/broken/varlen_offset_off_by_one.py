"""Broken: an off-by-one in the varlen offsets, each sequence's key count taken one short of
cu_seqlens_k[b + 1] - cu_seqlens_k[b] (its last key never seen); otherwise the Triton forward
of ../_flash.py on packed sequences (flash_attn_varlen_func's convention)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _flash  # noqa: E402

EXPECTED = frozenset({"varlen", "oracle"})
_flash.varlen_kernel(globals(), bug=_flash.VARLEN_OFFSET_OFF_BY_ONE)
