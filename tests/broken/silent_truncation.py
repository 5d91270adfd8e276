"""head_dim = n_embd // n_head with no divisibility check: n_embd=10, n_head=3 builds fine and
silently works on the first 9 channels (H * D) instead of being rejected.
"""

import math

import torch
from _common import export_weights
from torch import nn

EXPECTED = frozenset({"divisibility"})


class SilentTruncation(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_embd, self.n_head = n_embd, n_head
        self.head_dim = n_embd // n_head  # no check that this is exact
        inner = n_head * self.head_dim
        self.q = nn.Linear(n_embd, inner)
        self.k = nn.Linear(n_embd, inner)
        self.v = nn.Linear(n_embd, inner)
        self.o = nn.Linear(inner, n_embd)

    def forward(self, x):
        B, T, _ = x.shape
        H, D = self.n_head, self.head_dim

        def heads(y):
            return y.view(B, T, H, D).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        y = (weights @ v).transpose(1, 2).reshape(B, T, H * D)
        return self.o(y)


def build(n_embd: int, n_head: int) -> SilentTruncation:
    return SilentTruncation(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
