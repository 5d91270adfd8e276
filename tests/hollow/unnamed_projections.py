"""Correct attention whose projections have names no field uses (alpha, beta, gamma, delta) and
no export_weights: nothing is found to run the oracle with, so the run is incomplete; with
black_box it conforms, and says it is black-box."""

import torch.nn.functional as F
from torch import nn

EXPECTED_STATUS = "incomplete"
EXPECTED = {"oracle": "incomplete", "mixing": "pass"}
BLACK_BOX_STATUS = "pass"
MESSAGE = {"oracle": "no projections were found by name"}


class Unnamed(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        if n_embd < 1 or n_head < 1 or n_embd % n_head:
            raise ValueError(f"n_embd={n_embd} must be a positive multiple of n_head={n_head}")
        self.n_head = n_head
        self.alpha, self.beta, self.gamma, self.delta = (nn.Linear(n_embd, n_embd)
                                                         for _ in range(4))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (f(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for f in (self.alpha, self.beta, self.gamma))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.delta(y.transpose(1, 2).reshape(B, T, C))


def build(n_embd: int, n_head: int) -> nn.Module:
    return Unnamed(n_embd, n_head)
