"""nanoGPT-style fused projection, but the chunks are unpacked as `q, v, k` while export_weights
(and every checkpoint) lays them out as q, k, v: keys and values are swapped.
"""

from _common import FusedAttention, export_weights

EXPECTED = frozenset({"oracle", "oracle_grad"})


class FusedSplitQVK(FusedAttention):
    def project(self, x):
        q, v, k = self.c_attn(x).split(self.n_embd, dim=2)  # layout is q, k, v
        return q, k, v


def build(n_embd: int, n_head: int) -> FusedSplitQVK:
    return FusedSplitQVK(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
