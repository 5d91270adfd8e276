"""Split the channels as (D, H) instead of (H, D), i.e. `view(B, T, D, H)` then permute: each head
gets every H-th channel instead of a contiguous block, and the merge puts them back in (H, D)
order.
"""

from _common import Attention, export_weights

EXPECTED = frozenset({"oracle", "oracle_grad"})


class HeadSplitInterleaved(Attention):
    def split_heads(self, x):
        B, T, C = x.shape
        return x.view(B, T, C // self.n_head, self.n_head).permute(0, 3, 1, 2)


def build(n_embd: int, n_head: int) -> HeadSplitInterleaved:
    return HeadSplitInterleaved(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
