"""Correct: a FlashAttention-style blocked kernel in plain torch. Queries and keys go in blocks of
16, future key blocks are skipped, the diagonal tile is masked, and an online softmax (running
max and denominator, accumulated in at least float32) combines the key blocks."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

EXPECTED: frozenset[str] = frozenset()
BLOCK = 16


class BlockedAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        if n_embd < 1 or n_head < 1 or n_embd % n_head:
            raise ValueError(f"n_head={n_head} must divide n_embd={n_embd} (both >= 1)")
        self.n_head = n_head
        self.q = nn.Linear(n_embd, n_embd)
        self.k = nn.Linear(n_embd, n_embd)
        self.v = nn.Linear(n_embd, n_embd)
        self.o = nn.Linear(n_embd, n_embd)

    def attention(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        T, D = q.size(-2), q.size(-1)
        acc_dtype = torch.promote_types(q.dtype, torch.float32)
        q, k, v = q.to(acc_dtype) / math.sqrt(D), k.to(acc_dtype), v.to(acc_dtype)
        outs = []
        for qs in range(0, T, BLOCK):
            qe = min(qs + BLOCK, T)
            qb = q[..., qs:qe, :]
            m = torch.full(qb.shape[:-1] + (1,), float("-inf"), dtype=acc_dtype, device=q.device)
            denom = torch.zeros_like(m)
            acc = torch.zeros_like(qb)
            for ks in range(0, qe, BLOCK):  # key blocks after the query block are skipped
                ke = min(ks + BLOCK, T)
                s = qb @ k[..., ks:ke, :].transpose(-2, -1)
                if ke > qs:  # the tile crosses the diagonal: mask key j > query i
                    i = torch.arange(qs, qe, device=q.device)[:, None]
                    j = torch.arange(ks, ke, device=q.device)[None, :]
                    s = s.masked_fill(j > i, float("-inf"))
                m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
                p = torch.exp(s - m_new)
                correction = torch.exp(m - m_new)
                denom = denom * correction + p.sum(dim=-1, keepdim=True)
                acc = acc * correction + p @ v[..., ks:ke, :]
                m = m_new
            outs.append(acc / denom)
        return torch.cat(outs, dim=-2)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        H = self.n_head

        def heads(y: Tensor) -> Tensor:
            return y.view(B, T, H, C // H).transpose(1, 2)

        y = self.attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x))).to(x.dtype)
        return self.o(y.transpose(1, 2).reshape(B, T, C))


def build(n_embd: int, n_head: int) -> BlockedAttention:
    return BlockedAttention(n_embd, n_head)


def export_weights(module: BlockedAttention) -> dict[str, Tensor]:
    out = {}
    for name in "qkvo":
        layer = getattr(module, name)
        out[f"{name}_weight"] = layer.weight
        out[f"{name}_bias"] = layer.bias
    return out
