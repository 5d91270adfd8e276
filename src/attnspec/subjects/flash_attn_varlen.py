"""FlashAttention 2/3's `flash_attn.flash_attn_varlen_func` as a kernel subject (PROTOCOL =
"kernel"), through `flash_attn_style(..., varlen=True)`: sequences packed as q (total_q, H, D),
k and v (total_k, G, D) with cu_seqlens_q / cu_seqlens_k int32 (B + 1,) and max_seqlen_q /
max_seqlen_k; the corner, window and ALiBi apply within each sequence; softmax_lse (H, total_q)
natural log (older FA2 builds padded it as (B, H, max_seqlen_q): it is packed here). Needs the
flash_attn package and a CUDA GPU, as attnspec.subjects.flash_attn."""

from __future__ import annotations

import inspect
from typing import Any

from ._kernels import require
from .flash_style import (
    BACKWARD,
    CAUSAL,
    DETERMINISTIC,
    DTYPES,
    LSE,
    MASKED_ROWS,
    PROTOCOL,
    WINDOW,
    flash_attn_style,
)

__all__ = ["PROTOCOL", "LAYOUT", "CAUSAL", "WINDOW", "LSE", "LSE_LAYOUT", "MASKED_ROWS",
           "BACKWARD", "DETERMINISTIC", "FEATURES", "KNOBS", "DTYPES", "attention", "supports"]

LAYOUT = "varlen"
LSE_LAYOUT = "hs"

_flash_attn = require("flash_attn", subject=__name__, library="FlashAttention 2/3",
                      install="pip install flash-attn --no-build-isolation", needs_cuda=True)
_func = _flash_attn.flash_attn_varlen_func
_takes = inspect.signature(_func).parameters

FEATURES = ("gqa", "scale", "noncausal", "cross", "softcap",
            *(("alibi",) if "alibi_slopes" in _takes else ()))
KNOBS: dict[str, tuple[Any, ...]] = {
    **({"num_splits": (1, 2, 3)} if "num_splits" in _takes else {}),
    **({"pack_gqa": (False, True)} if "pack_gqa" in _takes else {}),
}

attention = flash_attn_style(_func, varlen=True, fa2_alibi_lse="alibi_slopes" in _takes)


def supports(case: dict[str, Any]) -> bool:
    """Head dims up to 256 (FA2's and FA3's largest); zero-length sequences are fine (FA2's
    varlen tests draw them, zero_lengths=True)."""
    return int(case.get("D", 64)) <= 256
