"""Zeroes the future weights after the softmax instead of masking the scores before it, without
renormalising: the denominator still sums over future keys.
"""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"causality", "oracle", "grad_causality"})


class MaskAfterSoftmax(Attention):
    def attention(self, q, k, v):
        weights = torch.softmax(self.scores(q, k), dim=-1)
        T = weights.size(-1)
        allowed = torch.ones(T, T, dtype=torch.bool, device=weights.device).tril()
        return self.attend(weights.masked_fill(~allowed, 0.0), v)


def build(n_embd: int, n_head: int) -> MaskAfterSoftmax:
    return MaskAfterSoftmax(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
