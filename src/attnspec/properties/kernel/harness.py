"""Calling the kernel: each example's steps in the kernel's declared layout, and its
answers read back in the reference's (o `"B H Tq D"`, the LSE `"B H Tq"` in natural log).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

from ...reference import conventions as conv
from ..base import Context
from .example import (
    KernelExample,
    _lengths,
    sink_logits,
    slopes,
)

# ---- calling the kernel ----------------------------------------------------------------------


class Kernel:
    """What a check uses to run the kernel of one example: calls in its conventions, outputs
    back in the reference's layout."""

    def __init__(self, ctx: Context, ex: KernelExample, conventions: conv.KernelConventions):
        self.ctx, self.ex, self.c = ctx, ex, conventions

    def step(self, q: Tensor, k: Tensor, v: Tensor, *, grad: Mapping[str, Tensor | None]
             | None = None, inputs_after: bool = False, in_place: bool = False,
             strided: bool = False, knob: tuple[str, Any] | None = None,
             broadcast: str = "", alongside: tuple[Tensor, Tensor, Tensor] | None = None,
             ) -> dict[str, Any]:
        ex, c = self.ex, self.c
        lengths = _lengths(ex)
        if c.layout == "varlen":
            lq = [n for n, _ in lengths]
            lk = [n for _, n in lengths]
            sent = self._laid_out(q, k, v)
            total = sum(lq)
            out_shape: tuple[int, ...] = (total, ex.H, ex.D)
            keywords: dict[str, Any] = {
                "cu_seqlens_q": conv.cu_seqlens(lq).tolist(),
                "cu_seqlens_k": conv.cu_seqlens(lk).tolist(),
                "max_seqlen_q": max(lq, default=0), "max_seqlen_k": max(lk, default=0)}
        else:
            sent = self._laid_out(q, k, v)
            total, out_shape, keywords = ex.B * ex.Tq, tuple(sent[0].shape), {}
        keywords["causal"] = ex.causal
        if c.has("scale") and not (ex.softmax_scale is None and c.scale_default):
            keywords["scale"] = ex.attn_scale  # else the kernel's own default: 1/sqrt(D)
        if ex.window is not None:
            keywords["window"] = conv.window_argument(ex.window, c.window or "pair")
            if isinstance(keywords["window"], tuple):
                keywords["window"] = list(keywords["window"])
        if ex.softcap is not None:
            keywords["softcap"] = ex.softcap
        if knob is not None:
            keywords[knob[0]] = knob[1]
        step: dict[str, Any] = {"op": "kernel", "q": sent[0], "k": sent[1], "v": sent[2],
                                "keywords": keywords, "lse": c.lse is not None,
                                "out_shape": list(out_shape),
                                "lse_shape": list(conv.lse_shape(c, ex.B, ex.H, ex.Tq, total)),
                                "alibi_slopes": slopes(ex), "sinks": sink_logits(ex)}
        if grad is not None:
            step["grad"] = {name: None if t is None else self._like_output(t, name)
                            for name, t in grad.items()}
        if inputs_after:
            step["inputs_after"] = True
        if in_place:
            step["in_place"] = True
        if strided:  # q, k, v as views into wider storage: last dim dense, the rest not
            step["strided"] = True
        if broadcast:  # these (equal along B) as one batch row expanded: stride 0
            step["broadcast"] = list(broadcast)
        if alongside is not None:  # a second call at the same time, from another thread
            step["alongside"] = dict(zip("qkv", self._laid_out(*alongside), strict=True))
        return step

    def _laid_out(self, q: Tensor, k: Tensor, v: Tensor) -> list[Tensor]:
        """q, k, v (B, H|G, T, D) in the kernel's layout: varlen packs each row's lengths."""
        if self.c.layout == "varlen":
            lengths = _lengths(self.ex)
            lq, lk = [n for n, _ in lengths], [n for _, n in lengths]
            return [conv.pack(q, lq), conv.pack(k, lk), conv.pack(v, lk)]
        return [conv.to_layout(t, self.c.layout) for t in (q, k, v)]

    def _like_output(self, t: Tensor, name: str) -> Tensor:
        """A cotangent (B, H, Tq, D) or (B, H, Tq) in the layout the kernel returns."""
        c, lengths = self.c, _lengths(self.ex)
        if name == "do":
            if c.layout == "varlen":
                return conv.pack(t, [n for n, _ in lengths])
            return conv.to_layout(t, c.layout)
        if c.lse_layout == "bhs":
            return t.contiguous()
        if c.lse_layout == "bsh":
            return t.transpose(1, 2).contiguous()
        packed = conv.pack(t[..., None], [n for n, _ in lengths])[..., 0]  # (total, H)
        return packed.contiguous() if c.lse_layout == "sh" else packed.t().contiguous()

    def submit(self, steps: Sequence[dict[str, Any]], *, check_layout: bool = True) -> None:
        self.ctx.submit(self.ex, steps, check_layout=check_layout)

    def collect(self) -> list[dict[str, Any]]:
        return [self.unpack(r, s) for r, s in zip(self.ctx.collect(), self.ctx._steps,
                                                   strict=True)]

    def run(self, steps: Sequence[dict[str, Any]], *, check_layout: bool = True,
            ) -> list[dict[str, Any]]:
        self.submit(steps, check_layout=check_layout)
        return self.collect()

    def unpack(self, result: Mapping[str, Any], step: Mapping[str, Any]) -> dict[str, Any]:
        """A result in the reference's layout: o, lse (natural log), dq, dk, dv, inputs."""
        ex, c = self.ex, self.c
        lengths = _lengths(ex)
        lq, lk = [n for n, _ in lengths], [n for _, n in lengths]

        def back(t: Tensor | None, which: str) -> Tensor | None:
            if t is None:
                return None
            if c.layout == "varlen":
                return conv.unpack(t, lq if which == "q" else lk,
                                   ex.Tq if which == "q" else ex.Tk)
            return conv.from_layout(t, c.layout)

        out: dict[str, Any] = {"o": back(result["out"], "q"), "raw": result,
                               "lse_grad": bool(result.get("lse_grad"))}
        lse = result.get("lse")
        out["lse"] = None if lse is None else conv.lse_from_layout(
            lse.double(), c, lq, ex.Tq)
        for name, which in (("dq", "q"), ("dk", "k"), ("dv", "k")):
            out[name] = back(result.get(name), which)
        if result.get("alongside") is not None:
            out["alongside"] = back(result["alongside"], "q")
        if result.get("inputs") is not None:
            out["inputs"] = result["inputs"]
            out["sent"] = {n: step[n] for n in "qkv"}
            out["written"] = [n for n in str(result.get("written") or "").split(",") if n]
        return out
