"""Adds a small "global context" term, 1e-3 times the value projection averaged over the sequence,
but the average runs over all T positions, future ones included (it should be a running mean).
"""

from _common import Attention, export_weights

EXPECTED = frozenset({"causality"})


class GlobalMeanLeak(Attention):
    def forward(self, x):
        context = self.v(x).mean(dim=1, keepdim=True)  # (B, 1, C), over every position
        return super().forward(x) + 1e-3 * context


def build(n_embd: int, n_head: int) -> GlobalMeanLeak:
    return GlobalMeanLeak(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
