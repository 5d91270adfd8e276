"""Built the causal mask with `tril(diagonal=1)`, so each query also sees the next position."""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"causality", "oracle", "grad_causality"})


class MaskOffByOne(Attention):
    def mask(self, scores):
        T = scores.size(-1)
        allowed = torch.ones(T, T, dtype=torch.bool, device=scores.device).tril(diagonal=1)
        return scores.masked_fill(~allowed, float("-inf"))


def build(n_embd: int, n_head: int) -> MaskOffByOne:
    return MaskOffByOne(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
