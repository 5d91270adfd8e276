"""Kept the single-head scale 1/sqrt(n_embd) after splitting into heads; it must be
1/sqrt(head_dim).
"""

import math

from _common import Attention, export_weights

EXPECTED = frozenset({"oracle", "oracle_grad"})


class ScaleBySqrtNEmbd(Attention):
    def scale(self, q, k):
        return 1.0 / math.sqrt(self.n_embd)


def build(n_embd: int, n_head: int) -> ScaleBySqrtNEmbd:
    return ScaleBySqrtNEmbd(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
