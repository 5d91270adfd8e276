"""Masked rows give uniform weights: the mask is a large finite negative (`torch.finfo(dtype).min`,
as Hugging Face models build it, or -1e9) instead of -inf, so a row that sees no key gets equal
weights on every key: the mean of v, and a finite LSE, where o = 0 and lse = -inf are declared.
Partly masked rows are exact, so only empty rows show it (pytorch #110213, left-padded Falcon
with an SDPA mask; the FA docstring: "If the row of the mask is all zero, the output will be
zero")."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"masked_rows"})
TRIGGER = {"Tq": 7, "Tk": 4}
PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES


class FiniteMask(Kernel):
    def hide(self, s, seen):
        return s.masked_fill(~seen, torch.finfo(s.dtype).min)  # the bug: finite, not -inf


attention, supports = bind(FiniteMask, globals())
