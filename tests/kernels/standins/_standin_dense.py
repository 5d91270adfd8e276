"""The dense attention the stand-ins share: plain torch on any device, written from the
libraries' documented conventions (BSHD/NHD tensors, a boolean keep-mask [Tq, Tk] per call).
Not a reference for attnspec: the tests compare everything against their own float64 formula."""

from __future__ import annotations

import torch
from torch import Tensor


def keep_mask(Tq: int, Tk: int, *, causal: bool, left: int, right: int, device: torch.device,
              ) -> Tensor:
    """Bottom-right aligned (the libraries' convention): query i sees j in [i' - left, i' +
    right] with i' = i + Tk - Tq, -1 unbounded; causal sets right = 0."""
    i = torch.arange(Tq, device=device)[:, None] + (Tk - Tq)
    j = torch.arange(Tk, device=device)[None, :]
    keep = torch.ones(Tq, Tk, dtype=torch.bool, device=device)
    right = 0 if causal else right
    if right >= 0:
        keep &= j <= i + right
    if left >= 0:
        keep &= j >= i - left
    return keep


def attend(q: Tensor, k: Tensor, v: Tensor, keep: Tensor, *, scale: float, softcap: float = 0.0,
           bias: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """q (B, Tq, H, D), k and v (B, Tk, G, D) with H % G == 0. Returns o (B, Tq, H, Dv) in q's
    dtype, lse (B, H, Tq) float32 (float64 for float64) natural log with -inf for rows that see
    no key, and which rows saw none (B or 1, H or 1, Tq)."""
    H, G = q.size(2), k.size(2)
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    k = k.repeat_interleave(H // G, dim=2)
    v = v.repeat_interleave(H // G, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q.to(work), k.to(work)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    empty = torch.isneginf(lse)
    p = torch.exp(s - lse.masked_fill(empty, 0.0)[..., None])
    o = torch.einsum("bhqk,bkhd->bqhd", p, v.to(work))
    return o.to(q.dtype), lse, empty
