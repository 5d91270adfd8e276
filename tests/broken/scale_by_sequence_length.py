"""The scale reads `k.size(-2)` (T) where I meant `k.size(-1)` (D), so each score is divided by
sqrt(T): still causal, but the output at a position depends on how long the whole sequence is.
"""

import math

from _common import Attention, export_weights

EXPECTED = frozenset({"prefix", "oracle"})


class ScaleBySequenceLength(Attention):
    def scale(self, q, k):
        return 1.0 / math.sqrt(k.size(-2))  # axis -2 is T, not D


def build(n_embd: int, n_head: int) -> ScaleBySequenceLength:
    return ScaleBySequenceLength(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
