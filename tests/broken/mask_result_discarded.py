"""Called `scores.masked_fill(...)` without assigning the result (it is not in place), so no mask
is applied at all.
"""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"causality", "oracle", "grad_causality"})


class MaskResultDiscarded(Attention):
    def mask(self, scores):
        T = scores.size(-1)
        allowed = torch.ones(T, T, dtype=torch.bool, device=scores.device).tril()
        scores.masked_fill(~allowed, float("-inf"))  # should be masked_fill_ or an assignment
        return scores


def build(n_embd: int, n_head: int) -> MaskResultDiscarded:
    return MaskResultDiscarded(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
