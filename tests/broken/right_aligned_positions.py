"""Learned position embeddings are indexed from the end of the sequence (as for left-padded
batches), so every token's position term changes with the total length T: still causal, but a
prefix of the input does not give a prefix of the output.
"""

import torch
from _common import Attention, export_weights
from torch import nn

EXPECTED = frozenset({"prefix", "oracle"})

MAX_LEN = 1024


class RightAlignedPositions(Attention):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__(n_embd, n_head)
        self.wpe = nn.Embedding(MAX_LEN, n_embd)

    def project(self, x):
        T = x.size(1)
        from_end = torch.arange(T - 1, -1, -1, device=x.device)  # last token gets position 0
        return super().project(x + self.wpe(from_end))


def build(n_embd: int, n_head: int) -> RightAlignedPositions:
    return RightAlignedPositions(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
