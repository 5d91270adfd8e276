"""The causal mask is written into `scores[:, 0]` only, so head 0 is causal and every other head
sees the whole sequence, future included.
"""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"causality", "oracle", "grad_causality"})


class MaskFirstHeadOnly(Attention):
    def mask(self, scores):
        T = scores.size(-1)
        future = torch.ones(T, T, dtype=torch.bool, device=scores.device).triu(diagonal=1)
        scores = scores.clone()
        scores[:, 0] = scores[:, 0].masked_fill(future, float("-inf"))  # meant scores[:, :]
        return scores


def build(n_embd: int, n_head: int) -> MaskFirstHeadOnly:
    return MaskFirstHeadOnly(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
