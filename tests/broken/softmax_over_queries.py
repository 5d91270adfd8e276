"""Softmax over `dim=-2` (the query axis) instead of `dim=-1` (the keys): each key's column is
normalised over all the queries that see it, so an early output depends on later queries.
"""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"causality", "oracle", "grad_causality"})


class SoftmaxOverQueries(Attention):
    def softmax(self, scores):
        return torch.softmax(scores, dim=-2)


def build(n_embd: int, n_head: int) -> SoftmaxOverQueries:
    return SoftmaxOverQueries(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
