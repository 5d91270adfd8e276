"""Compat subject: written once against the published protocol named below and never edited
afterwards (tests/compat/README.md).

Written against: attnspec 0.1.0, protocol v1 as published at the end of 2026-11-29 (README.md
'Checking your implementation') (commit 7f954bfedab285893f8ce18aa41e614e2c57a25b). Copied from:
tests/broken/no_scale.py @ 7f954bf (broken on purpose); changed: tests/broken/_common.py @
7f954bf inlined in place of `from _common import ...` (its imports shared, not repeated).

The original docstring:

    Scores are plain `q @ k.T` with no 1/sqrt(D) scale (I assumed softmax normalises anyway), so the
    attention is sharper than the reference's.
"""

from __future__ import annotations

# ---- inlined from tests/broken/_common.py @ 7f954bf ----
import math

import torch
from torch import Tensor, nn


def check_config(n_embd: int, n_head: int) -> int:
    """Reject an impossible configuration at construction; return D = C / H."""
    if n_embd < 1 or n_head < 1:
        raise ValueError(f"n_embd={n_embd} and n_head={n_head} must both be >= 1")
    if n_embd % n_head != 0:
        raise ValueError(f"n_embd={n_embd} is not divisible by n_head={n_head}")
    return n_embd // n_head


class Attention(nn.Module):
    """Correct causal multi-head self-attention: (B, T, C) in, (B, T, C) out."""

    def __init__(self, n_embd: int, n_head: int, *, bias: bool = True) -> None:
        super().__init__()
        self.head_dim = check_config(n_embd, n_head)
        self.n_embd = n_embd
        self.n_head = n_head
        self.make_projections(bias)

    def make_projections(self, bias: bool) -> None:
        C = self.n_embd
        self.q = nn.Linear(C, C, bias=bias)
        self.k = nn.Linear(C, C, bias=bias)
        self.v = nn.Linear(C, C, bias=bias)
        self.o = nn.Linear(C, C, bias=bias)

    # The pipeline, one stage per method.

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, T, C) -> q, k, v, each (B, T, C)."""
        return self.q(x), self.k(x), self.v(x)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, T, C) -> (B, H, T, D): heads split the channels."""
        B, T, C = x.shape
        return x.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

    def scale(self, q: Tensor, k: Tensor) -> float:
        return 1.0 / math.sqrt(q.size(-1))

    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        """(B, H, T, D) x2 -> (B, H, T, T), query position by key position."""
        return (q @ k.transpose(-2, -1)) * self.scale(q, k)

    def mask(self, scores: Tensor) -> Tensor:
        """Future keys (j > i) get -inf."""
        T = scores.size(-1)
        allowed = torch.ones(T, T, dtype=torch.bool, device=scores.device).tril()
        return scores.masked_fill(~allowed, float("-inf"))

    def softmax(self, scores: Tensor) -> Tensor:
        """Softmax over the keys."""
        return torch.softmax(scores, dim=-1)

    def attend(self, weights: Tensor, v: Tensor) -> Tensor:
        return weights @ v

    def attention(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """(B, H, T, D) x3 -> (B, H, T, D)."""
        return self.attend(self.softmax(self.mask(self.scores(q, k))), v)

    def merge(self, y: Tensor) -> Tensor:
        """(B, H, T, D) -> (B, T, C): transpose back, then concatenate the heads."""
        B, H, T, D = y.shape
        return y.transpose(1, 2).contiguous().view(B, T, H * D)

    def output(self, y: Tensor) -> Tensor:
        return self.o(y)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.project(x)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        y = self.attention(q, k, v)
        return self.output(self.merge(y))


class FusedAttention(Attention):
    """The same attention with nanoGPT's fused q/k/v projection `c_attn` (C -> 3C)."""

    def make_projections(self, bias: bool) -> None:
        C = self.n_embd
        self.c_attn = nn.Linear(C, 3 * C, bias=bias)
        self.o = nn.Linear(C, C, bias=bias)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        return q, k, v


def export_weights(module: nn.Module) -> dict[str, Tensor]:
    """q/k/v/o weights (C, C) and biases (C,) of an `Attention` or `FusedAttention`.

    The tensors are the parameters themselves or slices of them, so gradients reach them.
    """
    if isinstance(module, FusedAttention):
        C = module.n_embd
        w, b = module.c_attn.weight, module.c_attn.bias
        out = {"q_weight": w[:C], "k_weight": w[C:2 * C], "v_weight": w[2 * C:]}
        if b is not None:
            out |= {"q_bias": b[:C], "k_bias": b[C:2 * C], "v_bias": b[2 * C:]}
    else:
        out = {f"{n}_weight": getattr(module, n).weight for n in "qkv"}
        if module.q.bias is not None:
            out |= {f"{n}_bias": getattr(module, n).bias for n in "qkv"}
    out["o_weight"] = module.o.weight
    if module.o.bias is not None:
        out["o_bias"] = module.o.bias
    return out


# ---- the subject ----
EXPECTED = frozenset({"oracle", "oracle_grad"})


class NoScale(Attention):
    def scale(self, q, k):
        return 1.0


def build(n_embd: int, n_head: int) -> NoScale:
    return NoScale(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
