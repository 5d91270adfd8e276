"""Compat subject: written once against the published protocol named below and never edited
afterwards (tests/compat/README.md).

Written against: attnspec 0.1.0, protocol v1 as published at the end of 2026-11-29 (README.md
'Checking your implementation') (commit 7f954bfedab285893f8ce18aa41e614e2c57a25b). Copied from:
tests/good/separate_projections.py @ 7f954bf; changed: nothing.

The original docstring:

    Correct: separate q/k/v/o projections, an explicit boolean causal mask, softmax over keys.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

EXPECTED: frozenset[str] = frozenset()


class SeparateProjections(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        if n_embd < 1 or n_head < 1 or n_embd % n_head != 0:
            raise ValueError(f"need n_embd % n_head == 0 and both >= 1; got {n_embd}, {n_head}")
        self.n_head = n_head
        self.q = nn.Linear(n_embd, n_embd)
        self.k = nn.Linear(n_embd, n_embd)
        self.v = nn.Linear(n_embd, n_embd)
        self.o = nn.Linear(n_embd, n_embd)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        H, D = self.n_head, C // self.n_head

        def heads(y: Tensor) -> Tensor:  # (B, T, C) -> (B, H, T, D)
            return y.view(B, T, H, D).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(diagonal=1)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        y = (weights @ v).transpose(1, 2).reshape(B, T, C)  # merge heads
        return self.o(y)


def build(n_embd: int, n_head: int) -> SeparateProjections:
    return SeparateProjections(n_embd, n_head)


def export_weights(module: SeparateProjections) -> dict[str, Tensor]:
    out = {}
    for name in "qkvo":
        layer = getattr(module, name)
        out[f"{name}_weight"] = layer.weight
        out[f"{name}_bias"] = layer.bias
    return out
