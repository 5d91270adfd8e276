"""A backward that does not repeat although DETERMINISTIC is declared: dq gets one-ulp noise per
call, as FA3's dq accumulated by atomics does unless `deterministic=True` (FA3's
test_flash_attn_bwd_determinism repeats the backward 1000 times and requires `torch.equal`). The
forward is exact and repeats bit for bit; only repeated backwards show it."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"determinism"})
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


class _AtomicDq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q):
        return q.clone()

    @staticmethod
    def backward(ctx, grad):
        noise = (torch.rand(grad.shape, device=grad.device) - 0.5) * 2 ** -20
        return grad + grad * noise  # the bug: the sum order of atomics, drawn per call


class AtomicBackward(Kernel):
    def prepare(self, q, k, v):
        q, k, v = super().prepare(q, k, v)
        return _AtomicDq.apply(q), k, v


attention, supports = bind(AtomicBackward, globals())
