"""A kernel example (sizes, what the call uses, dtype, device, seed), its inputs q, k, v
(float64 N(0, 1) values from a per-process pool x scale) and the reference's golden.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ...common.dtypes import dtype_from_name
from ...reference.core import corner_index, kernel_attention, visible_keys
from ...reference.spec import ALiBi

K_GRAD = 3.0  # FlashAttention's tests allow gradients 3 x the dtype's own error, outputs 2 x


@dataclass(frozen=True)
class KernelExample:
    """One kernel example: the sizes, what the call uses, the dtype, device and seed."""

    B: int
    H: int
    G: int
    Tq: int
    Tk: int
    D: int
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    scale: float = 1.0  # the inputs' factor: 1, 2, 3 give logits of std about 1, 4, 9
    causal: bool = True
    softmax_scale: float | None = None  # None: 1/sqrt(D)
    window: tuple[int | None, int | None] | None = None  # (left, right), None unbounded
    softcap: float | None = None
    alibi: bool = False
    sinks: bool = False
    lengths: tuple[tuple[int, int], ...] | None = None  # varlen: (Tq_b, Tk_b) per sequence
    cuts: tuple[int, ...] = ()  # key positions the perturbing checks change
    # A cache call (attention_with_cache): tokens already cached per row, new tokens appended,
    # and the page size (None: a contiguous cache). Tk is then max(cache_seqlens) + new_tokens.
    cache_seqlens: tuple[int, ...] | None = None
    new_tokens: int = 0
    page_size: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["kind"] = "kernel"
        defaults: tuple[tuple[str, Any], ...] = (
            ("softmax_scale", None), ("window", None), ("softcap", None), ("alibi", False),
            ("sinks", False), ("lengths", None), ("cuts", ()), ("cache_seqlens", None),
            ("new_tokens", 0), ("page_size", None))
        for key, default in defaults:
            if data[key] == default or (default == () and not data[key]):
                del data[key]
        if self.window is not None:
            data["window"] = list(self.window)
        if self.lengths is not None:
            data["lengths"] = [list(p) for p in self.lengths]
        if self.cuts:
            data["cuts"] = list(self.cuts)
        if self.cache_seqlens is not None:
            data["cache_seqlens"] = list(self.cache_seqlens)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KernelExample:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        if known.get("window") is not None:
            known["window"] = tuple(known["window"])
        if known.get("lengths") is not None:
            known["lengths"] = tuple(tuple(p) for p in known["lengths"])
        known["cuts"] = tuple(known.get("cuts", ()))
        if known.get("cache_seqlens") is not None:
            known["cache_seqlens"] = tuple(known["cache_seqlens"])
        return cls(**known)

    @property
    def attn_scale(self) -> float:
        return 1.0 / math.sqrt(self.D) if self.softmax_scale is None else self.softmax_scale

    def describe(self) -> str:
        extras = [f"{k}={v}" for k, v in (
            ("causal", self.causal), ("scale", self.softmax_scale), ("window", self.window),
            ("softcap", self.softcap), ("alibi", self.alibi or None),
            ("sinks", self.sinks or None), ("lengths", self.lengths),
            ("cuts", list(self.cuts) or None), ("cache_seqlens", self.cache_seqlens),
            ("new_tokens", self.new_tokens or None), ("page_size", self.page_size))
            if v is not None and (k != "causal" or not v)]
        return (f"B={self.B}, H={self.H}, G={self.G}, Tq={self.Tq}, Tk={self.Tk}, D={self.D}, "
                f"dtype={self.dtype}, device={self.device}, seed={self.seed}, "
                f"inputs x{self.scale:g}" + "".join(f", {e}" for e in extras))

    def case(self) -> dict[str, Any]:
        """What a kernel's supports(case) is asked, and the worker's build request."""
        return {"B": self.B, "H": self.H, "G": self.G, "Tq": self.Tq, "Tk": self.Tk,
                "D": self.D, "dtype": self.dtype, "device": self.device, "causal": self.causal,
                "window": None if self.window is None else list(self.window),
                "softcap": self.softcap, "alibi": self.alibi, "sinks": self.sinks,
                "varlen": self.lengths is not None,
                **({} if self.cache_seqlens is None else {
                    "cache": True, "paged": self.page_size, "new_tokens": self.new_tokens})}

    def build(self) -> dict[str, Any]:
        return {"kernel": True, "seed": self.seed, **self.case()}


# ---- inputs and the reference ----------------------------------------------------------------


def _gen(ex: KernelExample, salt: int) -> torch.Generator:
    return torch.Generator().manual_seed(ex.seed * 7919 + salt)


def inputs(ex: KernelExample, salt: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """q (B, H, Tq, D), k and v (B, G, Tk, D): float64 N(0, 1) values read from the pool
    (`_normal`) x scale, in the dtype (the same tensors again for the same example and salt:
    checks only read them)."""
    key = (ex, salt)
    if key not in _INPUTS:
        if len(_INPUTS) >= 64:
            _INPUTS.clear()
        _INPUTS[key] = _drawn(ex, salt)
    return _INPUTS[key]


_INPUTS: dict[tuple[KernelExample, int], tuple[Tensor, Tensor, Tensor]] = {}


def _drawn(ex: KernelExample, salt: int) -> tuple[Tensor, Tensor, Tensor]:
    dtype = dtype_from_name(ex.dtype)
    shapes = ((ex.B, ex.H, ex.Tq, ex.D), (ex.B, ex.G, ex.Tk, ex.D), (ex.B, ex.G, ex.Tk, ex.D))
    sizes = [math.prod(s) for s in shapes]
    values = _normal(ex, salt, sum(sizes))  # q, k and v: disjoint parts of one window
    starts = (0, sizes[0], sizes[0] + sizes[1])
    q, k, v = ((values[a:a + n].view(s) * ex.scale).to(dtype)
               for a, n, s in zip(starts, sizes, shapes, strict=True))
    return q, k, v


POOL_SIZE = 1 << 22  # float64 N(0, 1) values (32 MiB), drawn once per process from one seed


@functools.cache
def _pool() -> Tensor:
    return torch.randn(POOL_SIZE, generator=torch.Generator().manual_seed(20261203),
                       dtype=torch.float64)


def _normal(ex: KernelExample, salt: int, n: int) -> Tensor:
    """n float64 N(0, 1) values for the example and salt, read only: a window of the pool at
    an offset drawn from them (float64 randn, which alone replays alike on every CPU, took a
    fifth of a kernel verify); past half the pool, drawn afresh."""
    gen = _gen(ex, salt)
    if n > POOL_SIZE // 2:
        return torch.randn(n, generator=gen, dtype=torch.float64)
    start = int(torch.randint(0, POOL_SIZE - n + 1, (1,), generator=gen))
    return _pool()[start:start + n]


def slopes(ex: KernelExample) -> Tensor | None:
    return torch.tensor(ALiBi().slopes_for(ex.H), dtype=torch.float32) if ex.alibi else None


def sink_logits(ex: KernelExample) -> Tensor | None:
    if not ex.sinks:
        return None
    return (torch.randn(ex.H, generator=_gen(ex, 91), dtype=torch.float64) * 2).float()


def _lengths(ex: KernelExample) -> list[tuple[int, int]]:
    return list(ex.lengths) if ex.lengths is not None else [(ex.Tq, ex.Tk)] * ex.B


def reference(ex: KernelExample, q: Tensor, k: Tensor, v: Tensor, corner: str,
              dtype: torch.dtype = torch.float64, *, reorder: bool = False,
              grad: Tensor | None = None, grad_lse: Tensor | None = None,
              ) -> tuple[Tensor, Tensor, tuple[Tensor, ...] | None]:
    """The core on the example's tensors in `dtype` (each varlen sequence on its own, padding
    0 and -inf): o (B, H, Tq, D), the LSE (B, H, Tq) in float64, and with `grad` (a cotangent
    for o) and or `grad_lse` (for the LSE) dq, dk, dv. `reorder`: the scale folded into q
    first (another fair rounding)."""
    q, k, v = (t.to(dtype) for t in (q, k, v))
    wants_grad = grad is not None or grad_lse is not None
    if wants_grad:
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    scale = ex.attn_scale
    a, s = slopes(ex), sink_logits(ex)
    outs, lses = [], []
    # One call for the whole batch where every row has the same lengths: the same values as
    # row by row (bit for bit, float64, float32 and bfloat16, tests/test_kernel_protocol.py),
    # in half the time for the narrow examples.
    rows = [(0, ex.B, ex.Tq, ex.Tk)] if ex.lengths is None and ex.B else [
        (b, b + 1, lq, lk) for b, (lq, lk) in enumerate(_lengths(ex))]
    for b, end, lq, lk in rows:
        qb = q[b:end, :, :lq]
        if reorder:
            qb = qb * scale
        o, lse = kernel_attention(
            qb, k[b:end, :, :lk], v[b:end, :, :lk], causal=ex.causal, corner=corner,
            scale=1.0 if reorder else scale, window=ex.window, softcap=ex.softcap,
            alibi=None if a is None else a.double(), sinks=s)
        outs.append(torch.nn.functional.pad(o, (0, 0, 0, ex.Tq - lq)))
        lses.append(torch.nn.functional.pad(lse.double(), (0, ex.Tq - lq), value=-math.inf))
    o = torch.cat(outs) if outs else q.new_zeros(q.shape)
    lse = torch.cat(lses) if lses else torch.full(q.shape[:3], -math.inf, dtype=torch.float64)
    grads = None
    if wants_grad:
        loss = (o * grad.to(o.dtype)).sum() if grad is not None else o.sum() * 0
        if grad_lse is not None:  # rows without keys (-inf) take no part
            loss = loss + torch.where(lse.isfinite(), lse * grad_lse.double(), 0.0).sum()
        grads = torch.autograd.grad(loss, (q, k, v), allow_unused=True)
        grads = tuple(torch.zeros_like(t) if g is None else g.detach()
                      for g, t in zip(grads, (q, k, v), strict=True))
    return o.detach(), lse.detach(), grads


def visible_rows(ex: KernelExample, corner: str) -> Tensor:
    """(B, 1, Tq, 1) True where a (real) query sees at least one key: the core's own mask."""
    out = torch.zeros(ex.B, 1, ex.Tq, 1, dtype=torch.bool)
    for b, (lq, lk) in enumerate(_lengths(ex)):
        if lk == 0:
            continue
        seen = visible_keys(corner_index(corner, lq, lk, "cpu"), torch.arange(lk), ex.causal,
                            ex.window, None)[0]
        out[b, 0, :lq, 0] = seen.any(dim=-1)
    return out


def query_positions(ex: KernelExample, corner: str) -> Tensor:
    """(B, Tq): each query's position on its sequence's key axis (Tk_b - Tq_b + i at the
    bottom right, i at the top left)."""
    i = torch.arange(ex.Tq)
    return torch.stack([i + (lk - lq if corner == "bottom_right" else 0)
                        for lq, lk in _lengths(ex)]) if ex.B else i[None]


def real_rows(ex: KernelExample) -> Tensor:
    """(B, 1, Tq, 1) True at positions that are queries (varlen: within each length)."""
    out = torch.zeros(ex.B, 1, ex.Tq, 1, dtype=torch.bool)
    for b, (lq, _) in enumerate(_lengths(ex)):
        out[b, 0, :lq] = True
    return out
