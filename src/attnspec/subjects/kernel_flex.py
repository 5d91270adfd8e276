"""torch's FlexAttention (`torch.nn.attention.flex_attention`) as a kernel subject (PROTOCOL =
"kernel"), called eagerly: BHSD, a block mask for the causal corner (bottom-right: query i sees
keys j <= i + Tk - Tq, the offset added by hand since flex's indices are absolute) and the
window, score_mod for the soft cap and ALiBi, `enable_gqa`, and the natural-log LSE (B, H, Tq).
Sinks are folded in afterwards through the LSE, as gpt-oss's flex code does.

Measured on CPU (torch 2.13.0): eager flex runs without torch.compile, through its unfused math
path (it warns that it materialises the whole score matrix; each call after the first takes
0.1-0.2 s at B=2, H=4, T=256, D=64, the first about 0.5 s, and create_block_mask about 1 s once
then 2 ms). The eager path applies the mask_mod elementwise, so the block-sparse bug classes at
lengths that are not a multiple of 128 cannot arise here; the block mask is still built at the
exact (Tq, Tk) of each call, never reused across lengths. Its masked rows come out o = 0,
lse = -inf. torch.compile(flex_attention) works on CPU for the forward (about 19 s the first
call, 3.5 s per new shape), not used here. flex has no backward on CPU, eager or compiled
("FlexAttention does not support backward on CPU"), so BACKWARD is False."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor
from torch.nn.attention import flex_attention as _flex_module
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from ._kernels import check_qkv, per_head, window_pair

PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = False  # flex refuses inputs that require grad on CPU; see the module docstring
DETERMINISTIC = False
FEATURES = ("gqa", "scale", "noncausal", "cross", "softcap", "alibi", "sinks")
DTYPES = (torch.float32, torch.float64, torch.bfloat16)

_NAME = "attnspec.subjects.kernel_flex"
_AuxRequest = getattr(_flex_module, "AuxRequest", None)  # return_lse is deprecated from 2.9


def _flex(q: Tensor, k: Tensor, v: Tensor, **kw: Any) -> tuple[Tensor, Tensor]:
    with warnings.catch_warnings():
        # Eager flex warns that it is unfused; that is the path chosen here (docstring).
        warnings.simplefilter("ignore", UserWarning)
        if _AuxRequest is not None:
            out, aux = flex_attention(q, k, v, return_aux=_AuxRequest(lse=True), **kw)
            return out, aux.lse
        out, lse = flex_attention(q, k, v, return_lse=True, **kw)
        return out, lse


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, scale: float | None = None,
              window: tuple[int, int] | None = None, softcap: float | None = None,
              alibi_slopes: Tensor | None = None, sinks: Tensor | None = None,
              ) -> tuple[Tensor, Tensor]:
    """o (B, H, Tq, Dv) in q's dtype and lse (B, H, Tq), natural log (float32 for bfloat16
    inputs, as flex returns it)."""
    B, H, G, Tq, Tk, D = check_qkv(_NAME, LAYOUT, q, k, v)
    left, right = window_pair(_NAME, window, causal)
    if softcap is not None and not softcap > 0:
        raise ValueError(f"{_NAME}.attention(softcap={softcap!r}): a soft cap must be > 0 "
                         "(None means no cap).")
    if q.device.type == "cpu" and any(t.requires_grad for t in (q, k, v)):
        if torch.is_grad_enabled():
            raise NotImplementedError(
                f"{_NAME}.attention(q {tuple(q.shape)} requires_grad=True, on CPU): torch "
                f"{torch.__version__}'s flex_attention has no CPU backward (BACKWARD = False); "
                "call it with tensors that do not require grad, or under torch.no_grad().")
        q, k, v = q.detach(), k.detach(), v.detach()  # no graph is built anyway
    shift = Tk - Tq

    def seen(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
        gap = i + shift - j  # i' - j
        keep = gap >= -right if right >= 0 else gap == gap
        return keep & (gap <= left) if left >= 0 else keep

    block_mask = None
    if right >= 0 or left >= 0:  # built at this call's exact lengths (docstring)
        block_mask = create_block_mask(seen, None, None, Tq, Tk, device=q.device)
    work = torch.float64 if q.dtype == torch.float64 else torch.float32  # flex's score dtype
    slopes = (per_head(_NAME, "alibi_slopes", alibi_slopes, H).to(q.device, work)
              if alibi_slopes is not None else None)

    def modify(score: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
        if softcap is not None:
            score = softcap * torch.tanh(score / softcap)
        if slopes is not None:
            score = score - slopes[h] * (i + shift - j).abs()
        return score

    score_mod = modify if softcap is not None or slopes is not None else None
    out, lse = _flex(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale,
                     enable_gqa=G < H)
    if sinks is not None:
        sink = per_head(_NAME, "sinks", sinks, H).to(lse.device, lse.dtype)[None, :, None]
        total = torch.logaddexp(lse, sink)
        out = (out * torch.exp(lse - total)[..., None].to(out.dtype)).to(q.dtype)
        lse = total
    return out, lse


def supports(case: dict[str, Any]) -> bool:
    """Cases with at least one query and one key: eager flex raises IndexError ("select():
    index 0 out of range") at Tq = 0 or Tk = 0 (measured, torch 2.13.0 CPU)."""
    return int(case.get("Tq", 1)) >= 1 and int(case.get("Tk", 1)) >= 1
