"""The causal mask is a buffer built once for block_size=64 and sliced as `mask[-T:, :T]` (the last
T rows, as when decoding with a cache); for any T < 64 that slice lets queries see later keys.
"""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"causality", "oracle", "grad_causality"})

BLOCK_SIZE = 64


class FixedMaskSlicedFromEnd(Attention):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__(n_embd, n_head)
        full = torch.ones(BLOCK_SIZE, BLOCK_SIZE, dtype=torch.bool).tril()
        self.register_buffer("allowed", full, persistent=False)

    def mask(self, scores):
        T = scores.size(-1)
        return scores.masked_fill(~self.allowed[-T:, :T], float("-inf"))  # should be [:T, :T]


def build(n_embd: int, n_head: int) -> FixedMaskSlicedFromEnd:
    return FixedMaskSlicedFromEnd(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
