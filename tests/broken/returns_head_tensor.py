"""Forgot to merge the heads and apply the output projection: forward returns the per-head
attention output (B, H, T, D) instead of (B, T, C).
"""

from _common import Attention, export_weights

EXPECTED = frozenset({"width"})


class ReturnsHeadTensor(Attention):
    def forward(self, x):
        q, k, v = self.project(x)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        return self.attention(q, k, v)  # missing: self.output(self.merge(...))


def build(n_embd: int, n_head: int) -> ReturnsHeadTensor:
    return ReturnsHeadTensor(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
