"""Split heads with `x.view(B, H, T, D)` straight from (B, T, C), as the lesson warns against: the
numbers fit, but each "head" now gets a run of consecutive positions' channels, so rows mix
tokens from later positions.
"""

from _common import Attention, export_weights

EXPECTED = frozenset({"causality", "oracle", "oracle_grad"})


class ViewWithoutTranspose(Attention):
    def split_heads(self, x):
        B, T, C = x.shape
        # should be x.view(B, T, H, D).transpose(1, 2)
        return x.view(B, self.n_head, T, C // self.n_head)


def build(n_embd: int, n_head: int) -> ViewWithoutTranspose:
    return ViewWithoutTranspose(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
