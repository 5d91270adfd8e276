"""FlashInfer's `single_prefill_with_kv_cache` as a kernel subject (PROTOCOL = "kernel"). It
takes one sequence, q [qo_len, Hq, D] and k, v [kv_len, Hkv, D] (NHD), so the batch is a loop:
LAYOUT "bshd", one call per batch row. The causal diagonal sits bottom-right (its docstring
builds tril(..., diagonal=kv_len - qo_len)); `window_left` (inclusive) is the window ("left",
causal cases only: without causal FlashInfer bounds the left side alone, which the "left"
encoding does not say); `logits_soft_cap`; `sm_scale`. `return_lse=True` gives lse
[qo_len, Hq] in base 2, stacked to (B, Tq, H). Rows that see no key: o 0, lse -inf (FlashInfer's
tests check both exactly). FlashInfer has no backward. Needs flashinfer and a CUDA GPU."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ._kernels import check_qkv, require

PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "bottom_right"
WINDOW = "left"
LSE = "base2"
LSE_LAYOUT = "bsh"
MASKED_ROWS = "zero"
BACKWARD = False
DETERMINISTIC = False
FEATURES = ("gqa", "scale", "noncausal", "cross", "softcap")
DTYPES = (torch.float16, torch.bfloat16)

_flashinfer = require("flashinfer", subject=__name__, library="FlashInfer",
                      install="pip install flashinfer-python", needs_cuda=True)


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, scale: float | None = None,
              window: int | None = None, softcap: float | None = None) -> tuple[Tensor, Tensor]:
    """o (B, Tq, H, Dv) in q's dtype and lse (B, Tq, H), base 2."""
    B, H, G, Tq, Tk, D = check_qkv(__name__, LAYOUT, q, k, v)
    if window is not None and (not isinstance(window, int) or isinstance(window, bool)
                               or window < -1 or not causal):
        raise ValueError(f"{__name__}.attention(window={window!r}, causal={causal}): WINDOW is "
                         "'left', an int >= -1 (-1 unbounded) for causal calls only.")
    outs, lses = [], []
    for b in range(B):
        out, lse = _flashinfer.single_prefill_with_kv_cache(
            q[b], k[b], v[b], causal=causal, kv_layout="NHD", sm_scale=scale,
            window_left=-1 if window is None else window, logits_soft_cap=softcap,
            return_lse=True)
        outs.append(out)
        lses.append(lse)
    if not outs:  # B = 0
        return q.new_zeros((0, Tq, H, v.size(-1))), q.new_zeros((0, Tq, H), dtype=torch.float32)
    return torch.stack(outs), torch.stack(lses)


def supports(case: dict[str, Any]) -> bool:
    """A window only with causal (the "left" encoding), and at least one query and one key.
    Head dims are not screened: which ones a FlashInfer build takes (AOT or JIT) was not
    measured here."""
    window_ok = case.get("window") is None or bool(case.get("causal", True))
    return window_ok and int(case.get("Tq", 1)) >= 1 and int(case.get("Tk", 1)) >= 1
