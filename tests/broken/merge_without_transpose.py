"""Merged the heads with `y.view(B, T, C)` straight from (B, H, T, D), without the transpose back to
(B, T, H, D): the shape is right, but each output row is a mix of several positions.
"""

from _common import Attention, export_weights

EXPECTED = frozenset({"causality", "oracle", "grad_causality"})


class MergeWithoutTranspose(Attention):
    def merge(self, y):
        B, H, T, D = y.shape
        return y.view(B, T, H * D)  # should be y.transpose(1, 2).contiguous().view(B, T, H * D)


def build(n_embd: int, n_head: int) -> MergeWithoutTranspose:
    return MergeWithoutTranspose(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
