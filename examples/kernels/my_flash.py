"""A FlashAttention-style kernel of one's own, in plain torch: flash_attn_func's signature and
conventions (BSHD, the causal diagonal at the bottom right, window_size=(left, right) with -1
unbounded, softmax_lse (B, H, Sq) natural log), computed tile by tile with an online softmax.

It has a bug of the kind tiled kernels have: the last key tile is not masked when Sk is not a
multiple of BLOCK_K, so its padding (zeros) takes part in the softmax. Causal calls hide it (the
causal mask covers every key past Sk - 1); causal=False shows it. Check it with
    attnspec verify examples/kernels/check_my_flash.py
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

BLOCK_K = 64


def my_flash_attn_func(q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0,
                       softmax_scale: float | None = None, causal: bool = False,
                       window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                       alibi_slopes: Tensor | None = None, deterministic: bool = False,
                       return_attn_probs: bool = False) -> Tensor | tuple[Tensor, Tensor, None]:
    B, Sq, H, D = q.shape
    Sk, G = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    qh = q.transpose(1, 2).float()                      # (B, H, Sq, D)
    kh = k.transpose(1, 2).float().repeat_interleave(H // G, dim=1)
    vh = v.transpose(1, 2).float().repeat_interleave(H // G, dim=1)
    pad = -Sk % BLOCK_K                                 # keys padded to whole tiles
    kh, vh = F.pad(kh, (0, 0, 0, pad)), F.pad(vh, (0, 0, 0, pad))
    i = torch.arange(Sq, device=q.device)[:, None] + Sk - Sq   # bottom-right corner
    m = torch.full((B, H, Sq, 1), -math.inf, device=q.device)
    s_sum = torch.zeros(B, H, Sq, 1, device=q.device)
    acc = torch.zeros(B, H, Sq, D, device=q.device)
    for k0 in range(0, Sk + pad, BLOCK_K):
        s = qh @ kh[:, :, k0:k0 + BLOCK_K].transpose(-2, -1) * scale
        j = torch.arange(k0, k0 + BLOCK_K, device=q.device)[None, :]
        hidden = (j > i) if causal else torch.zeros_like(j > i)
        # the bug: `| (j >= Sk)` is missing, so the last tile's padding keys are seen
        s = s.masked_fill(hidden, -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = torch.where(m_new == -math.inf, 0.0, m_new)
        p = torch.exp(s - safe)
        rescale = torch.exp(m - safe)
        s_sum = s_sum * rescale + p.sum(-1, keepdim=True)
        acc = acc * rescale + p @ vh[:, :, k0:k0 + BLOCK_K]
        m = m_new
    seen = s_sum > 0
    out = torch.where(seen, acc / s_sum.clamp_min(1e-30), 0.0)
    lse = torch.where(seen, m + torch.log(s_sum.clamp_min(1e-30)), -math.inf)[..., 0]
    out = out.transpose(1, 2).to(q.dtype)
    return (out, lse, None) if return_attn_probs else out
