"""SGLang's Triton prefill kernel, `context_attention_fwd` (sglang.kernels.ops.attention.
prefill_attention, from LightLLM's context_flashattention_nopad), as a kernel subject
(PROTOCOL = "kernel"): sequences packed as q, k, v (total, H or G, D), each sequence's start
(`b_start_loc`) and length (`b_seq_len`), self-attention within each (Tq = Tk per sequence),
causal or not, grouped kv heads, a scale of its own; it writes o into a tensor the caller
gives and returns no LSE. Called as SGLang calls it; nothing reimplemented. Needs sglang and
triton; without a GPU it runs in Triton's interpreter (docs/triton.md)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ._kernels import require

__all__ = ["PROTOCOL", "LAYOUT", "CAUSAL", "WINDOW", "LSE", "MASKED_ROWS", "BACKWARD",
           "DETERMINISTIC", "FEATURES", "DTYPES", "TRITON", "attention", "supports"]

PROTOCOL = "kernel"
LAYOUT = "varlen"
CAUSAL = "bottom_right"  # Tq = Tk per sequence: both corners are the diagonal
WINDOW = None
LSE = None
MASKED_ROWS = "zero"
BACKWARD = False
DETERMINISTIC = True  # one program per (sequence, head, query block), no atomics
FEATURES = ("gqa", "scale", "noncausal")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TRITON = True

_prefill = require("sglang.kernels.ops.attention.prefill_attention", subject=__name__,
                   library="SGLang's Triton prefill attention",
                   install="pip install sglang (docs/triton.md lists what it imports)",
                   needs_cuda=False)


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool,
              cu_seqlens_q: Tensor | None = None, cu_seqlens_k: Tensor | None = None,
              max_seqlen_q: int = 0, max_seqlen_k: int = 0,
              scale: float | None = None) -> Tensor:
    """o (total, H, D), as context_attention_fwd writes it."""
    if cu_seqlens_q is None or cu_seqlens_k is None or not torch.equal(cu_seqlens_q,
                                                                       cu_seqlens_k):
        raise ValueError(f"{__name__}.attention(cu_seqlens_q={cu_seqlens_q!r}, cu_seqlens_k="
                         f"{cu_seqlens_k!r}): context_attention_fwd is self-attention per "
                         "sequence; give both, equal")
    o = torch.empty_like(q)
    _prefill.context_attention_fwd(q, k, v, o, cu_seqlens_q[:-1], cu_seqlens_q.diff(),
                                   max_seqlen_q, is_causal=causal, sm_scale=scale)
    return o


def supports(case: dict[str, Any]) -> bool:
    """Head dims SGLang's kernel takes (its BLOCK_DMODEL is the next power of two)."""
    return int(case.get("D", 64)) <= 256
