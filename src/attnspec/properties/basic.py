"""The properties of one call: width, dtype, divisibility, determinism, input_unchanged, finite."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from . import tolerance as tol

if TYPE_CHECKING:
    pass



from .base import PASS, Context, Example, Outcome, _at, _fail, _inputs


def check_width(ctx: Context, ex: Example) -> Outcome:
    x = _inputs(ex)
    (out,) = ctx.forwards_of(ex, [x], check_shape=False)
    if out.shape != x.shape:
        return _fail(f"out.shape={tuple(out.shape)}, but should be {tuple(x.shape)} "
                     f"[attn(x), x.shape={tuple(x.shape)}]: the residual width (B, T, C) "
                     "must come back.")
    return Outcome(PASS)


def check_dtype(ctx: Context, ex: Example) -> Outcome:
    x = _inputs(ex)
    (result,) = ctx.request(ex, [{"op": "forward", "x": x}], check_layout=False)
    out, device = result["out"], result["device"]
    if out.dtype != x.dtype or device != ex.device:
        return _fail(f"out is {out.dtype} on {device}, but should be {x.dtype} on "
                     f"{ex.device} like its input [attn(x), x.shape={tuple(x.shape)}].")
    return Outcome(PASS)


def check_divisibility(ctx: Context, ex: Example) -> Outcome:
    (result,) = ctx.request(None, [{"op": "refuses", "n_embd": ex.C, "n_head": ex.H}])
    if result["raised"]:
        return Outcome(PASS)  # any exception: it refused the configuration
    why = (f"{ex.C} is not divisible by {ex.H}" if ex.C >= 1 and ex.H >= 1
           else "n_embd and n_head must both be >= 1")
    return _fail(f"build({ex.C}, {ex.H}) returned {result['type']} instead of raising: {why}. "
                 "Refuse such configurations first thing in build (the heads split the "
                 "channels, so C % H must be 0):\n"
                 "    if n_embd < 1 or n_head < 1 or n_embd % n_head:\n"
                 "        raise ValueError(f\"n_embd={n_embd} must be a positive multiple of "
                 "n_head={n_head}\")")


def check_determinism(ctx: Context, ex: Example) -> Outcome:
    x = _inputs(ex)
    out, again = ctx.forwards_of(ex, [x, x])
    err, index = tol.max_abs_diff(again, out)
    if err > 0:
        return _fail(f"the same input twice in eval mode gave outputs {err:.3g} apart"
                     f"{_at(index)} (dropout or other randomness left on?).", err, 0.0, index)
    return Outcome(PASS)


def check_input_unchanged(ctx: Context, ex: Example) -> Outcome:
    x = _inputs(ex)
    (result,) = ctx.request(ex, [{"op": "forward", "x": x, "keep_input": True}],
                            check_layout=False)  # the output is not what it judges
    after: Tensor = result["input"]
    err, index = (tol.max_abs_diff(after, x) if after.shape == x.shape
                  else (math.inf, None))
    if err > 0:
        return _fail(f"forward modified its input in place by up to {err:.3g}{_at(index)}.",
                     err, 0.0, index)
    return Outcome(PASS)


def check_finite(ctx: Context, ex: Example) -> Outcome:
    x = _inputs(ex)
    (out,) = ctx.forwards_of(ex, [x])
    bad = ~torch.isfinite(out)
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        return _fail(f"{int(bad.sum())} of {out.numel()} outputs are not finite (first "
                     f"{float(out[index]):g}{_at(index)}) for finite input with "
                     f"max|x|={float(x.abs().max()):.3g}.", None, None, index)
    return Outcome(PASS)
