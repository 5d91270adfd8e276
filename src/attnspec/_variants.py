"""The reference for every attention spec: explicit math, shape-annotated, as the oracle uses it.

Queries are `"B H T D"`, keys and values `"B G T D"` (G = n_kv_head); query head h reads
key/value head h // (H / G). Scores are scaled, soft-capped, biased (ALiBi), then masked
(causal, and the window), so a masked key gets exactly zero weight.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float
from torch import Tensor, nn

from ._reference import attend, merge_heads, softmax_keys
from ._spec import (
    EXTRA_WEIGHT_KEYS,
    ALiBi,
    AttentionSpec,
    DynamicNTK,
    LinearScaling,
    Llama3Scaling,
    QKNorm,
    RoPE,
    YaRN,
)
from ._trace import ShapeTrace
from ._typecheck import TYPECHECK, shapechecked

__all__ = ["SpecAttention", "extra_weights", "frequencies", "normed", "sink_softmax",
           "spec_attention", "turn", "visible"]


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


def repeat_kv(t: Float[Tensor, "B G T D"], n_head: int) -> Float[Tensor, "B {n_head} T D"]:
    # repeat_interleave, not repeat: kv head g serves query heads g*H/G ... (g+1)*H/G - 1.
    return t.repeat_interleave(n_head // t.size(1), dim=1)


def visible(T: int, window: int | None, device: torch.device) -> Bool[Tensor, "T T"]:
    """True where query i may see key j: j <= i, and i - window < j with a window."""
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    seen = j <= i
    return seen if window is None else seen & (i - window < j)


def spec_scores(
    q: Float[Tensor, "B H T D"], k: Float[Tensor, "B H T D"], spec: AttentionSpec
) -> Float[Tensor, "B H T T"]:
    scores = (q @ k.transpose(-2, -1)) * spec.attn_scale
    if spec.softcap is not None:
        scores = spec.softcap * torch.tanh(scores / spec.softcap)
    T = q.size(-2)
    if isinstance(spec.positions, ALiBi):
        slopes = torch.tensor(spec.positions.slopes_for(q.size(1)), dtype=scores.dtype,
                              device=q.device)
        i = torch.arange(T, device=q.device)[:, None]
        j = torch.arange(T, device=q.device)[None, :]
        scores = scores - slopes[:, None, None] * (i - j).to(scores.dtype)
    # A masked key gets -inf, so softmax gives it exactly zero weight.
    return scores.masked_fill(~visible(T, spec.window, q.device), float("-inf"))


def sink_softmax(
    scores: Float[Tensor, "B H Tq Tk"], sinks: Float[Tensor, " H"]
) -> Float[Tensor, "B H Tq Tk"]:
    """Softmax over each row's keys and its head's sink logit, the sink's share dropped
    (gpt-oss): rows sum to 1 - p_sink, and a row with every key masked gives zero weights."""
    B, H, Tq, _ = scores.shape
    sink = sinks.to(scores.dtype).view(1, H, 1, 1).expand(B, H, Tq, 1)
    return torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]


_STEPS = (normed, heads_of, rotate, repeat_kv, spec_scores, softmax_keys, sink_softmax, attend,
          merge_heads)
_STEPS_RUN = SimpleNamespace(**{f.__name__: shapechecked(f) if TYPECHECK else f
                                for f in _STEPS})


def spec_attention(
    x: Float[Tensor, "B T C"], weights: Mapping[str, Tensor], spec: AttentionSpec,
    offset: int = 0,
) -> Float[Tensor, "B T C"]:
    """Attention as `spec` says, from protocol-layout weights: q (H·D, C), k and v (G·D, C),
    o (C, H·D), optional biases. Positions start at `offset`. Gradients flow to whatever
    requires them."""
    return _pipeline(x, weights, spec, offset, None)


def _pipeline(x: Tensor, weights: Mapping[str, Tensor], spec: AttentionSpec, offset: int,
              keep: list[Tensor] | None, trace: ShapeTrace | None = None) -> Tensor:
    steps = _STEPS_RUN

    def record(stage: str, t: Tensor, note: str | None = None, labels: str | None = None,
               ) -> None:
        if trace is not None:
            trace.record(stage, tuple(t.shape), note, labels)

    H, G, D = spec.n_head, spec.G, spec.D
    record("input", x)
    q = F.linear(x, weights["q_weight"], weights.get("q_bias"))
    record("projection", q, "q; k and v are B T G*D", "B T H*D")
    k = F.linear(x, weights["k_weight"], weights.get("k_bias"))
    if spec.qk_norm is not None:
        norm = spec.qk_norm
        q = steps.normed(q, weights["q_norm_weight"], weights.get("q_norm_bias"), norm, D)
        k = steps.normed(k, weights["k_norm_weight"], weights.get("k_norm_bias"), norm, D)
        record("qk norm", q, f"{norm.kind} norm of q and k over "
               + ("each head's D" if norm.per_head else "the whole projection"), "B T H*D")
    q = steps.heads_of(q, H, D)
    record("head split", q)
    k = steps.heads_of(k, G, D)
    v = steps.heads_of(F.linear(x, weights["v_weight"], weights.get("v_bias")), G, D)
    record("kv heads", k)
    if isinstance(spec.positions, RoPE):
        q = steps.rotate(q, spec.positions, offset)
        k = steps.rotate(k, spec.positions, offset)
        scaling = spec.positions.scaling
        record("rotary", q, None if scaling is None else
               f"RoPE on queries and keys, {type(scaling).__name__} x{scaling.factor:g}")
    k, v = steps.repeat_kv(k, H), steps.repeat_kv(v, H)
    record("shared kv", k)
    scores = steps.spec_scores(q, k, spec)
    masking = "causal" if spec.window is None else f"causal, window {spec.window}"
    extras = (["soft-capped"] if spec.softcap is not None else []) + (
        ["ALiBi"] if isinstance(spec.positions, ALiBi) else [])
    record("scores", scores, f"q @ k^T x {spec.attn_scale:.4g}"
           + "".join(f", {e}" for e in extras) + f", {masking}")
    if spec.sinks:
        attention = steps.sink_softmax(scores, weights["sinks"])
        record("weights", attention, "softmax over keys and the head's sink, the sink dropped")
    else:
        attention = steps.softmax_keys(scores)
        record("weights", attention)
    if keep is not None:
        keep.append(attention)
    y = steps.attend(attention, v)
    record("attend", y)
    merged = steps.merge_heads(y)
    record("merge", merged, "B H T D -> B T (H D)", "B T H*D")
    out = F.linear(merged, weights["o_weight"], weights.get("o_bias"))
    record("output projection", out)
    return out


class SpecAttention(nn.Module):
    """The reference as a module built from a spec: separate q, k, v, o projections.

    ```python
    attn = SpecAttention(AttentionSpec(n_embd=64, n_head=8, n_kv_head=2, positions=RoPE()))
    y = attn(torch.randn(2, 5, 64))          # (2, 5, 64)
    ```
    """

    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        if not isinstance(spec, AttentionSpec):
            raise TypeError(f"SpecAttention(spec): expected an attnspec.AttentionSpec, got "
                            f"{type(spec).__name__}.")
        self.spec = spec
        C, H, G, D = spec.n_embd, spec.n_head, spec.G, spec.D
        self.q = nn.Linear(C, H * D, bias=spec.bias)
        self.k = nn.Linear(C, G * D, bias=spec.bias)
        self.v = nn.Linear(C, G * D, bias=spec.bias)
        self.o = nn.Linear(H * D, C, bias=spec.bias)
        shapes = spec.weight_shapes()
        if spec.qk_norm is not None:  # norms start as the identity, as nn.RMSNorm's do
            self.q_norm_weight = nn.Parameter(torch.ones(shapes["q_norm_weight"]))
            self.k_norm_weight = nn.Parameter(torch.ones(shapes["k_norm_weight"]))
            if spec.qk_norm.kind == "layer":
                self.q_norm_bias = nn.Parameter(torch.zeros(shapes["q_norm_bias"]))
                self.k_norm_bias = nn.Parameter(torch.zeros(shapes["k_norm_bias"]))
        if spec.sinks:  # a sink logit of 0 per head: it takes a share as large as a zero score's
            self.sinks = nn.Parameter(torch.zeros(H))

    def extra_repr(self) -> str:
        return self.spec.describe()

    def forward(self, x: Tensor) -> Tensor:
        return spec_attention(x, self.export_weights(), self.spec)

    def traced(self, x: Tensor) -> tuple[Tensor, ShapeTrace]:
        """Run forward once and return its output with the shape of every stage, grouped
        keys and values (`"B G T D"`) and their sharing among query heads included."""
        trace = ShapeTrace(self.spec.n_embd, self.spec.n_head, spec=self.spec.describe())
        out = _pipeline(x, self.export_weights(), self.spec, 0, None, trace)
        return out, trace

    def attention_weights(self, x: Tensor) -> Tensor:
        """The softmax weights (B, H, T, T) of every query head on `x`: zero outside the window,
        tilted by ALiBi, shared by the query heads of one key/value head; with sinks, each row
        sums to 1 less its sink's share."""
        kept: list[Tensor] = []
        _pipeline(x, self.export_weights(), self.spec, 0, kept)
        return kept[0]

    def decode(self, x: Tensor, cache: tuple[Tensor, Tensor] | None, offset: int,
               ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Tokens at positions offset, offset + 1, ... against the cache of the earlier ones
        (None at offset 0): their outputs (B, t, C) and the cache grown by them."""
        from ._inference import decode_step

        return decode_step(x, self.export_weights(), self.spec, cache, offset)

    def decode_padded(self, x: Tensor, key_mask: Tensor, cache: tuple[Tensor, Tensor] | None,
                      offset: int) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """`decode` on a padded batch: key_mask (B, offset + t) marks the real tokens so far
        (left padding in the prefill); positions count each row's real tokens."""
        from ._inference import padded_decode_step

        return padded_decode_step(x, self.export_weights(), self.spec, cache, offset, key_mask)

    def shifted(self, x: Tensor, offset: int) -> Tensor:
        """Forward with x's positions starting at `offset` (RoPE turns by them; ALiBi and the
        rest see only distances, so only rounding may differ from forward)."""
        return spec_attention(x, self.export_weights(), self.spec, offset)

    def padded(self, x: Tensor, key_mask: Tensor) -> Tensor:
        """Forward on a padded batch: key_mask (B, T) is True at real tokens (contiguous, on
        either side); padding is never read, positions count real tokens."""
        from ._inference import padded_attention

        return padded_attention(x, self.export_weights(), self.spec, key_mask)

    def cross(self, x_q: Tensor, x_kv: Tensor, corner: str = "bottom_right") -> Tensor:
        """Tq queries from x_q on Tk keys and values from x_kv, causal from `corner`."""
        from ._inference import cross_attention

        return cross_attention(x_q, x_kv, self.export_weights(), self.spec, corner)

    def export_weights(self) -> dict[str, Tensor]:
        """The projections in protocol v2's layout; the parameters themselves."""
        out = {f"{n}_weight": getattr(self, n).weight for n in "qkvo"}
        if self.spec.bias:
            out |= {f"{n}_bias": getattr(self, n).bias for n in "qkvo"}
        extras = [k for k in self.spec.weight_shapes() if k in EXTRA_WEIGHT_KEYS]
        return out | {k: getattr(self, k) for k in extras}
