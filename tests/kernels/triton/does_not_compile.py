"""A Triton kernel whose body cannot be built: tl.dot of a (16, 16) by a (16, 32) block stored
into a (16, 16) one. Its error is the subject's, and the run names this file and the line of
the tl.dot (tests/test_triton.py), not only the launch."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

PROTOCOL = "kernel"
LAYOUT = "bhsd"
DTYPES = (torch.float32,)


@triton.jit
def _mismatched(q_ptr, o_ptr, N: tl.constexpr):  # type: ignore[no-untyped-def]
    rows = tl.arange(0, N)
    a = tl.load(q_ptr + rows[:, None] * N + rows[None, :])
    b = tl.load(q_ptr + rows[:, None] * N + tl.arange(0, 2 * N)[None, :])
    tl.store(o_ptr + rows[:, None] * N + rows[None, :], tl.dot(a, b))  # THE LINE


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool) -> Tensor:
    scratch = torch.zeros(64 * 16, dtype=torch.float32, device=q.device)
    _mismatched[(1,)](scratch, scratch, N=16)
    return torch.empty_like(q)
