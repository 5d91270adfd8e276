"""Masked rows give NaN: a row that sees no key (Tq > Tk at the bottom-right corner, a window,
Tk = 0) gets softmax over nothing but -inf, which is NaN, in its output and, through the
backward, in dq. pytorch #103963 (SDPA NaN on fully masked rows), fixed by `_safe_softmax`
(PR #131060); FA and FlashInfer give o = 0 and lse = -inf, the contract this kernel declares."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"finite", "masked_rows"})
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


class NaiveSoftmax(Kernel):
    def softmax_attend(self, s, v, p):
        if p.sinks is not None:
            sink = p.sinks.to(s.dtype)[None, :, None, None].expand(*s.shape[:-1], 1)
            s = torch.cat([s, sink], dim=-1)
            v = torch.cat([v, v.new_zeros(*v.shape[:-2], 1, v.shape[-1])], dim=-2)
        # the bug: plain softmax; an all -inf row is NaN
        return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)


attention, supports = bind(NaiveSoftmax, globals())
