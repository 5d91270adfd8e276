"""FlashAttention's conventions as kernel-protocol constants, and `flash_attn_style`, which turns
a function with `flash_attn.flash_attn_func`'s signature (or `flash_attn_varlen_func`'s) into the
protocol's `attention`. Importing this module needs no flash_attn: a user's own FA-style kernel
is checked with a file such as

    from attnspec.subjects.flash_style import *          # PROTOCOL, LAYOUT, CAUSAL, ...
    from my_kernels import my_flash_attn_func
    attention = flash_attn_style(my_flash_attn_func)
    FEATURES = ("gqa", "scale", "noncausal", "cross")    # what my kernel takes

FlashAttention 2/3 conventions (Dao-AILab/flash-attention @0251105a, flash_attn_interface.py):
BSHD; the causal diagonal at the bottom-right corner; window_size=(left, right), inclusive, -1
unbounded; softcap 0.0 = off; alibi_slopes (H,) fp32 (FA2 only); `return_attn_probs=True`
gives (out, softmax_lse, ...) with softmax_lse (B, H, Sq) natural log in float32, (H, total_q)
in varlen. Two results are normalised here, both read from FA2's CUDA source:
- a row that sees no key gets softmax_lse = +inf from FA2's non-split path (softmax.h:
  `(sum == 0.f || sum != sum) ? (Split ? -INFINITY : INFINITY)`); FA3 gives -inf. +inf is
  mapped to -inf, the protocol's value (a finite reference LSE still fails against -inf).
- when FA2 runs its causal kernel (params.is_causal: window left < 0 and right == 0, which
  causal=True without a left window gives), its ALiBi adds slope * j rather than
  -slope * |i' - j| (mask.h: "we add the same bias vector to all rows"): o is the same, but its
  LSE is larger by slope * i'. With `fa2_alibi_lse=True` that row constant is subtracted again.
FA2's and FA3's autograd functions drop the gradient of softmax_lse (backward(ctx, dout,
*args)): a loss on the LSE gets no gradient from it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = False
FEATURES = ("gqa", "scale", "noncausal", "cross", "softcap", "alibi")
KNOBS: dict[str, tuple[Any, ...]] = {}
DTYPES = (torch.float16, torch.bfloat16)

CONVENTIONS: dict[str, Any] = {
    "PROTOCOL": PROTOCOL, "LAYOUT": LAYOUT, "CAUSAL": CAUSAL, "WINDOW": WINDOW, "LSE": LSE,
    "LSE_LAYOUT": LSE_LAYOUT, "MASKED_ROWS": MASKED_ROWS, "BACKWARD": BACKWARD,
    "DETERMINISTIC": DETERMINISTIC, "FEATURES": FEATURES, "KNOBS": KNOBS, "DTYPES": DTYPES,
}
"""flash_attn_func's conventions as the protocol spells them; varlen: LAYOUT "varlen",
LSE_LAYOUT "hs" (VARLEN_CONVENTIONS)."""

VARLEN_CONVENTIONS: dict[str, Any] = {**CONVENTIONS, "LAYOUT": "varlen", "LSE_LAYOUT": "hs"}

__all__ = [*CONVENTIONS, "CONVENTIONS", "VARLEN_CONVENTIONS", "flash_attn_style"]

# protocol keyword -> flash_attn_func keyword
_RENAMED = {"scale": "softmax_scale", "window": "window_size", "softcap": "softcap",
            "alibi_slopes": "alibi_slopes"}
_VARLEN = ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")


def _name(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def flash_attn_style(fn: Callable[..., Any], *, return_lse: bool = True, varlen: bool = False,
                     fa2_alibi_lse: bool = False) -> Callable[..., Any]:
    """The protocol's `attention(q, k, v, *, causal, **kw)` calling `fn` as flash_attn_func (or,
    with varlen=True, flash_attn_varlen_func) is called: scale -> softmax_scale, window ->
    window_size, softcap, alibi_slopes as they are, any other keyword (a knob) passed through.
    With return_lse it asks for return_attn_probs=True (return_lse=True where fn has that
    parameter, as FA4's) and returns (out, lse), mapping a +inf LSE to -inf; fa2_alibi_lse
    undoes FA2's causal-ALiBi LSE offset (module docstring)."""
    parameters: Mapping[str, inspect.Parameter]
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        parameters = {}  # a builtin without a signature: pass keywords and let it say
    open_ended = not parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    lse_keyword = "return_lse" if "return_lse" in parameters else "return_attn_probs"
    label = _name(fn)

    def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, **kw: Any) -> Any:
        call: dict[str, Any] = {"causal": causal}
        for key, value in kw.items():
            target = _RENAMED.get(key, key)
            if not open_ended and target not in parameters:
                raise TypeError(f"flash_attn_style({label}): the protocol passed {key}=..., "
                                f"which {label} takes as {target!r}, but its signature "
                                f"{inspect.signature(fn)} has no such parameter; drop the "
                                "feature from FEATURES (or the knob from KNOBS).")
            call[target] = value
        if varlen and not all(name in call for name in _VARLEN):
            missing = [name for name in _VARLEN if name not in call]
            raise TypeError(f"flash_attn_style({label}, varlen=True): attention() was called "
                            f"without {', '.join(missing)}; LAYOUT 'varlen' passes them all.")
        if "window_size" in call and call["window_size"] is None:
            del call["window_size"]
        if return_lse:
            call[lse_keyword] = True
        result = fn(q, k, v, **call)
        if not return_lse:
            return result[0] if isinstance(result, tuple) else result
        if not isinstance(result, (tuple, list)) or len(result) < 2 or result[1] is None:
            raise TypeError(f"flash_attn_style({label}): called with {lse_keyword}=True it "
                            f"returned {type(result).__name__}, not (out, lse, ...); give "
                            "return_lse=False (and LSE = None) if it has no LSE.")
        out, lse = result[0], result[1]
        lse = lse.masked_fill(lse == float("inf"), float("-inf"))
        if varlen and lse.dim() == 3:
            lse = _pack_padded_lse(lse, call["cu_seqlens_q"])
        slopes = call.get("alibi_slopes")
        if fa2_alibi_lse and slopes is not None and _fa2_causal(call, causal):
            lse = lse - _alibi_row_offset(lse, slopes, q, k, call, varlen)
        return out, lse

    attention.__doc__ = f"The kernel protocol's attention, calling {label} FlashAttention-style."
    attention.flash_attn_fn = fn  # type: ignore[attr-defined]  # not __wrapped__: the signature is ours
    return attention


