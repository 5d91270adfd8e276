"""A blocked kernel (query blocks of 16 against all keys up to the block's end) that applies the
diagonal mask only in the first block, so from T > 17 on, queries in later blocks see the
positions after them inside their own block.
"""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"causality", "oracle", "grad_causality"})

BLOCK = 16


class BlockedMaskFirstBlockOnly(Attention):
    def attention(self, q, k, v):
        T = q.size(-2)
        outs = []
        for start in range(0, T, BLOCK):
            end = min(start + BLOCK, T)
            scores = self.scores(q[..., start:end, :], k[..., :end, :])  # (B, H, end-start, end)
            if start == 0:  # bug: every block's diagonal tile needs this mask
                scores = self.mask(scores)
            outs.append(torch.softmax(scores, dim=-1) @ v[..., :end, :])
        return torch.cat(outs, dim=-2)


def build(n_embd: int, n_head: int) -> BlockedMaskFirstBlockOnly:
    return BlockedMaskFirstBlockOnly(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
