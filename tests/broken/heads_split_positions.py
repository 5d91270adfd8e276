"""Gave each head its own contiguous slice of the positions (all C channels, causal inside the
slice) and concatenated the slices back along T; heads must split the channels, not the sequence.
"""

import math

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"oracle", "prefix"})


class HeadsSplitPositions(Attention):
    def forward(self, x):
        q, k, v = self.project(x)  # (B, T, C) each
        outs = []
        slices = [t.tensor_split(self.n_head, dim=1) for t in (q, k, v)]  # H slices along T
        for qh, kh, vh in zip(*slices, strict=True):
            t = qh.size(1)
            scores = (qh @ kh.transpose(-2, -1)) / math.sqrt(self.n_embd)
            allowed = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
            outs.append(weights @ vh)
        return self.output(torch.cat(outs, dim=1))  # (B, T, C) again


def build(n_embd: int, n_head: int) -> HeadsSplitPositions:
    return HeadsSplitPositions(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
