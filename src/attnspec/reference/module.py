"""The v1 reference: causal multi-head self-attention, the core (`core.attention`) between a
fused q, k, v projection and an output projection, every step shape-annotated.

This is the oracle: the explicit path never calls `scaled_dot_product_attention`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from .._errors import ShapeError
from . import core
from .config import AttentionConfig
from .trace import ShapeTrace
from .typecheck import TYPECHECK, shapechecked

__all__ = [
    "AttentionWeights",
    "CausalSelfAttention",
    "HeadTensor",
    "Kernel",
    "Residual",
    "WEIGHT_KEYS",
]

Residual = Float[Tensor, "B T C"]
"""The residual stream: batch, token positions, channels (C = n_embd)."""
HeadTensor = Float[Tensor, "B H T D"]
"""Per-head queries, keys, values or outputs (D = head_dim = C / H)."""
AttentionWeights = Float[Tensor, "B H T T"]
"""Attention scores or weights: batch, head, query position, key position."""

Kernel = Literal["explicit", "sdpa"]
WEIGHT_KEYS = ("q_weight", "k_weight", "v_weight", "o_weight")
BIAS_KEYS = ("q_bias", "k_bias", "v_bias", "o_bias")


# The pipeline's steps, each annotated with the shapes it takes and gives.


def residual_input(x: Float[Tensor, "B T {n_embd}"], n_embd: int) -> Float[Tensor, "B T {n_embd}"]:
    return x


# Its errors are about forward's input, so they should say so.
residual_input.__qualname__ = "CausalSelfAttention.forward"


def split_heads(
    x: Float[Tensor, "B T C"], n_head: int
) -> Float[Tensor, "B {n_head} T C//{n_head}"]:
    B, T, C = x.shape
    # Heads split the channels, never the positions: view (B, T, H, D), then put H before T.
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


def merge_heads(y: Float[Tensor, "B H T D"]) -> Float[Tensor, "B T H*D"]:
    B, H, T, D = y.shape
    # Transpose back to (B, T, H, D) before concatenating heads; a bare view would mix positions.
    return y.transpose(1, 2).contiguous().view(B, T, H * D)


_STEPS = (residual_input, split_heads, merge_heads)
_PLAIN = SimpleNamespace(**{f.__name__: f for f in _STEPS})
_CHECKED = SimpleNamespace(**{f.__name__: shapechecked(f) for f in _STEPS})
_MAX_SIGNATURES = 256
# Shared by every instance: verify builds a new module per example, and shapes follow from the
# key alone (class, n_embd, n_head, kernel, input and weight shapes, dtype, device).
_CHECKED_SIGNATURES: set[tuple[object, ...]] = set()


Note = Callable[..., None]  # note(stage, shape, remark=None): what a trace records


def _unrecorded(stage: str, shape: Sequence[int], remark: str | None = None) -> None:
    """The recorder of a forward that is not traced."""


def _core_stages(note: Note) -> Callable[[str, Tensor], None] | None:
    """The core's stages for the v1 trace: scores and weights (v1 has no shared kv)."""
    if note is _unrecorded:
        return None  # the core then keeps no record at all

    def record(stage: str, t: Tensor) -> None:
        if stage != "shared kv":
            note(stage, t.shape)
    return record


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention, the reference: (B, T, C) in, (B, T, C) out.

    q, k, v projections (fused, as in nanoGPT), head split to (B, H, T, D), scaled scores
    (B, H, T, T), causal mask, softmax over keys, attend, merge heads, output projection.

    ```python
    attn = CausalSelfAttention(n_embd=12, n_head=3)
    y = attn(torch.randn(2, 5, 12))          # (2, 5, 12)
    y, trace = attn.traced(torch.randn(2, 5, 12))
    print(trace)                             # every reshape boundary
    ```

    **Arguments:**

    - `n_embd`: C, the residual width.
    - `n_head`: H; must divide `n_embd` (checked here, with the valid head counts in the error).
    - `bias`: biases on the projections.
    - `kernel`: `"explicit"` (the oracle, the default) or `"sdpa"`, a fast path for consumers
      that computes the same attention with `F.scaled_dot_product_attention`.

    Shapes are checked at runtime (see `ATTNSPEC_TYPECHECK`): a wrong rank, width or dtype
    raises `ShapeError`. Each new (shape, dtype, device) is checked at every step; the pipeline's
    shapes depend on nothing else, so a signature already checked (by any instance with the same
    n_embd, n_head and kernel) is not checked again.
    """

    def __init__(
        self, n_embd: int, n_head: int, *, bias: bool = True, kernel: Kernel = "explicit"
    ) -> None:
        super().__init__()
        self.config = AttentionConfig(n_embd, n_head, bias)
        if kernel not in ("explicit", "sdpa"):
            raise ValueError(
                f"CausalSelfAttention(kernel={kernel!r}): kernel must be 'explicit' or 'sdpa'."
            )
        self.n_embd = n_embd
        self.n_head = n_head
        self.head_dim = self.config.head_dim
        self.kernel: Kernel = kernel
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self._note: Note = _unrecorded  # the trace's recorder while traced() runs

    if TYPE_CHECKING:
        # torch types Module.__call__ as Any; consumers get a Tensor out of attn(x).
        def __call__(self, x: Residual) -> Residual: ...

    def extra_repr(self) -> str:
        return f"n_embd={self.n_embd}, n_head={self.n_head}, kernel={self.kernel!r}"

    def forward(self, x: Residual) -> Residual:
        if TYPECHECK and not torch.compiler.is_compiling():
            if not isinstance(x, Tensor):
                return self._pipeline(x, _CHECKED, explicit=self.kernel == "explicit")
            modules = self._modules  # plain dict lookups: Module.__getattr__ costs ~0.7 us each
            signature = (type(self), self.n_embd, self.n_head, x.shape, x.dtype, x.device,
                         modules["c_attn"]._parameters["weight"].shape,  # type: ignore[union-attr]
                         modules["c_proj"]._parameters["weight"].shape,  # type: ignore[union-attr]
                         self.kernel)
            if signature not in _CHECKED_SIGNATURES:
                out = self._pipeline(x, _CHECKED, explicit=self.kernel == "explicit")
                if len(_CHECKED_SIGNATURES) >= _MAX_SIGNATURES:
                    _CHECKED_SIGNATURES.clear()
                _CHECKED_SIGNATURES.add(signature)
                return out
        if self.kernel == "sdpa":
            return self._sdpa_fused(x)
        return self._pipeline(x, _PLAIN, explicit=True)

    def _sdpa_fused(self, x: Residual) -> Residual:
        """The fast path once its shapes are checked: the pipeline's sdpa computation with one
        reshape each way instead of per-step calls. q, k and v get the same strides as
        split_heads gives them, so the result is bitwise the pipeline's (a test pins it)."""
        B, T, C = x.shape
        qkv = self.c_attn(x).view(B, T, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: Residual = self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return out

    def _pipeline(self, x: Residual, steps: SimpleNamespace, *, explicit: bool,
                  keep_weights: list[Tensor] | None = None) -> Residual:
        note = self._note
        x = steps.residual_input(x, self.n_embd)
        note("input", x.shape)
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        note("projection", q.shape)
        q = steps.split_heads(q, self.n_head)
        k = steps.split_heads(k, self.n_head)
        v = steps.split_heads(v, self.n_head)
        note("head split", q.shape)
        if explicit:
            # The core's steps: scores, the causal mask, softmax over keys, attend.
            y, _ = core.attention(q, k, v, scale=1.0 / math.sqrt(self.head_dim),
                                  record=_core_stages(note), keep=keep_weights,
                                  checked=steps is _CHECKED, every_row_sees=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            B, H, T, _ = q.shape
            note("scores", (B, H, T, T), "fused inside sdpa (not materialised)")
            note("weights", (B, H, T, T), "fused inside sdpa (not materialised)")
        note("attend", y.shape)
        y = steps.merge_heads(y)
        note("merge", y.shape)
        out: Residual = steps.residual_input(self.c_proj(y), self.n_embd)
        note("output projection", out.shape)
        return out

    def traced(self, x: Residual) -> tuple[Residual, ShapeTrace]:
        """Run forward once and return its output with the shape of every stage."""
        trace = ShapeTrace(self.n_embd, self.n_head)
        self._note = lambda stage, shape, remark=None: trace.record(stage, tuple(shape), remark)
        try:
            out = self._pipeline(x, _CHECKED if TYPECHECK else _PLAIN,
                                 explicit=self.kernel == "explicit")
        finally:
            self._note = _unrecorded
        return out, trace

    def attention_weights(self, x: Residual) -> AttentionWeights:
        """The softmax weights (B, H, T, T) of every head on `x`, from the explicit path."""
        kept: list[Tensor] = []
        self._pipeline(x, _CHECKED if TYPECHECK else _PLAIN, explicit=True, keep_weights=kept)
        return kept[0]

    def export_weights(self) -> dict[str, Tensor]:
        """The projections in the subject protocol's layout: q/k/v/o weights (C, C), biases (C,).

        The tensors are views of this module's parameters, so gradients flow back to them.
        """
        C = self.n_embd
        w = self.c_attn.weight
        out = {"q_weight": w[:C], "k_weight": w[C:2 * C], "v_weight": w[2 * C:],
               "o_weight": self.c_proj.weight}
        if self.c_attn.bias is not None and self.c_proj.bias is not None:
            b = self.c_attn.bias
            out |= {"q_bias": b[:C], "k_bias": b[C:2 * C], "v_bias": b[2 * C:],
                    "o_bias": self.c_proj.bias}
        return out

    @torch.no_grad()
    def load_weights(self, weights: Mapping[str, Tensor]) -> None:
        """Copy q/k/v/o weights (C, C) and optional biases (C,) in, in the protocol's layout.

        Missing biases are taken as zero. A missing key or a wrong shape raises `ShapeError`
        naming the key, both shapes and n_embd.
        """
        C = self.n_embd
        missing = [key for key in WEIGHT_KEYS if key not in weights]
        if missing:
            raise ShapeError(
                f"Loading weights into CausalSelfAttention(n_embd={C}, n_head={self.n_head}): "
                f"missing {', '.join(missing)}; got keys {sorted(weights)}."
            )
        for key in (*WEIGHT_KEYS, *BIAS_KEYS):
            if key not in weights:
                continue
            want = (C, C) if key.endswith("weight") else (C,)
            got = tuple(getattr(weights[key], "shape", ()))
            if got != want:
                raise ShapeError(
                    f"Loading weights into CausalSelfAttention(n_embd={C}, n_head={self.n_head}):"
                    f" {key} has shape {got}, but it must be {want} (C = n_embd = {C})."
                )
        has_bias = self.c_attn.bias is not None and self.c_proj.bias is not None
        given = [k for k in BIAS_KEYS if k in weights and bool(weights[k].detach().any())]
        if given and not has_bias:
            raise ShapeError(
                f"Loading weights into CausalSelfAttention(n_embd={C}, n_head={self.n_head}, "
                f"bias=False): {', '.join(given)} are nonzero, and this module has no biases "
                "to hold them; build it with bias=True."
            )
        self.c_attn.weight.copy_(torch.cat([weights[k] for k in WEIGHT_KEYS[:3]]))
        self.c_proj.weight.copy_(weights["o_weight"])
        if self.c_attn.bias is not None and self.c_proj.bias is not None:
            zero = torch.zeros(C, dtype=self.c_attn.bias.dtype, device=self.c_attn.bias.device)
            self.c_attn.bias.copy_(torch.cat([weights.get(k, zero) for k in BIAS_KEYS[:3]]))
            self.c_proj.bias.copy_(weights.get("o_bias", zero))


def reference_attention(
    x: Residual, weights: Mapping[str, Tensor], n_head: int
) -> Residual:
    """The explicit path as a function of protocol-layout weights (the oracle's form).

    Gradients flow to whichever of `x` and `weights` require them.
    """
    C = x.size(-1)
    q = F.linear(x, weights["q_weight"], weights.get("q_bias"))
    k = F.linear(x, weights["k_weight"], weights.get("k_bias"))
    v = F.linear(x, weights["v_weight"], weights.get("v_bias"))
    q, k, v = (split_heads(t, n_head) for t in (q, k, v))
    y = merge_heads(core.attention(q, k, v, scale=1.0 / math.sqrt(q.size(-1)),
                                   every_row_sees=True)[0])
    assert y.size(-1) == C
    return F.linear(y, weights["o_weight"], weights.get("o_bias"))
