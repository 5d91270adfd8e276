"""xformers' `memory_efficient_attention` as a kernel subject (PROTOCOL = "kernel"), with its
`LowerTriangularMask` bias: BMHK (= BSHD) layout, the causal diagonal at the top-left corner,
`scale`, GQA through 5-D BMGHK inputs with K/V expanded by hand ("xFormers will not
automatically broadcast"). The LSE comes from `memory_efficient_attention_forward_requires_grad`
((B, H, Mq) natural log, whose last axis CUTLASS pads to a multiple of 32: cut back to Tq).
When gradients are wanted, o comes from `memory_efficient_attention` (its autograd path), GQA
with K/V repeated to 4-D (xformers documents 5-D GQA for the forward only), and the LSE from a
second forward under no_grad, so the LSE carries no gradient. Needs xformers and a CUDA GPU.
attnspec.subjects.xformers_bottom_right is the bottom-right twin, with windows."""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import Tensor

from ._kernels import check_qkv, require

PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "top_left"
WINDOW = None
LSE = "natural"
LSE_LAYOUT = "bhs"
# Every query sees key 0 at this corner (Tk >= 1 in supports), so no row is masked; xformers
# does not document what a row with no visible key gives.
MASKED_ROWS = "undefined"
BACKWARD = True
DETERMINISTIC = False
FEATURES = ("gqa", "scale", "noncausal", "cross")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_ops = require("xformers.ops", subject=__name__, library="xformers",
               install="pip install xformers", needs_cuda=True)
_attn_bias = importlib.import_module("xformers.ops.fmha.attn_bias")


def attend(name: str, q: Tensor, k: Tensor, v: Tensor, bias: Any, scale: float | None,
           ) -> tuple[Tensor, Tensor]:
    """o (B, Tq, H, Dv) and lse (B, H, Tq) from xformers for BSHD q, k, v with kv heads G."""
    B, H, G, Tq, Tk, D = check_qkv(name, LAYOUT, q, k, v)
    R, Dv = H // G, v.size(-1)
    grads = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))

    def operands(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if G == H:
            return q, k, v
        if grads:  # 4-D: xformers' backward does not take the 5-D GQA form
            return q, k.repeat_interleave(R, dim=2), v.repeat_interleave(R, dim=2)
        return (q.reshape(B, Tq, G, R, D), k.reshape(B, Tk, G, 1, D).expand(B, Tk, G, R, D),
                v.reshape(B, Tk, G, 1, Dv).expand(B, Tk, G, R, Dv))

    if grads:
        out = _ops.memory_efficient_attention(*operands(q, k, v), attn_bias=bias, scale=scale)
        with torch.no_grad():
            _, lse = _ops.memory_efficient_attention_forward_requires_grad(
                *operands(q.detach(), k.detach(), v.detach()), attn_bias=bias, scale=scale)
    else:
        out, lse = _ops.memory_efficient_attention_forward_requires_grad(
            *operands(q, k, v), attn_bias=bias, scale=scale)
    # 5-D GQA gives lse (B, G, R, Mq): query head h = g * R + r, as the protocol groups them.
    lse = lse.reshape(B, H, lse.size(-1))[..., :Tq]
    return out.reshape(B, Tq, H, Dv), lse


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool,
              scale: float | None = None) -> tuple[Tensor, Tensor]:
    """o (B, Tq, H, Dv) in q's dtype and lse (B, H, Tq) natural log."""
    bias = _attn_bias.LowerTriangularMask() if causal else None
    return attend(__name__, q, k, v, bias, scale)


def supports(case: dict[str, Any]) -> bool:
    """At least one key (so that every query sees key 0)."""
    return int(case.get("Tk", 1)) >= 1
