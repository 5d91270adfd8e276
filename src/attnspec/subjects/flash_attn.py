"""FlashAttention 2/3's `flash_attn.flash_attn_func` as a kernel subject (PROTOCOL = "kernel"),
through `flash_attn_style` (attnspec.subjects.flash_style, which holds the conventions and needs
no flash_attn). BSHD, bottom-right causal corner, window_size (left, right) with -1 unbounded,
softcap, alibi_slopes where the installed flash_attn_func takes them (FA2; FA3 has none),
num_splits and pack_gqa as knobs where it takes them (FA3), and softmax_lse (B, H, Sq) natural
log. Needs the flash_attn package and a CUDA GPU: without them loading this subject fails with
a one-line message, so attnspec skips it."""

from __future__ import annotations

import inspect
from typing import Any

from ._kernels import require
from .flash_style import (
    BACKWARD,
    CAUSAL,
    DETERMINISTIC,
    DTYPES,
    LAYOUT,
    LSE,
    LSE_LAYOUT,
    MASKED_ROWS,
    PROTOCOL,
    WINDOW,
    flash_attn_style,
)

__all__ = ["PROTOCOL", "LAYOUT", "CAUSAL", "WINDOW", "LSE", "LSE_LAYOUT", "MASKED_ROWS",
           "BACKWARD", "DETERMINISTIC", "FEATURES", "KNOBS", "DTYPES", "attention", "supports",
           "flash_attn_style"]

_flash_attn = require("flash_attn", subject=__name__, library="FlashAttention 2/3",
                      install="pip install flash-attn --no-build-isolation", needs_cuda=True)
_func = _flash_attn.flash_attn_func
_takes = inspect.signature(_func).parameters

FEATURES = ("gqa", "scale", "noncausal", "cross", "softcap",
            *(("alibi",) if "alibi_slopes" in _takes else ()))
# FA3's scheduling keywords (hopper/test_flash_attn.py sweeps them): the result must not move.
KNOBS: dict[str, tuple[Any, ...]] = {
    **({"num_splits": (1, 2, 3)} if "num_splits" in _takes else {}),
    **({"pack_gqa": (False, True)} if "pack_gqa" in _takes else {}),
}

attention = flash_attn_style(_func, fa2_alibi_lse="alibi_slopes" in _takes)


def supports(case: dict[str, Any]) -> bool:
    """Head dims up to 256 (FA2's and FA3's largest), at least one query and one key (FA2's
    own tests never call it with Tq = 0 or Tk = 0)."""
    return int(case.get("D", 64)) <= 256 and int(case.get("Tq", 1)) >= 1 \
        and int(case.get("Tk", 1)) >= 1
