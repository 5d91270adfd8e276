"""Zeroes its inputs and returns zeros: KernelBench's adversarial `zero_out_kernel.py`, which
zeroes q, k, v in place so that a reference run afterwards on the same tensors "might run with
all zeros" and agree with the zeros it returns. attnspec runs the reference on its own copies
first and checks the inputs after the call."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"input_unchanged", "oracle"})
TRIGGER = {}
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


class ZeroOut(Kernel):
    def attention(self, q, k, v, **kw):
        result = super().attention(q, k, v, **kw)
        with torch.no_grad():
            for x in (q, k, v):
                x.zero_()  # the bug: the evidence is erased
        if isinstance(result, tuple):
            return torch.zeros_like(result[0]), result[1]
        return torch.zeros_like(result)


attention, supports = bind(ZeroOut, globals())
