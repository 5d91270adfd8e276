"""Broken: the online softmax that never rescales the running sum and output when a later key block
raises the row max (right only while one key block suffices). The Triton forward of ../_flash.py
with that one mistake."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _flash  # noqa: E402

EXPECTED = frozenset({"oracle"})
_flash.dense_kernel(globals(), bug=_flash.NO_RESCALE)
