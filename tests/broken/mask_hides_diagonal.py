"""The mask uses `tril(diagonal=-1)` ("strictly earlier positions"), which also hides each token
from itself; the first query then has no key left, its row is all -inf and softmax gives NaN.
"""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"finite"})


class MaskHidesDiagonal(Attention):
    def mask(self, scores):
        T = scores.size(-1)
        allowed = torch.ones(T, T, dtype=torch.bool, device=scores.device).tril(diagonal=-1)
        return scores.masked_fill(~allowed, float("-inf"))


def build(n_embd: int, n_head: int) -> MaskHidesDiagonal:
    return MaskHidesDiagonal(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
