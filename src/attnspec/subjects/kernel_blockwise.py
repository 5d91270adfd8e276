"""A blockwise online-softmax attention kernel in plain torch (PROTOCOL = "kernel"): the
FlashAttention forward written out with real tiles. Each block_q x block_k tile of scores is
computed, soft-capped, biased (ALiBi) and masked; a running row maximum and sum are rescaled as
tiles arrive, tiles wholly outside the causal corner or the window are skipped, and the last
tile of each axis is a tail when T is not a multiple of the block. A row that sees no key gives
o = 0 and lse = -inf (or lse = the sink, with sinks). The backward is autograd through these
torch ops. A correct double that takes every feature; the knobs change only the tiling."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ._kernels import check_qkv, per_head, window_pair

PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_GRAD = True  # the LSE is torch math through autograd: a loss on it has a backward
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = True
# Fixed tile order and no atomics: the backward repeats bit for bit (measured on CPU, float32).
DETERMINISTIC = True
FEATURES = ("gqa", "scale", "noncausal", "cross", "softcap", "alibi", "sinks")
KNOBS = {"block_q": (16, 32, 64), "block_k": (16, 32, 64)}
DTYPES = (torch.float32, torch.float64, torch.bfloat16)

_NAME = "attnspec.subjects.kernel_blockwise"
_INF = float("inf")


def _block(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{_NAME}.attention({name}={value!r}): a tile size must be an int >= 1 "
                         f"(KNOBS lists {KNOBS[name]}).")
    return value


def _key_range(q0: int, q1: int, shift: int, left: int, right: int, Tk: int) -> tuple[int, int]:
    """The keys [lo, hi) that some query in [q0, q1) may see: i' = i + shift, keys i' - left ..
    i' + right (a bound of -1 is none)."""
    lo = 0 if left < 0 else max(0, q0 + shift - left)
    hi = Tk if right < 0 else min(Tk, q1 - 1 + shift + right + 1)
    return lo, hi


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, scale: float | None = None,
              window: tuple[int, int] | None = None, softcap: float | None = None,
              alibi_slopes: Tensor | None = None, sinks: Tensor | None = None,
              block_q: int = 32, block_k: int = 32) -> tuple[Tensor, Tensor]:
    """o (B, H, Tq, Dv) in q's dtype and lse (B, H, Tq), natural log, in the accumulator's dtype
    (float64 for float64 inputs, else float32, as FlashAttention returns it)."""
    B, H, G, Tq, Tk, D = check_qkv(_NAME, LAYOUT, q, k, v)
    bq, bk = _block("block_q", block_q), _block("block_k", block_k)
    left, right = window_pair(_NAME, window, causal)
    if softcap is not None and not softcap > 0:
        raise ValueError(f"{_NAME}.attention(softcap={softcap!r}): a soft cap must be > 0 "
                         "(None means no cap).")
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = D ** -0.5 if scale is None else float(scale)
    R, Dv, shift = H // G, v.size(-1), Tk - Tq
    # Query head h = g * R + r reads kv head g: group the query heads, broadcast the kv heads.
    qg = q.reshape(B, G, R, Tq, D)
    kg, vg = k.reshape(B, G, 1, Tk, D), v.reshape(B, G, 1, Tk, Dv)
    slopes = (per_head(_NAME, "alibi_slopes", alibi_slopes, H).to(q.device, acc)
              .reshape(1, G, R, 1, 1) if alibi_slopes is not None else None)
    sink = (per_head(_NAME, "sinks", sinks, H).to(q.device, acc).reshape(1, G, R, 1)
            if sinks is not None else None)
    keys = torch.arange(Tk, device=q.device)
    outs, lses = [], []
    for q0 in range(0, Tq, bq):
        q1 = min(q0 + bq, Tq)  # the tail tile when Tq % block_q != 0
        qt = qg[..., q0:q1, :].to(acc)
        rows = torch.arange(q0, q1, device=q.device) + shift  # i' of each row
        if sink is None:
            m = qt.new_full((B, G, R, q1 - q0), -_INF)
            run = qt.new_zeros((B, G, R, q1 - q0))
        else:  # the sink is a first logit with no value: max starts at it, the sum at exp(0)
            m = sink.detach().expand(B, G, R, q1 - q0)
            run = torch.exp(sink - sink.detach()).expand(B, G, R, q1 - q0)
        o = qt.new_zeros((B, G, R, q1 - q0, Dv))
        lo, hi = _key_range(q0, q1, shift, left, right, Tk)
        for k0 in range(lo - lo % bk, hi, bk):  # tiles on the block grid; skipped ones never run
            k1 = min(k0 + bk, Tk)
            s = qt @ kg[..., k0:k1, :].to(acc).transpose(-1, -2) * scale
            if softcap is not None:
                s = softcap * torch.tanh(s / softcap)
            gap = rows[:, None] - keys[None, k0:k1]  # i' - j
            if slopes is not None:
                s = s - slopes * gap.abs().to(acc)
            seen = torch.ones_like(gap, dtype=torch.bool)
            if right >= 0:  # causal sets right = 0
                seen &= gap >= -right
            if left >= 0:
                seen &= gap <= left
            s = s.masked_fill(~seen, -_INF)
            # The running max only keeps exp() in range; o and lse do not depend on it.
            m_new = torch.maximum(m, s.detach().amax(-1))
            m_safe = m_new.masked_fill(m_new == -_INF, 0.0)  # -inf - -inf would be NaN
            alpha = torch.exp(m - m_safe)
            p = torch.exp(s - m_safe[..., None])
            run = run * alpha + p.sum(-1)
            o = o * alpha[..., None] + p @ vg[..., k0:k1, :].to(acc)
            m = m_new
        seen_any = run > 0
        denominator = torch.where(seen_any, run, torch.ones_like(run))
        outs.append(o / denominator[..., None])
        m_safe = m.masked_fill(m == -_INF, 0.0)
        lses.append(torch.where(seen_any, m_safe + torch.log(denominator),
                                torch.full_like(run, -_INF)))
    out = torch.cat(outs, dim=-2) if outs else q.new_zeros((B, G, R, 0, Dv), dtype=acc)
    lse = torch.cat(lses, dim=-1) if lses else q.new_zeros((B, G, R, 0), dtype=acc)
    out, lse = out.reshape(B, H, Tq, Dv).to(q.dtype), lse.reshape(B, H, Tq)
    if torch.is_grad_enabled() and not out.requires_grad and (
            q.requires_grad or k.requires_grad or v.requires_grad):
        # No tile ran (Tk = 0, or every row masked): tie o to the inputs with an exact zero, so
        # autograd gives zero gradients rather than refusing an output outside the graph.
        tie = q[..., :0].sum() + k[..., :0].sum() + v[..., :0].sum()
        out, lse = out + tie.to(out.dtype), lse + tie.to(lse.dtype)
    return out, lse


def supports(case: dict[str, Any]) -> bool:
    """Every case: the tiles cover any shape, and CPU or GPU alike."""
    return True
