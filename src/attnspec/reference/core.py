"""The one attention core: q, k, v -> o and the log-sum-exp, as explicit, shape-checked math.

Every reference is this core with something around it: the module references (v1's
`CausalSelfAttention`, v2's `spec_attention`, the inference paths) project x to q, k, v and
back; the kernel reference (`kernel_attention`) is the core itself, on the kernel's own
tensors. Queries are `"B H Tq D"`, keys and values `"B G Tk D"` (query head h reads key/value
head h // (H / G)); the LSE is `"B H Tq"`, natural log.

Where keys sit relative to queries is said by positions on one axis: query i is at
`q_index[i]`, key j at `k_index[j]`. Causal means j is visible when k_index[j] <= q_index[i];
a window (left, right) keeps k_index[j] in [q_index[i] - left, q_index[i] + right] (None:
unbounded on that side). ALiBi tilts scores by -slope_h * |q_pos - k_pos|, per batch row (the
positions padding shifts). A row that sees no key gives o = 0 and LSE = -inf, with zero
gradients; a head's sink is one more logit in its rows' softmax, with no value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from .typecheck import TYPECHECK, shapechecked

__all__ = ["Window", "attention", "corner_index", "kernel_attention", "repeat_kv"]

Window = tuple[int | None, int | None]
"""(left, right): keys from q_index - left to q_index + right, inclusive; None unbounded."""

Record = Callable[[str, Tensor], None]


def repeat_kv(t: Float[Tensor, "B G Tk D"], n_head: int) -> Float[Tensor, "B {n_head} Tk D"]:
    # repeat_interleave, not repeat: kv head g serves query heads g*H/G ... (g+1)*H/G - 1.
    return t.repeat_interleave(n_head // t.size(1), dim=1)


def scores_of(q: Float[Tensor, "B H Tq D"], k: Float[Tensor, "B H Tk D"], scale: float,
              ) -> Float[Tensor, "B H Tq Tk"]:
    return (q @ k.transpose(-2, -1)) * scale


def capped(scores: Float[Tensor, "B H Tq Tk"], softcap: float) -> Float[Tensor, "B H Tq Tk"]:
    return softcap * torch.tanh(scores / softcap)


def tilted(scores: Float[Tensor, "B H Tq Tk"], slopes: Float[Tensor, " H"],
           distance: Int[Tensor, "#B Tq Tk"], signed: bool = False) -> Float[Tensor, "B H Tq Tk"]:
    # |distance|: causal rows only see keys at or before them, where it is plain i - j.
    # `signed`: i - j itself, as a bias by key position alone gives it (Bloom's, MPT's) to the
    # keys past the diagonal that a mask one off lets in.
    far = (distance if signed else distance.abs()).to(scores.dtype)[:, None]
    return scores - slopes.to(device=scores.device, dtype=scores.dtype)[None, :, None, None] * far


def visible_keys(q_index: Int[Tensor, " Tq"], k_index: Int[Tensor, " Tk"], causal: bool,
                 window: Window | None, key_mask: Bool[Tensor, "B Tk"] | None,
                 ) -> Bool[Tensor, "#B Tq Tk"]:
    """True where query i may see key j."""
    i, j = q_index[:, None], k_index[None, :]
    seen = j <= i if causal else torch.ones_like(j <= i)
    if window is not None:
        left, right = window
        if left is not None:
            seen = seen & (j >= i - left)
        if right is not None:
            seen = seen & (j <= i + right)
    return seen[None] if key_mask is None else seen[None] & key_mask[:, None, :]


def masked(scores: Float[Tensor, "B H Tq Tk"], seen: Bool[Tensor, "#B Tq Tk"],
           ) -> Float[Tensor, "B H Tq Tk"]:
    # A hidden key gets -inf, so softmax gives it exactly zero weight.
    return scores.masked_fill(~seen[:, None], float("-inf"))


def with_sinks(scores: Float[Tensor, "B H Tq Tk"], sinks: Float[Tensor, " H"],
               ) -> Float[Tensor, "B H Tq Tk+1"]:
    B, H, Tq, _ = scores.shape
    sink = sinks.to(device=scores.device, dtype=scores.dtype).view(1, H, 1, 1)
    return torch.cat((scores, sink.expand(B, H, Tq, 1)), dim=-1)


def softmax_keys(scores: Float[Tensor, "B H Tq Tk"], sinks: Float[Tensor, " H"] | None,
                 ) -> Float[Tensor, "B H Tq Tk"]:
    """Softmax over each row's keys (and its head's sink, whose share is dropped)."""
    if sinks is None:
        return torch.softmax(scores, dim=-1)
    return torch.softmax(with_sinks(scores, sinks), dim=-1)[..., :-1]


def logsumexp_keys(scores: Float[Tensor, "B H Tq Tk"], sinks: Float[Tensor, " H"] | None,
                   ) -> Float[Tensor, "B H Tq"]:
    return torch.logsumexp(scores if sinks is None else with_sinks(scores, sinks), dim=-1)


def attend(weights: Float[Tensor, "B H Tq Tk"], v: Float[Tensor, "B H Tk Dv"],
           ) -> Float[Tensor, "B H Tq Dv"]:
    return weights @ v


_STEPS = (repeat_kv, scores_of, capped, tilted, visible_keys, masked, softmax_keys,
          logsumexp_keys, attend)
_PLAIN = SimpleNamespace(**{f.__name__: f for f in _STEPS})
_CHECKED = SimpleNamespace(**{f.__name__: shapechecked(f) for f in _STEPS})


def attention(
    q: Float[Tensor, "B H Tq D"], k: Float[Tensor, "B G Tk D"], v: Float[Tensor, "B G Tk Dv"],
    *, scale: float, causal: bool = True, q_index: Tensor | None = None,
    k_index: Tensor | None = None, window: Window | None = None, softcap: float | None = None,
    alibi: Tensor | None = None, q_pos: Tensor | None = None, k_pos: Tensor | None = None,
    key_mask: Tensor | None = None, sinks: Tensor | None = None, lse: bool = False,
    record: Record | None = None, keep: list[Tensor] | None = None, checked: bool = True,
    every_row_sees: bool = False,
) -> tuple[Float[Tensor, "B H Tq Dv"], Float[Tensor, "B H Tq"] | None]:
    """o (and, with `lse`, the log-sum-exp) of queries on keys. Positions default to the
    bottom-right corner: query i at Tk - Tq + i, key j at j. `record(stage, tensor)` sees
    "shared kv", "scores" and "weights"; `keep` receives the weights. `every_row_sees`: the
    caller knows each query sees a key (causal self-attention), so no row is looked for, which
    keeps the core free of data-dependent branches (torch.compile)."""
    steps = _CHECKED if checked and TYPECHECK else _PLAIN
    B, H, Tq, _ = q.shape
    Tk = k.size(2)
    if q_index is None:
        q_index = corner_index("bottom_right", Tq, Tk, q.device)
    if k_index is None:
        k_index = torch.arange(Tk, device=q.device)
    k, v = steps.repeat_kv(k, H), steps.repeat_kv(v, H)
    if record is not None:
        record("shared kv", k)
    scores = steps.scores_of(q, k, scale)
    if softcap is not None:
        scores = steps.capped(scores, softcap)
    if alibi is not None:
        qp = q_index[None] if q_pos is None else q_pos
        kp = k_index[None] if k_pos is None else k_pos
        scores = steps.tilted(scores, alibi, qp[:, :, None] - kp[:, None, :])
    seen = steps.visible_keys(q_index, k_index, causal, window, key_mask)
    scores = steps.masked(scores, seen)
    some = seen.any(dim=-1, keepdim=True)[:, None]  # (B or 1, 1, Tq, 1)
    full = every_row_sees or bool(some.all())
    if full:
        weights = steps.softmax_keys(scores, sinks)
    else:  # a row with no visible key: finite scores in, zero weights out (and zero gradients)
        weights = steps.softmax_keys(scores.masked_fill(~some, 0.0), sinks) * some
    if record is not None:
        record("scores", scores)
        record("weights", weights)
    if keep is not None:
        keep.append(weights)
    out = steps.attend(weights, v)
    if not lse:
        return out, None
    if full:
        return out, steps.logsumexp_keys(scores, sinks)
    total = steps.logsumexp_keys(scores.masked_fill(~some, 0.0), sinks)
    if sinks is None:
        return out, total.masked_fill(~some[..., 0], float("-inf"))
    alone = sinks.to(device=q.device, dtype=total.dtype).view(1, H, 1).expand_as(total)
    return out, torch.where(some[..., 0], total, alone)  # a sink alone: its own logit


def corner_index(corner: str, Tq: int, Tk: int, device: torch.device | str) -> Tensor:
    """Query positions on the key axis: Tk - Tq + i at the bottom right (FlashAttention's
    causal), i at the top left (SDPA's is_causal)."""
    shift = Tk - Tq if corner == "bottom_right" else 0
    return torch.arange(Tq, device=device) + shift


def kernel_attention(
    q: Float[Tensor, "B H Tq D"], k: Float[Tensor, "B G Tk D"], v: Float[Tensor, "B G Tk Dv"],
    *, causal: bool, corner: str = "bottom_right", scale: float | None = None,
    window: Window | None = None, softcap: float | None = None, alibi: Tensor | None = None,
    sinks: Tensor | None = None,
) -> tuple[Float[Tensor, "B H Tq Dv"], Float[Tensor, "B H Tq"]]:
    """The kernel reference: o and the natural-log LSE of a kernel's own q, k, v (BHSD), with
    its causal corner, window, soft cap, ALiBi slopes and sinks."""
    Tq, Tk = q.size(2), k.size(2)
    out, lse = attention(
        q, k, v, scale=1.0 / math.sqrt(q.size(-1)) if scale is None else scale, causal=causal,
        q_index=corner_index(corner, Tq, Tk, q.device), window=window, softcap=softcap,
        alibi=alibi, sinks=sinks, lse=True)
    assert lse is not None
    return out, lse