def _fa2_causal(call: dict[str, Any], causal: bool) -> bool:
    """FA2's params.is_causal (flash_api.cpp): window_size_left < 0 and window_size_right == 0,
    after causal=True has set the right bound to 0. Only then does its ALiBi drop the row term."""
    left, right = call.get("window_size") or (-1, -1)
    left = -1 if left is None else left
    right = 0 if causal else (-1 if right is None else right)
    return left < 0 and right == 0


def _pack_padded_lse(lse: Tensor, cu_seqlens_q: Tensor) -> Tensor:
    """Older FA2 builds return varlen softmax_lse padded as (B, H, max_seqlen_q): pack it into
    (H, total_q) as the current builds do."""
    starts = cu_seqlens_q.tolist()
    pieces = [lse[b, :, : starts[b + 1] - starts[b]] for b in range(len(starts) - 1)]
    return torch.cat(pieces, dim=-1) if pieces else lse.new_zeros((lse.size(1), 0))


def _alibi_row_offset(lse: Tensor, slopes: Tensor, q: Tensor, k: Tensor, call: dict[str, Any],
                      varlen: bool) -> Tensor:
    """slope_h * i' for every LSE entry (FA2's causal ALiBi omits it), where finite."""
    if varlen:
        cq, ck = call["cu_seqlens_q"].long().tolist(), call["cu_seqlens_k"].long().tolist()
        rows = torch.cat([torch.arange(cq[b + 1] - cq[b]) + (ck[b + 1] - ck[b])
                          - (cq[b + 1] - cq[b]) for b in range(len(cq) - 1)]
                         or [torch.zeros(0, dtype=torch.long)])
        offset = slopes.to(lse.dtype)[:, None] * rows.to(lse.device, lse.dtype)[None, :]
    else:
        Tq, Tk = q.size(1), k.size(1)
        rows = torch.arange(Tq, device=lse.device, dtype=lse.dtype) + (Tk - Tq)
        per_head = slopes.to(lse.device, lse.dtype)
        offset = (per_head[..., :, None] if per_head.dim() == 2 else per_head[None, :, None]
                  ) * rows
    return torch.where(torch.isfinite(lse), offset.expand_as(lse), torch.zeros_like(lse))
