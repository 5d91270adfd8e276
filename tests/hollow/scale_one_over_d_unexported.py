"""Attention with the score scale 1/D instead of 1/sqrt(D), nanoGPT's layout (c_attn, c_proj),
no export_weights. Causal and mixing, it passed with the oracle skipped. Its weights are found
by name and reproduce it at T = 1 (v and o), not at T > 1, so the guess does not count: the
oracle cannot run, and the run is incomplete, its message naming the scale 1/D."""

import torch.nn.functional as F
from torch import nn

EXPECTED_STATUS = "incomplete"
EXPECTED = {"oracle": "incomplete", "mixing": "pass", "causality": "pass"}
MESSAGE = {"oracle": "the score scale 0.25 = 1/D"}


class OneOverD(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        if n_embd < 1 or n_head < 1 or n_embd % n_head:
            raise ValueError(f"n_embd={n_embd} must be a positive multiple of n_head={n_head}")
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        D = C // self.n_head
        q, k, v = (t.view(B, T, self.n_head, D).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / D)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


def build(n_embd: int, n_head: int) -> nn.Module:
    return OneOverD(n_embd, n_head)
