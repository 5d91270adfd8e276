"""Correct under its declaration: MASKED_ROWS = "undefined". It masks with a large finite negative
(`torch.finfo(dtype).min`, as Hugging Face models do), so a row that sees no key gets the mean of
v and a finite LSE, and xformers' `BlockDiagonalCausalFromBottomRightMask` says of such rows that
"the forward pass is not defined". attnspec must not judge those rows: not their outputs, not
their LSE, and, because their garbage flows into dk and dv through any cotangent they receive, a
gradient check must give them a zero cotangent. Every other row is exact attention.
The broken twin that declares "zero" is broken/fully_masked_row_uniform.py.
"""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED: frozenset[str] = frozenset()
PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_GRAD = True  # its LSE is plain torch math: differentiable
LSE_LAYOUT = "bhs"
MASKED_ROWS = "undefined"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES


class FiniteMask(Kernel):
    def hide(self, s, seen):
        return s.masked_fill(~seen, torch.finfo(s.dtype).min)


attention, supports = bind(FiniteMask, globals())
