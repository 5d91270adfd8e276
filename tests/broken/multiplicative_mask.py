"""Applied the causal mask by multiplying the scores with `tril(ones(T, T))`: future scores
become 0, not -inf, so after softmax the future keys still get weight.
"""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"causality", "oracle", "grad_causality"})


class MultiplicativeMask(Attention):
    def mask(self, scores):
        T = scores.size(-1)
        return scores * torch.ones(T, T, dtype=scores.dtype, device=scores.device).tril()


def build(n_embd: int, n_head: int) -> MultiplicativeMask:
    return MultiplicativeMask(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
