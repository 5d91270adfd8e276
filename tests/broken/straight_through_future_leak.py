"""Kept the gradient of a sequence-summary path without changing the forward value, with the
straight-through trick `y + (s - s.detach())`; but s averages over all positions, so gradients of
early outputs flow to later inputs although the forward is exactly causal.
"""

from _common import Attention, export_weights

EXPECTED = frozenset({"grad_causality", "oracle_grad"})


class StraightThroughFutureLeak(Attention):
    def forward(self, x):
        y = super().forward(x)
        summary = self.v(x).mean(dim=1, keepdim=True)  # (B, 1, C), every position
        return y + (summary - summary.detach())  # adds exactly 0, but not to the gradient


def build(n_embd: int, n_head: int) -> StraightThroughFutureLeak:
    return StraightThroughFutureLeak(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
