"""Scales k in place by the softmax scale, attends with scale 1, and divides k back before it
returns (a "zero-copy" trick): the caller's k is as it was once the call returns, within a
rounding, so a check of the inputs after the call passes, but any reader of k during the call
(another stream, another thread, a second kernel sharing the KV) sees it scaled. The write moves
`k._version`, which attnspec reads around every call. Its twin on q is scales_q_in_place."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"input_unchanged"})
TRIGGER = {"dtype": torch.float64}
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


class ScalesKAndRestores(Kernel):
    def attention(self, q, k, v, *, causal, scale=None, **kw):
        factor = self.scale_of(scale, q.shape[-1])
        with torch.no_grad():
            k.mul_(factor)  # the bug: the caller's k, scaled for the length of the call
        try:
            return super().attention(q, k.detach().clone().requires_grad_(k.requires_grad),
                                     v, causal=causal, scale=1.0, **kw)
        finally:
            with torch.no_grad():
                k.div_(factor)


attention, supports = bind(ScalesKAndRestores, globals())
