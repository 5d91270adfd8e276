"""What a spec puts around the core: head split, q/k norms, RoPE, its extra weights, and the
core with the spec's scale, soft cap, ALiBi slopes and window (`spec_core`). The spec pipeline
(`variants`) and the inference paths (`inference`) both build on these."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float
from torch import Tensor

from . import core
from .core import repeat_kv
from .spec import ALiBi, AttentionSpec, DynamicNTK, LinearScaling, Llama3Scaling, QKNorm, RoPE, YaRN

__all__ = ["extra_weights", "frequencies", "heads_of", "normed", "repeat_kv", "rotate",
           "sink_softmax", "spec_core", "spec_scores", "turn", "visible"]


def heads_of(
    x: Float[Tensor, "B T W"], n_heads: int, head_dim: int
) -> Float[Tensor, "B {n_heads} T {head_dim}"]:
    B, T, _ = x.shape
    # Heads split the channels, never the positions: view (B, T, N, D), then put N before T.
    return x.view(B, T, n_heads, head_dim).transpose(1, 2)


def normed(
    t: Float[Tensor, "B T W"], weight: Float[Tensor, " N"], bias: Float[Tensor, " N"] | None,
    norm: QKNorm, head_dim: int,
) -> Float[Tensor, "B T W"]:
    """q or k (B, T, heads·D) normalised over each head's D channels, or over all W when not
    per_head, in float32 or wider (as RMSNorm and LayerNorm kernels do), then weighted."""
    B, T, W = t.shape
    N = head_dim if norm.per_head else W
    exact = torch.float64 if t.dtype == torch.float64 else torch.float32
    parts = t.reshape(B, T, W // N, N).to(exact)
    if norm.kind == "layer":
        parts = parts - parts.mean(dim=-1, keepdim=True)
    unit = (parts * torch.rsqrt(parts.pow(2).mean(dim=-1, keepdim=True) + norm.eps)).to(t.dtype)
    out = unit * weight if bias is None else unit * weight + bias
    return out.reshape(B, T, W)


def extra_weights(spec: AttentionSpec, gen: torch.Generator) -> dict[str, Tensor]:
    """Weights for the spec's extras where attnspec draws its own (float64): norm weights near
    1 and norm biases near 0, as trained ones are (±1/sqrt(N) would shrink q and k to nothing)."""
    out = {}
    for key, shape in spec.weight_shapes().items():
        noise = torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1
        if key in ("q_norm_weight", "k_norm_weight"):
            out[key] = 1 + 0.25 * noise
        elif key in ("q_norm_bias", "k_norm_bias"):
            out[key] = 0.25 * noise
        elif key == "sinks":  # logits of the size scores have, so a sink takes a real share
            out[key] = 2 * noise
    return out


def frequencies(rope: RoPE, rot: int, length: int, dtype: torch.dtype, device: torch.device,
                ) -> tuple[Tensor, float]:
    """The rot / 2 frequencies and the factor on cos and sin, as transformers'
    ROPE_INIT_FUNCTIONS give them; `length` is what dynamic NTK scales by (see DynamicNTK)."""
    s, theta = rope.scaling, rope.theta
    if isinstance(s, DynamicNTK):
        seen = max(length, s.original_max_position)
        theta *= (s.factor * seen / s.original_max_position - (s.factor - 1)) ** (rot / (rot - 2))
    inv = theta ** (-torch.arange(0, rot, 2, dtype=dtype, device=device) / rot)
    if isinstance(s, LinearScaling):
        return inv / s.factor, 1.0
    if isinstance(s, YaRN):  # channels below `low` kept, above `high` interpolated, a ramp between
        def channel(turns: float) -> float:
            M = s.original_max_position
            return rot * math.log(M / (turns * 2 * math.pi)) / (2 * math.log(rope.theta))
        low, high = channel(s.beta_fast), channel(s.beta_slow)
        if s.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, rot - 1)
        high += 0.001 if low == high else 0  # transformers' guard against a zero-width ramp
        ramp = ((torch.arange(rot // 2, dtype=dtype, device=device) - low) / (high - low))
        kept = 1 - ramp.clamp(0, 1)
        return inv / s.factor * (1 - kept) + inv * kept, s.scale()
    if isinstance(s, Llama3Scaling):
        M, lo, hi = s.original_max_position, s.low_freq_factor, s.high_freq_factor
        wavelength = 2 * math.pi / inv
        scaled = torch.where(wavelength > M / lo, inv / s.factor, inv)
        smooth = (M / wavelength - lo) / (hi - lo)
        blended = (1 - smooth) * scaled / s.factor + smooth * scaled
        medium = (wavelength >= M / hi) & (wavelength <= M / lo)
        return torch.where(medium, blended, scaled), 1.0
    return inv, 1.0


def rotate(
    t: Float[Tensor, "B N T D"], rope: RoPE, offset: int, length: int | None = None,
) -> Float[Tensor, "B N T D"]:
    """RoPE on positions offset, offset + 1, ...: each rotated pair turns by position x freq
    (`length`, for dynamic NTK: offset + T unless given)."""
    T, D = t.size(-2), t.size(-1)
    rot = rope.rotary_dim(D)
    exact = torch.float64 if t.dtype == torch.float64 else torch.float32
    freq, factor = frequencies(rope, rot, offset + T if length is None else length, exact,
                               t.device)
    angle = torch.arange(offset, offset + T, dtype=exact, device=t.device)[:, None] * freq
    return turn(t, rope, angle, factor)


def turn(t: Tensor, rope: RoPE, angle: Tensor, factor: float = 1.0) -> Tensor:
    """Turn t's rotary channels by `angle` (positions x frequencies, broadcast to t's), cos and
    sin times `factor` (YaRN's attention factor)."""
    rot = rope.rotary_dim(t.size(-1))
    if factor != 1.0:
        cos, sin = (angle.cos() * factor).to(t.dtype), (angle.sin() * factor).to(t.dtype)
    else:
        cos, sin = angle.cos().to(t.dtype), angle.sin().to(t.dtype)
    moved, kept = t[..., :rot], t[..., rot:]
    if rope.interleaved:  # pairs (0, 1), (2, 3), ...
        a, b = moved[..., 0::2], moved[..., 1::2]
        turned = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
    else:  # halves (i, i + rot / 2)
        a, b = moved[..., :rot // 2], moved[..., rot // 2:]
        turned = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
    return torch.cat((turned, kept), dim=-1)


def visible(T: int, window: int | None, device: torch.device) -> Bool[Tensor, "T T"]:
    """True where query i may see key j: j <= i, and i - window < j with a window."""
    index = torch.arange(T, device=device)
    return core.visible_keys(index, index, True, spec_window(window), None)[0]


def project_heads(x: Tensor, weights: Mapping[str, Tensor], name: str, spec: AttentionSpec,
                  ) -> Tensor:
    """x's queries, keys or values (`name`), split into heads, q and k normalised first (the
    projection of spec_heads, without its trace)."""
    t = F.linear(x, weights[f"{name}_weight"], weights.get(f"{name}_bias"))
    if spec.qk_norm is not None and name != "v":
        t = normed(t, weights[f"{name}_norm_weight"], weights.get(f"{name}_norm_bias"),
                   spec.qk_norm, spec.D)
    return heads_of(t, spec.n_head if name == "q" else spec.G, spec.D)


def spec_window(window: int | None) -> core.Window | None:
    # A spec's window w keeps w keys: the query's own and the w - 1 before it.
    return None if window is None else (window - 1, None)


def _alibi(spec: AttentionSpec, H: int, device: torch.device) -> Tensor | None:
    if not isinstance(spec.positions, ALiBi):
        return None
    return torch.tensor(spec.positions.slopes_for(H), dtype=torch.float64, device=device)


def spec_raw_scores(
    q: Float[Tensor, "B H T D"], k: Float[Tensor, "B H T D"], spec: AttentionSpec,
    signed: bool = False,
) -> Float[Tensor, "B H T T"]:
    """The scores of self-attention as `spec` says, scaled, capped and tilted, not masked
    (`signed`: ALiBi by signed distance, core.tilted says why)."""
    scores = core.scores_of(q, k, spec.attn_scale)
    if spec.softcap is not None:
        scores = core.capped(scores, spec.softcap)
    index = torch.arange(q.size(-2), device=q.device)
    slopes = _alibi(spec, q.size(1), q.device)
    if slopes is not None:
        scores = core.tilted(scores, slopes, (index[:, None] - index[None, :])[None], signed)
    return scores


def spec_scores(
    q: Float[Tensor, "B H T D"], k: Float[Tensor, "B H T D"], spec: AttentionSpec
) -> Float[Tensor, "B H T T"]:
    """The masked scores of self-attention as `spec` says (the core's first steps)."""
    index = torch.arange(q.size(-2), device=q.device)
    return core.masked(spec_raw_scores(q, k, spec),
                       core.visible_keys(index, index, True, spec_window(spec.window), None))


def shifted_keys(T: int, window: int | None, how: str, device: torch.device,
                 ) -> Bool[Tensor, "1 T T"]:
    """The mask one position off: "next", the diagonal and window one key later (each query
    sees the next key too); "own", each query's own key dropped (the window's first kept)."""
    index = torch.arange(T, device=device)
    shift, narrower = (1, 0) if how == "next" else (-1, 1)
    left = None if window is None else (window - 1 - narrower, None)
    return core.visible_keys(index + shift, index, True, left, None)


def sink_softmax(
    scores: Float[Tensor, "B H Tq Tk"], sinks: Float[Tensor, " H"]
) -> Float[Tensor, "B H Tq Tk"]:
    """Softmax over each row's keys and its head's sink logit, the sink's share dropped
    (gpt-oss): rows sum to 1 - p_sink, and a row with every key masked gives zero weights."""
    return core.softmax_keys(scores, sinks)


def spec_core(q: Tensor, k: Tensor, v: Tensor, spec: AttentionSpec, **where: Any,
              ) -> tuple[Tensor, Tensor | None]:
    """The core with a spec's scale, soft cap, ALiBi slopes and window (`where`: positions,
    masks, sinks, record, keep, or other slopes, as `core.attention` takes them)."""
    where.setdefault("alibi", _alibi(spec, q.size(1), q.device))
    return core.attention(q, k, v, scale=spec.attn_scale, softcap=spec.softcap,
                          window=spec_window(spec.window), **where)


