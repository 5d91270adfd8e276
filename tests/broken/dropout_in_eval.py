"""Attention dropout called as `F.dropout(weights, p=0.1, training=True)` instead of
`training=self.training`, so it stays on after `.eval()` and two identical calls differ.
"""

import torch.nn.functional as F
from _common import Attention, export_weights

EXPECTED = frozenset({"determinism", "oracle"})


class DropoutInEval(Attention):
    def softmax(self, scores):
        return F.dropout(super().softmax(scores), p=0.1, training=True)


def build(n_embd: int, n_head: int) -> DropoutInEval:
    return DropoutInEval(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
