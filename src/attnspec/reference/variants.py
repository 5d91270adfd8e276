"""The reference for every attention spec: explicit math, shape-annotated, as the oracle uses it.

Queries are `"B H T D"`, keys and values `"B G T D"` (G = n_kv_head); query head h reads
key/value head h // (H / G). Scores are scaled, soft-capped, biased (ALiBi), then masked
(causal, and the window), so a masked key gets exactly zero weight.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from . import inference
from .module import merge_heads
from .pieces import (
    extra_weights,
    frequencies,
    heads_of,
    normed,
    repeat_kv,
    rotate,
    sink_softmax,
    spec_core,
    spec_scores,
    turn,
    visible,
)
from .spec import (
    EXTRA_WEIGHT_KEYS,
    ALiBi,
    AttentionSpec,
    RoPE,
)
from .trace import ShapeTrace
from .typecheck import TYPECHECK, shapechecked

__all__ = ["SpecAttention", "extra_weights", "frequencies", "heads_of", "normed", "repeat_kv",
           "rotate", "sink_softmax", "spec_attention", "spec_core", "spec_heads", "spec_scores",
           "turn", "visible"]


_STEPS = (normed, heads_of, rotate, merge_heads)
_STEPS_RUN = SimpleNamespace(**{f.__name__: shapechecked(f) if TYPECHECK else f
                                for f in _STEPS})


def spec_attention(
    x: Float[Tensor, "B T C"], weights: Mapping[str, Tensor], spec: AttentionSpec,
    offset: int = 0,
) -> Float[Tensor, "B T C"]:
    """Attention as `spec` says, from protocol-layout weights: q (H·D, C), k and v (G·D, C),
    o (C, H·D), optional biases. Positions start at `offset`. Gradients flow to whatever
    requires them."""
    return spec_pipeline(x, weights, spec, offset, None)


def spec_heads(x: Tensor, weights: Mapping[str, Tensor], spec: AttentionSpec, offset: int,
               record: Callable[..., None] | None = None, steps: SimpleNamespace | None = None,
               ) -> tuple[Tensor, Tensor, Tensor]:
    """x -> q (B, H, T, D), k and v (B, G, T, D) as `spec` says: the projections, q/k norms,
    the head split and RoPE from position `offset` (`record(stage, t, note, labels)` traces)."""
    steps = _STEPS_RUN if steps is None else steps
    note = record or (lambda *_: None)
    H, G, D = spec.n_head, spec.G, spec.D
    q = F.linear(x, weights["q_weight"], weights.get("q_bias"))
    note("projection", q, "q; k and v are B T G*D", "B T H*D")
    k = F.linear(x, weights["k_weight"], weights.get("k_bias"))
    if spec.qk_norm is not None:
        norm = spec.qk_norm
        q = steps.normed(q, weights["q_norm_weight"], weights.get("q_norm_bias"), norm, D)
        k = steps.normed(k, weights["k_norm_weight"], weights.get("k_norm_bias"), norm, D)
        note("qk norm", q, f"{norm.kind} norm of q and k over "
             + ("each head's D" if norm.per_head else "the whole projection"), "B T H*D")
    q = steps.heads_of(q, H, D)
    note("head split", q)
    k = steps.heads_of(k, G, D)
    v = steps.heads_of(F.linear(x, weights["v_weight"], weights.get("v_bias")), G, D)
    note("kv heads", k)
    if isinstance(spec.positions, RoPE):
        q = steps.rotate(q, spec.positions, offset)
        k = steps.rotate(k, spec.positions, offset)
        scaling = spec.positions.scaling
        note("rotary", q, None if scaling is None else
             f"RoPE on queries and keys, {type(scaling).__name__} x{scaling.factor:g}")
    return q, k, v


def spec_pipeline(x: Tensor, weights: Mapping[str, Tensor], spec: AttentionSpec, offset: int,
              keep: list[Tensor] | None, trace: ShapeTrace | None = None) -> Tensor:
    steps = _STEPS_RUN

    def record(stage: str, t: Tensor, note: str | None = None, labels: str | None = None,
               ) -> None:
        if trace is not None:
            trace.record(stage, tuple(t.shape), note, labels)

    record("input", x)
    q, k, v = spec_heads(x, weights, spec, offset, record, steps)
    masking = "causal" if spec.window is None else f"causal, window {spec.window}"
    extras = (["soft-capped"] if spec.softcap is not None else []) + (
        ["ALiBi"] if isinstance(spec.positions, ALiBi) else [])
    notes = {"scores": f"q @ k^T x {spec.attn_scale:.4g}" + "".join(f", {e}" for e in extras)
             + f", {masking}",
             "weights": "softmax over keys and the head's sink, the sink dropped"
             if spec.sinks else None}
    y, _ = spec_core(q, k, v, spec, sinks=weights["sinks"] if spec.sinks else None, keep=keep,
                     every_row_sees=True,
                     record=lambda stage, t: record(stage, t, notes.get(stage)))
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
        out = spec_pipeline(x, self.export_weights(), self.spec, 0, None, trace)
        return out, trace

    def attention_weights(self, x: Tensor) -> Tensor:
        """The softmax weights (B, H, T, T) of every query head on `x`: zero outside the window,
        tilted by ALiBi, shared by the query heads of one key/value head; with sinks, each row
        sums to 1 less its sink's share."""
        kept: list[Tensor] = []
        spec_pipeline(x, self.export_weights(), self.spec, 0, kept)
        return kept[0]

    def decode(self, x: Tensor, cache: tuple[Tensor, Tensor] | None, offset: int,
               ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Tokens at positions offset, offset + 1, ... against the cache of the earlier ones
        (None at offset 0): their outputs (B, t, C) and the cache grown by them."""
        return inference.decode_step(x, self.export_weights(), self.spec, cache, offset)

    def decode_padded(self, x: Tensor, key_mask: Tensor, cache: tuple[Tensor, Tensor] | None,
                      offset: int) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """`decode` on a padded batch: key_mask (B, offset + t) marks the real tokens so far
        (left padding in the prefill); positions count each row's real tokens."""
        return inference.padded_decode_step(x, self.export_weights(), self.spec, cache, offset,
                                            key_mask)

    def shifted(self, x: Tensor, offset: int) -> Tensor:
        """Forward with x's positions starting at `offset` (RoPE turns by them; ALiBi and the
        rest see only distances, so only rounding may differ from forward)."""
        return spec_attention(x, self.export_weights(), self.spec, offset)

    def padded(self, x: Tensor, key_mask: Tensor) -> Tensor:
        """Forward on a padded batch: key_mask (B, T) is True at real tokens (contiguous, on
        either side); padding is never read, positions count real tokens."""
        return inference.padded_attention(x, self.export_weights(), self.spec, key_mask)

    def cross(self, x_q: Tensor, x_kv: Tensor, corner: str = "bottom_right") -> Tensor:
        """Tq queries from x_q on Tk keys and values from x_kv, causal from `corner`."""
        return inference.cross_attention(x_q, x_kv, self.export_weights(), self.spec, corner)

    def export_weights(self) -> dict[str, Tensor]:
        """The projections in protocol v2's layout; the parameters themselves."""
        out = {f"{n}_weight": getattr(self, n).weight for n in "qkvo"}
        if self.spec.bias:
            out |= {f"{n}_bias": getattr(self, n).bias for n in "qkvo"}
        extras = [k for k in self.spec.weight_shapes() if k in EXTRA_WEIGHT_KEYS]
        return out | {k: getattr(self, k) for k in extras}
