"""The kernel properties: q, k, v -> o (and the LSE), judged in the runner against the core.

A kernel example is its sizes (B, H, G, Tq, Tk, D), dtype, device, seed, input scale and what
the call uses (causal, scale, window, soft cap, ALiBi, sinks, varlen lengths). A check draws
q, k, v (float64 N(0, 1) values from a per-process pool x scale, cast to the dtype), converts
them to the kernel's declared layout, asks the worker for the kernel's outputs and converts
those back: everything is compared in the reference's layout, o `"B H Tq D"` and the LSE
`"B H Tq"` in natural log.

Exact comparisons only between identical calls (same shapes, same positions), with the
kernel's own jitter (two identical calls) as the allowance; everything else is the rule of
docs/design.md section 5 against a float64 golden, the yardstick the larger error of two fair
computations in the dtype (the core, and the core with the scale folded into q).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..common.dtypes import dtype_from_name
from ..reference import conventions as conv
from ..reference.core import corner_index, kernel_attention, visible_keys
from ..reference.spec import ALiBi
from . import tolerance as tol
from .base import PASS, Context, Outcome, SubjectFault, Unsupported

__all__ = ["KERNEL_BY_ID", "KERNEL_PROPERTIES", "KERNEL_PROPERTY_IDS", "KERNEL_TWINNED",
           "KernelExample", "KernelProperty", "first_call", "run_kernel_check"]

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


# ---- judging ---------------------------------------------------------------------------------


def _failed(message: str, measured: float | None = None, allowed: float | None = None,
            where: dict[str, int] | None = None) -> Outcome:
    return Outcome("fail", message, measured, allowed, where)


def _where(index: tuple[int, ...] | None, axes: str = "b h i d") -> dict[str, int] | None:
    if index is None:
        return None
    return dict(zip(axes.split(), index, strict=False))


def _at(index: tuple[int, ...] | None, axes: str = "b h i d") -> str:
    if index is None:
        return ""
    names = axes.split()
    shown = ", ".join(f"{n}={i}" for n, i in zip(names, index, strict=False))
    return f" at ({shown})"


def _judgeable(ex: KernelExample, c: conv.KernelConventions) -> Tensor:
    """(B, 1, Tq, 1): real queries, less those without keys where MASKED_ROWS is undefined."""
    keep = real_rows(ex)
    return keep & visible_rows(ex, c.causal) if c.masked_rows == "undefined" else keep


def _judged(ex: KernelExample, corner: str, masked: str, t: Tensor) -> Tensor:
    """Rows the rule judges: every real query, except rows that see no key when the kernel
    leaves those undefined (their values are then set to 0)."""
    keep = real_rows(ex)
    if masked == "undefined":
        keep = keep & visible_rows(ex, corner)
    if bool(keep.all()):  # every row judged (most examples): t itself, not a copy of it
        return t
    mask = keep if t.dim() == 4 else keep[..., 0]
    return t.masked_fill(~mask, 0.0)


_OUTPUTS = ("o", "lse", "dq", "dk", "dv")


class Yardstick:
    """The larger error of two fair computations in the dtype (or `dtype`), per output (o, lse,
    dq, dk, dv), computed only as far as a verdict needs: an error within K x the errors so far
    + floor is within K x all of them + floor, so a computation is made only for an error past
    that (most calls of a correct kernel pass on the floor alone). `ys[name]` is the whole
    yardstick: a failure's message, and every other use, sees the same value as before."""

    def __init__(self, ex: KernelExample, q: Tensor, k: Tensor, v: Tensor, corner: str,
                 golden: tuple[Tensor, Tensor, Any], *, grad: Tensor | None = None,
                 grad_lse: Tensor | None = None, dtype: torch.dtype | None = None) -> None:
        self.dtype = dtype_from_name(ex.dtype) if dtype is None else dtype
        self._call = (ex, q, k, v, corner, golden, grad, grad_lse)
        # float64 is the golden's own dtype: errors of 1e-16, far below the floor.
        self._left = [] if self.dtype == torch.float64 else [False, True]  # reorder, in turn
        self._so_far = dict.fromkeys(_OUTPUTS, 0.0)

    def _more(self) -> bool:
        """The next fair computation folded in; False when none is left."""
        if not self._left:
            return False
        ex, q, k, v, corner, golden, grad, grad_lse = self._call
        o, lse, grads = reference(ex, q, k, v, corner, self.dtype, reorder=self._left.pop(0),
                                  grad=grad, grad_lse=grad_lse)
        pairs = [("o", o, golden[0]), ("lse", lse, golden[1])]
        if grads is not None:
            pairs += list(zip(("dq", "dk", "dv"), grads, golden[2], strict=True))
        for name, got, want in pairs:
            err = tol.max_abs_diff(got, want)[0]
            self._so_far[name] = max(self._so_far[name], err if math.isfinite(err) else 0.0)
        return True

    def __getitem__(self, name: str) -> float:
        while self._more():
            pass
        return self._so_far[name]

    def covering(self, name: str, err: float, K: float, floor: float) -> float:
        """The yardstick as far as computed once `err` is within K x it + floor, or whole."""
        while err > K * self._so_far[name] + floor and self._more():
            pass
        return self._so_far[name]


def _finite_max(t: Tensor) -> float:
    if not t.numel():
        return 0.0
    return float(t.detach().abs().nan_to_num(0.0, posinf=0.0, neginf=0.0).max())


def _judge(name: str, got: Tensor | None, want: Tensor, yard: float | Yardstick,
           ex: KernelExample, K: float = tol.K, what: str = "", magnitude: float = 0.0,
           floor_dtype: str | None = None) -> Outcome | None:
    """A failure where max|got - want| exceeds K x yard + floor (None: within the rule); the
    floor is `floor_dtype`'s (the example's dtype unless given), scaled by the larger of want's
    values and `magnitude`. A Yardstick is computed only as far as the verdict needs."""
    if got is None:
        return _failed(f"{what}the kernel returned no {name}")
    scale = max(_finite_max(want), magnitude)
    floor = tol.floor(floor_dtype or ex.dtype, scale)
    err, index = tol.max_abs_diff(got, want)
    if isinstance(yard, Yardstick):
        yard = yard.covering(name, err, K, floor)
    allowed = K * yard + floor
    if err > allowed:
        axes = "b h i" if name == "lse" else "b h i d" if name in ("o", "dq") else "b g j d"
        return _failed(f"{what}max|{name} - reference| = {err:.3g}, allowed {allowed:.3g} ({K:g} x "
                     f"the reference's own {floor_dtype or ex.dtype} error {yard:.3g} + floor)"
                     f"{_at(index, axes)}",
                     err, allowed, _where(index, axes))
    return None


def _jitter(*pairs: tuple[Tensor | None, Tensor | None]) -> float:
    worst = 0.0
    for a, b in pairs:
        if a is not None and b is not None:
            worst = max(worst, tol.max_abs_diff(a, b)[0])
    return worst


def _own_jitter(kern: Kernel, mine: Sequence[Mapping[str, Any]]) -> float:
    """The kernel's jitter between two identical calls, over the rows that are judged (rows it
    leaves undefined may hold anything, which must not widen the allowance)."""
    rows = _judgeable(kern.ex, kern.c)
    pairs = []
    for name in ("o", "lse"):
        a, b = mine[0][name], mine[1][name]
        if a is not None and b is not None:
            mask = rows if a.dim() == 4 else rows[..., 0]
            pairs.append((a.masked_fill(~mask, 0.0), b.masked_fill(~mask, 0.0)))
    return _jitter(*pairs)


def _changed(a: Tensor, b: Tensor, rows: Tensor, allowed: float) -> tuple[float, tuple[int, ...]
                                                                             | None]:
    """The largest |a - b| in the rows selected (B, H or 1, Tq, 1) and where."""
    if bool(rows.all()):  # every row (most examples): compared without copies
        return tol.max_abs_diff(a, b)
    mask = rows if a.dim() == 4 else rows[..., 0]
    err, index = tol.max_abs_diff(a.masked_fill(~mask, 0.0), b.masked_fill(~mask, 0.0))
    return err, index


# ---- the checks ------------------------------------------------------------------------------


Check = Callable[[Kernel], Outcome]


def check_width(kern: Kernel) -> Outcome:
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    step = kern.step(q, k, v)
    (raw,) = kern.ctx.request(ex, [step], check_layout=False)
    out, want = raw["out"], tuple(step["out_shape"])
    if tuple(out.shape) != want:
        layout = conv.LAYOUTS[c.layout]
        return _failed(f"o has shape {tuple(out.shape)}; with LAYOUT = {c.layout!r} ({layout}) "
                     f"it must be {want}, q's shape")
    lse = raw.get("lse")
    if c.lse is not None and lse is not None and tuple(lse.shape) != tuple(step["lse_shape"]):
        return _failed(f"the LSE has shape {tuple(lse.shape)}; with LSE_LAYOUT = "
                     f"{c.lse_layout!r} ({conv.LSE_LAYOUTS[c.lse_layout]}) it must be "
                     f"{tuple(step['lse_shape'])}")
    return Outcome(PASS)


def check_dtype(kern: Kernel) -> Outcome:
    q, k, v = inputs(kern.ex)
    (raw,) = kern.ctx.request(kern.ex, [kern.step(q, k, v)], check_layout=False)
    if raw["out"].dtype != q.dtype:
        return _failed(f"o is {str(raw['out'].dtype).removeprefix('torch.')} for "
                     f"{kern.ex.dtype} inputs: it must be q's dtype")
    return Outcome(PASS)


def _perturbed(t: Tensor, where: Callable[[Tensor], Tensor], ex: KernelExample, salt: int,
               factor: float = 1.0) -> Tensor:
    """t with fresh values (x factor) where `where(t)` (a boolean of t's shape) is True, drawn
    for those positions only (in row-major order): a fifth of a run's time went on drawing
    whole tensors of which most was thrown away."""
    chosen = where(t)
    fresh = _normal(ex, salt, int(chosen.sum()))
    return t.masked_scatter(chosen, (fresh * ex.scale * factor).to(t.dtype))


def _positions(t: Tensor, axis: int, chosen: Callable[[Tensor], Tensor]) -> Tensor:
    shape = [1] * t.dim()
    shape[axis] = t.size(axis)
    return chosen(torch.arange(t.size(axis))).view(shape).expand(t.shape)


def _apart(kern: Kernel, mine: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]],
           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Steps on the worker and on its twin (no process sees both sides), unpacked."""
    kern.ctx.submit_apart(kern.ex, mine, theirs)
    a, b = kern.ctx.collect_apart()
    return ([kern.unpack(r, s) for r, s in zip(a, mine, strict=True)],
            [kern.unpack(r, s) for r, s in zip(b, theirs, strict=True)])


def _unmoved(name: str, base: Tensor | None, moved: Tensor | None, rows: Tensor, jitter: float,
             change: str, axes: str = "b h i d") -> Outcome | None:
    if base is None or moved is None:
        return None
    err, index = _changed(base, moved, rows, 2 * jitter)
    if err > 2 * jitter:
        return _failed(f"{change} moved {name} by {err:.3g} (2 x the kernel's own jitter: "
                     f"{2 * jitter:.3g}){_at(index, axes)}", err, 2 * jitter,
                     _where(index, axes))
    return None


def check_causality(kern: Kernel) -> Outcome:
    """Keys and values a query may not see (past its causal diagonal, at the declared corner)
    move nothing of its o or LSE: keys from a cut on are changed, rows before the cut judged."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    shift = ex.Tk - ex.Tq if c.causal == "bottom_right" else 0
    i = query_positions(ex, c.causal)  # (B, Tq)
    notes = []
    for cut in ex.cuts or (max(0, ex.Tk // 2),):
        later = lambda t, cut=cut: _positions(t, 2, lambda j: j >= cut)  # noqa: E731
        k2, v2 = _perturbed(k, later, ex, 11), _perturbed(v, later, ex, 12)
        base, again = (kern.step(q, k, v), kern.step(q, k, v))
        mine, theirs = _apart(kern, [base, again], [kern.step(q, k2, v2)])
        jitter = _own_jitter(kern, mine)
        blind = (i < cut)[:, None, :, None] & _judgeable(ex, c)
        if not bool(blind.any()):
            notes.append(f"cut {cut}: no query before it")
            continue
        change = (f"changing keys and values at positions >= {cut} (which queries i with "
                  f"i{' + Tk - Tq' if shift else ''} < {cut} may not see, CAUSAL = {c.causal!r})")
        for name in ("o", "lse"):
            failed = _unmoved(name, mine[0][name], theirs[0][name], blind, jitter, change,
                              "b h i d" if name == "o" else "b h i")
            if failed is not None:
                return failed
    outcome = Outcome(PASS)
    outcome.notes.extend(notes[:1])
    return outcome


def check_batch_independence(kern: Kernel) -> Outcome:
    """Changing one batch row moves no other row; changing one query head's q, or one kv head's
    k and v, moves no head that does not read it (the row and heads drawn from the seed)."""
    ex = kern.ex
    q, k, v = inputs(ex)
    r, h, g = ex.seed % ex.B, (ex.seed // 7) % ex.H, (ex.seed // 11) % ex.G
    row0 = lambda t: _positions(t, 0, lambda b: b == r)  # noqa: E731
    head0 = lambda t: _positions(t, 1, lambda n: n == h)  # noqa: E731
    group0 = lambda t: _positions(t, 1, lambda n: n == g)  # noqa: E731
    q_b, k_b, v_b = (_perturbed(t, row0, ex, 21 + n) for n, t in enumerate((q, k, v)))
    q_h = _perturbed(q, head0, ex, 24)
    k_h, v_h = _perturbed(k, group0, ex, 25), _perturbed(v, group0, ex, 26)
    mine, theirs = _apart(kern, [kern.step(q, k, v), kern.step(q, k, v)],
                          [kern.step(q_b, k_b, v_b), kern.step(q_h, k, v),
                           kern.step(q, k_h, v_h)])
    jitter = _own_jitter(kern, mine)
    judged = _judgeable(kern.ex, kern.c)
    per = ex.H // ex.G
    others = (torch.arange(ex.B) != r).view(-1, 1, 1, 1).expand(ex.B, 1, ex.Tq, 1) & judged
    heads = (torch.arange(ex.H) != h).view(1, -1, 1, 1).expand(ex.B, ex.H, ex.Tq, 1)
    groups = (torch.arange(ex.H) // per != g).view(1, -1, 1, 1).expand(ex.B, ex.H, ex.Tq, 1)
    for name in ("o", "lse"):
        axes = "b h i d" if name == "o" else "b h i"
        for moved, rows, change in (
                (theirs[0], others, f"changing batch row {r}"),
                (theirs[1], heads & judged, f"changing query head {h}'s q"),
                (theirs[2], groups & judged, f"changing kv head {g}'s k and v (read by query "
                                             f"heads {g * per}..{(g + 1) * per - 1} only)")):
            if rows.size(1) == 1 and mine[0][name] is not None:
                rows = rows.expand(ex.B, ex.H, ex.Tq, 1)
            failed = _unmoved(name, mine[0][name], moved[name], rows, jitter, change, axes)
            if failed is not None:
                return failed
    return Outcome(PASS)


def check_determinism(kern: Kernel) -> Outcome:
    """The same call twice gives the same o and LSE bit for bit (and the same gradients where
    the kernel declares DETERMINISTIC)."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    grad = None
    if c.backward and c.deterministic:
        do = inputs(dataclasses.replace(ex, scale=1.0), 31)[0]
        grad = {"do": do, "dlse": None}
    first, second = kern.run([kern.step(q, k, v, grad=grad), kern.step(q, k, v, grad=grad)])
    rows = _judgeable(ex, c)
    for name in ("o", "lse", "dq", "dk", "dv"):
        a, b = first.get(name), second.get(name)
        if a is None or b is None:
            continue
        if name in ("o", "lse", "dq"):  # rows left undefined are not compared
            mask = rows if a.dim() == 4 else rows[..., 0]
            a, b = a.masked_fill(~mask, 0.0), b.masked_fill(~mask, 0.0)
        err, index = tol.max_abs_diff(a, b)
        if err > 0 or not _same_nan(a, b):
            which = ("the backward (DETERMINISTIC = True)" if name.startswith("d")
                     else "the forward")
            return _failed(f"{which}: two identical calls gave {name} {err:.3g} apart"
                         f"{_at(index)}", err, 0.0, _where(index))
    return Outcome(PASS)


def _same_nan(a: Tensor, b: Tensor) -> bool:
    return bool((a.isnan() == b.isnan()).all())


def check_input_unchanged(kern: Kernel) -> Outcome:
    """q, k and v are as they were after the call, and were not written during it (their
    version counters did not move: a write undone before return shows there)."""
    ex = kern.ex
    q, k, v = inputs(ex)
    (got,) = kern.run([kern.step(q, k, v, inputs_after=True)])
    for name in "qkv":
        after, sent = got["inputs"][name], got["sent"][name]
        if after.shape != sent.shape or not (torch.equal(after, sent) or bool(
                ((after == sent) | (after.isnan() & sent.isnan())).all())):
            err = tol.max_abs_diff(after, sent)[0] if after.shape == sent.shape else math.inf
            return _failed(f"attention wrote into its input {name} (it changed by up to "
                         f"{err:.3g}): a kernel must leave q, k and v as it found them", err, 0.0)
    for name in got.get("written", []):
        return _failed(f"attention wrote into its input {name} during the call and put it back "
                       f"before returning ({name}._version moved: an in-place operation, "
                       f"undone): whatever reads {name} meanwhile (another stream, another "
                       "thread) sees it changed; a kernel must leave q, k and v as it found them")
    return Outcome(PASS)


def check_finite(kern: Kernel) -> Outcome:
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    (got,) = kern.run([kern.step(q, k, v)])
    seen = visible_rows(ex, c.causal)
    o = got["o"]
    bad = ~o.isfinite() & _judgeable(ex, c)
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        return _failed(f"o is {float(o[index]):g}{_at(index)} on finite inputs (x{ex.scale:g})")
    lse = got["lse"]
    if lse is not None:
        bad_lse = ~lse.isfinite() & seen[..., 0].expand_as(lse)
        if bool(bad_lse.any()):
            index = tuple(int(i) for i in bad_lse.nonzero()[0])
            return _failed(f"the LSE is {float(lse[index]):g}{_at(index, 'b h i')} for a query "
                         "that sees keys")
    return Outcome(PASS)


def _golden(ex: KernelExample, q: Tensor, k: Tensor, v: Tensor, corner: str,
            grad: Tensor | None = None, grad_lse: Tensor | None = None,
            ) -> tuple[Tensor, Tensor, Any]:
    return reference(ex, q, k, v, corner, torch.float64, grad=grad, grad_lse=grad_lse)


def _oracle_outcome(kern: Kernel, got: Mapping[str, Any], q: Tensor, k: Tensor, v: Tensor,
                    what: str = "", golden: tuple[Tensor, Tensor, Any] | None = None,
                    yard: Yardstick | None = None) -> Outcome | None:
    """o and the LSE against the golden; `golden` and `yard` where the caller has them (the
    same forward, computed with gradients)."""
    ex, c = kern.ex, kern.c
    golden = _golden(ex, q, k, v, c.causal) if golden is None else golden
    yard = Yardstick(ex, q, k, v, c.causal, golden) if yard is None else yard
    failed = _judge("o", _judged(ex, c.causal, c.masked_rows, got["o"].double()),
                    _judged(ex, c.causal, c.masked_rows, golden[0]), yard, ex, what=what)
    if failed is None and c.lse is not None:
        lse_yard, lse_dtype = yard, None
        returned = got["raw"].get("lse")
        low = ex.dtype in ("bfloat16", "float16")
        if low and returned is not None and returned.dtype in (torch.float32, torch.float64):
            # A float32 LSE (as FlashAttention and FlashInfer return it) is judged as float32:
            # the core from the same inputs with its scores in float32.
            lse_yard = Yardstick(ex, q, k, v, c.causal, golden, dtype=torch.float32)
            lse_dtype = "float32"
        failed = _judge("lse", _judged(ex, c.causal, c.masked_rows, got["lse"]),
                        _judged(ex, c.causal, c.masked_rows, golden[1]), lse_yard, ex,
                        what=what, floor_dtype=lse_dtype)
        if failed is not None and got["lse"] is not None:
            failed.message += _lse_hint(got["lse"], golden[1], ex)
    return failed


def _lse_hint(got: Tensor, want: Tensor, ex: KernelExample) -> str:
    both = got.isfinite() & want.isfinite()
    if not bool(both.any()):
        return ""
    ratio = float((got[both] / want[both].where(want[both].abs() > 1e-6,
                                                torch.ones_like(want[both]))).median())
    if abs(ratio * math.log(2) - 1) < 0.02:
        return "; the LSE is log2 of the reference's: is it base 2? (LSE = 'base2')"
    if abs(ratio / math.log(2) - 1) < 0.02:
        return "; the LSE is the reference's x ln 2: declared base 2, computed natural?"
    return ""


def check_oracle(kern: Kernel) -> Outcome:
    """o and the LSE agree with the float64 core within the rule."""
    q, k, v = inputs(kern.ex)
    (got,) = kern.run([kern.step(q, k, v)])
    failed = _oracle_outcome(kern, got, q, k, v)
    return failed or Outcome(PASS)


def check_oracle_grad(kern: Kernel) -> Outcome:
    """dq, dk, dv of sum(o * do) agree with the core's, within 3 x the dtype's own error."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    do = inputs(dataclasses.replace(ex, scale=1.0), 31)[0]
    do = do.masked_fill(~_judgeable(ex, c), 0.0)  # no gradient flows from undefined rows
    (got,) = kern.run([kern.step(q, k, v, grad={"do": do, "dlse": None})])
    # One golden and yardstick, with gradients: their o and LSE are the plain forward's.
    golden = _golden(ex, q, k, v, c.causal, grad=do.double())
    yard = Yardstick(ex, q, k, v, c.causal, golden, grad=do)
    failed = _oracle_outcome(kern, got, q, k, v, what="the call differentiated: ",
                             golden=golden, yard=yard)
    if failed is not None:  # the o a backward starts from is judged as oracle judges o
        return failed
    # A gradient that is 0 in exact arithmetic (dk with one key) is all rounding: its floor
    # scales with the largest of the three, as a module's parameter gradients do.
    largest = max(_finite_max(g) for g in golden[2])
    for name, want, t in zip(("dq", "dk", "dv"), golden[2], (q, k, v), strict=True):
        # No gradient (an input the output does not depend on, Tk = 0) is a zero gradient.
        gotten = torch.zeros(t.shape, dtype=torch.float64) if got[name] is None else \
            got[name].double()
        if name == "dq":
            gotten, want = _judged(ex, c.causal, "zero", gotten), _judged(ex, c.causal, "zero",
                                                                           want)
        failed = _judge(name, gotten, want, yard, ex, K=K_GRAD, magnitude=largest)
        if failed is not None:
            return failed
    return Outcome(PASS)


def check_window(kern: Kernel) -> Outcome:
    """At each spot j0, the rows whose window j0 is outside of are unchanged when key j0
    changes, and the rows whose window it is the edge of move."""
    ex, c = kern.ex, kern.c
    assert ex.window is not None
    left, right = ex.window
    q, k, v = inputs(ex)
    i = query_positions(ex, c.causal)  # (B, Tq)
    spots = [j for j in (ex.cuts or (ex.Tk // 2,)) if 0 <= j < ex.Tk]
    theirs_steps, spot_rows = [], []
    for n, j0 in enumerate(spots):
        at = lambda t, j0=j0: _positions(t, 2, lambda j: j == j0)  # noqa: E731
        theirs_steps.append(kern.step(q, _perturbed(k, at, ex, 41 + n),
                                      _perturbed(v, at, ex, 61 + n, factor=100.0)))
        inside = torch.ones(i.shape, dtype=torch.bool)
        if ex.causal:
            inside &= j0 <= i
        if left is not None:
            inside &= j0 >= i - left
        if right is not None:
            inside &= j0 <= i + right
        inside &= j0 < torch.tensor([lk for _, lk in _lengths(ex)])[:, None]  # a real key
        edge = torch.zeros(i.shape, dtype=torch.bool) if left is None else inside & (
            j0 == i - left)
        right_edge = torch.zeros(i.shape, dtype=torch.bool) if right is None or ex.causal \
            else inside & (j0 == i + right)
        spot_rows.append((j0, inside, edge, right_edge))
    mine, theirs = _apart(kern, [kern.step(q, k, v), kern.step(q, k, v)], theirs_steps)
    jitter = _own_jitter(kern, mine)
    real = _judgeable(ex, c)
    edges_seen = edges_moved = 0
    right_seen = right_moved = 0
    for (j0, inside, edge, right_edge), moved in zip(spot_rows, theirs, strict=True):
        outside = (~inside)[:, None, :, None] & real
        change = (f"changing key {j0}, outside the window {ex.window} of the queries judged "
                  f"(WINDOW = {c.window!r})")
        for name in ("o", "lse"):
            failed = _unmoved(name, mine[0][name], moved[name], outside, jitter, change,
                              "b h i d" if name == "o" else "b h i")
            if failed is not None:
                return failed
        rows = edge[:, None, :, None] & real
        if bool(rows.any()):
            edges_seen += 1
            err, _ = _changed(mine[0]["o"], moved["o"], rows, 2 * jitter)
            edges_moved += err > 2 * jitter
        rows = right_edge[:, None, :, None] & real
        if bool(rows.any()):
            right_seen += 1
            err, _ = _changed(mine[0]["o"], moved["o"], rows, 2 * jitter)
            right_moved += err > 2 * jitter
    if edges_seen and not edges_moved:
        return _failed(f"no query whose window's left edge is the changed key (left={left}, "
                     f"inclusive: query i' sees keys i' - {left} .. i') moved: the kernel's "
                     "window is one key narrower than declared")
    if right_seen and not right_moved:
        return _failed(f"no query whose window's right edge is the changed key (right={right}, "
                     "inclusive: query i' sees keys up to i' + right) moved: the kernel's window "
                     "is one key narrower on the right than declared")
    if not spots:
        return Outcome(PASS, notes=["no key to change in this example"])
    return Outcome(PASS)


def check_gqa_grouping(kern: Kernel) -> Outcome:
    """A change to kv head g moves only its query heads g*H/G .. (g+1)*H/G - 1, and those move."""
    ex = kern.ex
    q, k, v = inputs(ex)
    per = ex.H // ex.G
    g = ex.seed % ex.G
    head = lambda t: _positions(t, 1, lambda n: n == g)  # noqa: E731
    k2, v2 = _perturbed(k, head, ex, 71), _perturbed(v, head, ex, 72)
    mine, theirs = _apart(kern, [kern.step(q, k, v), kern.step(q, k, v)],
                          [kern.step(q, k2, v2)])
    jitter = _own_jitter(kern, mine)
    ours = (torch.arange(ex.H) // per == g).view(1, -1, 1, 1)
    real = real_rows(ex) & visible_rows(ex, kern.c.causal)
    others = (~ours).expand(ex.B, ex.H, ex.Tq, 1) & real
    change = f"changing kv head {g} (which serves query heads {g * per}..{(g + 1) * per - 1})"
    for name in ("o", "lse"):
        failed = _unmoved(name, mine[0][name], theirs[0][name], others, jitter, change,
                          "b h i d" if name == "o" else "b h i")
        if failed is not None:
            return failed
    for h in range(g * per, (g + 1) * per):
        rows = (torch.arange(ex.H) == h).view(1, -1, 1, 1).expand(ex.B, ex.H, ex.Tq, 1) & real
        if bool(rows.any()):
            err, _ = _changed(mine[0]["o"], theirs[0]["o"], rows, 2 * jitter)
            if err <= 2 * jitter:
                return _failed(f"{change} left query head {h}'s o unchanged: head h must read kv "
                             f"head h // (H / G) = {g}")
    return Outcome(PASS)


def check_masked_rows(kern: Kernel) -> Outcome:
    """A query that sees no key gives o = 0 and LSE = -inf, and zero dq, never NaN."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    blind = real_rows(ex) & ~visible_rows(ex, c.causal)
    if not bool(blind.any()):
        return Outcome(PASS, notes=["no query without keys in this example"])
    do = inputs(dataclasses.replace(ex, scale=1.0), 31)[0]
    grad = {"do": do, "dlse": None} if c.backward else None
    (got,) = kern.run([kern.step(q, k, v, grad=grad)])
    rows = blind.expand(ex.B, ex.H, ex.Tq, 1)
    o = got["o"]
    masked_o = o.masked_select(rows.expand_as(o))
    if not bool((masked_o == 0).all()):
        index = tuple(int(i) for i in ((o != 0) & rows).nonzero()[0])
        return _failed(f"a query that sees no key (MASKED_ROWS = 'zero') gave o = "
                     f"{float(o[index]):g}{_at(index)}, not 0")
    lse = got["lse"]
    if lse is not None:
        masked_lse = lse.masked_select(rows[..., 0])
        if not bool((masked_lse == -math.inf).all()):
            index = tuple(int(i) for i in ((lse != -math.inf) & rows[..., 0]).nonzero()[0])
            return _failed(f"a query that sees no key gave LSE = {float(lse[index]):g}"
                         f"{_at(index, 'b h i')}, not -inf")
    for name in ("dq", "dk", "dv"):
        g = got.get(name)
        if g is not None and not bool(g.isfinite().all()):
            return _failed(f"{name} holds NaN or inf when some queries see no key")
    dq = got.get("dq")
    if dq is not None and not bool((dq.masked_select(rows.expand_as(dq)) == 0).all()):
        return _failed("dq is not 0 for a query that sees no key")
    return Outcome(PASS)


def check_varlen(kern: Kernel) -> Outcome:
    """The packed call equals each sequence called alone, within the rule (zero-length
    sequences included)."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    alone = []
    for b, (lq, lk) in enumerate(_lengths(ex)):
        if lq == 0:
            continue
        one = dataclasses.replace(ex, B=1, Tq=max(lq, 1), Tk=max(lk, 1), lengths=((lq, lk),))
        alone.append((b, one, Kernel(kern.ctx, one, c).step(
            q[b:b + 1, :, :one.Tq], k[b:b + 1, :, :one.Tk], v[b:b + 1, :, :one.Tk])))
    kern.ctx.submit(ex, [kern.step(q, k, v)] + [s for _, _, s in alone])
    results = kern.ctx.collect()
    packed = kern.unpack(results[0], kern.ctx._steps[0])
    golden = _golden(ex, q, k, v, c.causal)
    yard = Yardstick(ex, q, k, v, c.causal, golden)
    for (b, one, step), raw in zip(alone, results[1:], strict=True):
        single = Kernel(kern.ctx, one, c).unpack(raw, step)
        lq = one.lengths[0][0] if one.lengths else one.Tq
        for name in ("o", "lse"):
            a = packed[name]
            if a is None:
                continue
            mine = a[b:b + 1, :, :lq]
            theirs = single[name][:, :, :lq]
            allowed_yard = 2 * yard[name]
            failed = _judge(name, _judged(one, c.causal, c.masked_rows, mine.double()),
                            _judged(one, c.causal, c.masked_rows, theirs.double()),
                            allowed_yard, one, what=f"sequence {b} packed vs alone: ")
            if failed is not None:
                return failed
    failed = _oracle_outcome(kern, packed, q, k, v, what="packed: ")
    return failed or Outcome(PASS)


def check_knobs(kern: Kernel) -> Outcome:
    """Every value of every scheduling knob gives o (and the LSE) within the rule."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    calls = [(name, value) for name, values in c.knobs for value in values]
    results = kern.run([kern.step(q, k, v, knob=knob) for knob in calls])
    for (name, value), got in zip(calls, results, strict=True):
        failed = _oracle_outcome(kern, got, q, k, v, what=f"with {name}={value!r}: ")
        if failed is not None:
            return failed
    return Outcome(PASS)


def check_lse_grad(kern: Kernel) -> Outcome:
    """A loss on the LSE alone gives dv exactly 0 (the LSE does not depend on v)."""
    ex = kern.ex
    q, k, v = inputs(ex)
    dlse = torch.randn(ex.B, ex.H, ex.Tq, generator=_gen(ex, 33), dtype=torch.float64).float()
    dlse = dlse.masked_fill(~_judgeable(ex, kern.c)[..., 0].expand_as(dlse), 0.0)
    (got,) = kern.run([kern.step(q, k, v, grad={"do": None, "dlse": dlse})])
    if not got["lse_grad"]:
        return _failed("the kernel declares LSE_GRAD = True, but its LSE does not require grad")
    dv = got["dv"]
    if dv is not None and not bool((dv == 0).all()):
        err, index = tol.max_abs_diff(dv, torch.zeros_like(dv))
        return _failed(f"a loss on the LSE alone gave dv up to {err:.3g}{_at(index, 'b g j d')}, "
                     "not 0: the LSE does not depend on v", err, 0.0)
    c = kern.c
    # The kernel's LSE is in its base: a base-2 LSE is the natural one / ln 2.
    natural = dlse.double() / math.log(2) if c.lse == "base2" else dlse.double()
    golden = _golden(ex, q, k, v, c.causal, grad_lse=natural)
    yard = Yardstick(ex, q, k, v, c.causal, golden, grad_lse=natural)
    largest = max(_finite_max(g) for g in golden[2])
    for name, want, t in zip(("dq", "dk"), golden[2], (q, k), strict=False):
        gotten = torch.zeros(t.shape, dtype=torch.float64) if got[name] is None else \
            got[name].double()
        failed = _judge(name, gotten, want, yard, ex, K=K_GRAD, magnitude=largest,
                        what="a loss on the LSE alone: ")
        if failed is not None:
            return failed
    return Outcome(PASS)


def check_sensitivity(kern: Kernel) -> Outcome:
    """Changing q (head 0) or k (kv head 0) moves o as the reference's o moves: a kernel that
    ignores q or k (the mean of v passes a near-uniform softmax) fails."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    head0 = lambda t: _positions(t, 1, lambda h: h == 0)  # noqa: E731
    q2, k2 = _perturbed(q, head0, ex, 81), _perturbed(k, head0, ex, 82)
    base, moved_q, moved_k = kern.run([kern.step(q, k, v), kern.step(q2, k, v),
                                       kern.step(q, k2, v)])
    golden = _golden(ex, q, k, v, c.causal)
    yard = Yardstick(ex, q, k, v, c.causal, golden)
    allowed = tol.K * yard["o"] + tol.floor(ex.dtype, _finite_max(golden[0]))
    rows = real_rows(ex) & visible_rows(ex, c.causal)
    notes: list[str] = []
    for name, inputs_moved, got in (("q", (q2, k, v), moved_q), ("k", (q, k2, v), moved_k)):
        want = reference(ex, *inputs_moved, c.causal)[0]
        heads = (torch.arange(ex.H) < (1 if name == "q" else ex.H // ex.G)).view(1, -1, 1, 1)
        judged = heads & rows
        ref_move, _ = _changed(golden[0], want, judged, allowed)
        if ref_move <= 4 * allowed:  # the reference itself barely moves: nothing to judge
            notes.append(f"changing {name} barely moves the reference here")
            continue
        sub_move, _ = _changed(base["o"].double(), got["o"].double(), judged, allowed)
        if sub_move < ref_move / 2:
            # No measured/allowed: "moved too little" is no violation size to rank by.
            return _failed(f"changing {name} (head 0) moved o by {sub_move:.3g}, where the "
                         f"reference moves by {ref_move:.3g} (at least half of that is "
                         f"required): the kernel does not read {name} as attention does")
    return Outcome(PASS, notes=notes[:1])


# The hint where the call made from a second thread came back unlike the same inputs alone.
RACE = ("; the first call's inputs, called again from a second thread at the same time, gave "
        "another o than alone: calls made at once share memory (a scratch buffer, a global) "
        "and overwrite each other's")


def check_fresh_results(kern: Kernel) -> Outcome:
    """Each call computes afresh: new values copied into the same tensors through `.data` (a
    cache keyed by address, or by `Tensor._version`, which such a write leaves as it was), then
    other values at new addresses (by shape), as views into wider storage (a kernel that reads
    its inputs' memory as if contiguous), each within the rule, with the output memory poisoned
    before every call (torch.empty returned unwritten)."""
    ex = kern.ex
    first = inputs(ex)
    second = inputs(ex, 101)
    third = inputs(ex, 202)
    last = lambda t: _positions(t, 2, lambda i: i == t.size(2) - 1) & _positions(  # noqa: E731
        t, 0, lambda b: b == t.size(0) - 1)
    # k one batch row for all (sent with stride 0 along B where the layout has a batch axis)
    k4 = third[1] if kern.c.layout == "varlen" else third[1][:1].expand_as(third[1]).clone()
    fourth = (_perturbed(third[0], last, ex, 303), k4, _perturbed(third[2], last, ex, 304))
    again = (first[0].clone(), first[1].clone(), first[2].clone())
    got = kern.run([kern.step(*first), kern.step(*second, in_place=True),
                    kern.step(*third, strided=True),
                    kern.step(*fourth, broadcast="" if kern.c.layout == "varlen" else "k",
                              alongside=again)])
    for n, (xs, result, how) in enumerate(zip(
            (first, second, third, fourth), got,
            ("the first call", "new values copied into the same tensors",
             "new values in new tensors of the same shape, views into wider storage (not "
             "contiguous, the last dimension dense, as FlashAttention accepts)",
             "the same again but the last row's q and v, k one batch row broadcast to all "
             "(stride 0 along the batch, as expand gives), while a second thread calls it "
             "on the first call's inputs"),
            strict=True)):
        failed = _oracle_outcome(kern, result, *xs, what=f"{how}: ")
        if failed is not None:
            if n == 3 and tol.max_abs_diff(result["alongside"], got[0]["o"])[0] != 0:
                failed.message += RACE
            elif n and tol.max_abs_diff(result["o"], got[n - 1]["o"])[0] == 0:
                key = ("address or version", "shape", "a checksum")[min(n, 3) - 1]
                failed.message += (f"; it is exactly the previous call's o: the kernel "
                                   f"returned a cached answer (keyed by {key})")
            elif n == 2 and not bool(result["o"].isfinite().all()):
                failed.message += ("; o holds NaN, which attnspec put in the wider storage "
                                   "around the views and nowhere in them: the kernel reads its "
                                   "inputs' memory as if they were contiguous (honour the "
                                   "strides, or call .contiguous())")
            elif not bool(result["o"].isfinite().all()) or _finite_max(result["o"]) > 1e6 * (
                    1 + _finite_max(_golden(ex, *xs, kern.c.causal)[0])):
                failed.message += ("; o holds values no attention gives (NaN, or magnitudes "
                                   "like 1e30) where attnspec poisoned the memory before the "
                                   "call: memory returned unwritten (torch.empty)?")
            return failed
    c = kern.c
    golden = _golden(ex, *again, c.causal)
    failed = _judge("o", _judged(ex, c.causal, c.masked_rows, got[3]["alongside"].double()),
                    _judged(ex, c.causal, c.masked_rows, golden[0]),
                    Yardstick(ex, *again, c.causal, golden), ex,
                    what="the first call's inputs again, called from a second thread at the "
                    "same time as the fourth call: ")
    if failed is not None:
        if tol.max_abs_diff(got[3]["alongside"], got[0]["o"])[0] != 0:
            failed.message += RACE
        return failed
    return _fresh_at_one_key(kern, first)


def _fresh_at_one_key(kern: Kernel, xs: tuple[Tensor, Tensor, Tensor]) -> Outcome:
    """One query on one key, plain (every head its own kv head, no window, cap, ALiBi or
    sinks), where the answer is v itself: a kernel that returns v (a view, the same memory)
    instead of a tensor of its own is caught by the harness here, whatever the example drew."""
    ex, c = kern.ex, kern.c
    lengths = None if ex.lengths is None else tuple((1, 1) for _ in ex.lengths)
    one = dataclasses.replace(ex, Tq=1, Tk=1, G=ex.H, lengths=lengths, cuts=(), window=None,
                              softcap=None, alibi=False, sinks=False)
    per = ex.H // ex.G
    q = xs[0][:, :, :1]
    k, v = (t[:, :, :1].repeat_interleave(per, dim=1) for t in xs[1:])
    small = Kernel(kern.ctx, one, c)
    try:
        (got,) = small.run([small.step(q, k, v)])
    except Unsupported:  # supports(case) declines it: the example's own calls stand
        return Outcome(PASS, notes=["supports(case) declined the one-key call"])
    return _oracle_outcome(small, got, q, k, v, what="one query on one key: ") or Outcome(PASS)


# ---- the cache: attention_with_cache ----------------------------------------------------------


@dataclass
class _Cache:
    """One cache call laid out in the reference's axes: the caches as sent and as they must be
    left ((B, G, Tcap, D) logical; paged: (N, G, P, D) physical pages), the new tokens, the
    block table, and the example the reference judges (each row's L_b + Tnew keys)."""

    k_cache: Tensor
    v_cache: Tensor
    k_after: Tensor
    v_after: Tensor
    k_new: Tensor | None
    v_new: Tensor | None
    block_table: Tensor | None  # (B, M) int64: logical page -> physical page
    judged: KernelExample


def _cache_of(ex: KernelExample, k: Tensor, v: Tensor) -> _Cache:
    """The caches for `ex`: row b's first L_b keys of k and v cached, the next new_tokens to
    append; every other slot (and every unused page) NaN, which a correct kernel never reads."""
    assert ex.cache_seqlens is not None
    lens, new, page = ex.cache_seqlens, ex.new_tokens, ex.page_size
    cap = max(lens, default=0) + new + 1  # a slot past the last token: it must stay untouched
    if page is not None:
        cap = -(-cap // page) * page
    nan = float("nan")
    caches, afters, news = [], [], []
    for t in (k, v):
        cache = t.new_full((ex.B, ex.G, cap, ex.D), nan)
        after = cache.clone()
        fresh = t.new_zeros((ex.B, ex.G, new, ex.D))
        for b, n in enumerate(lens):
            cache[b, :, :n] = after[b, :, :n] = t[b, :, :n]
            fresh[b] = t[b, :, n:n + new]
            after[b, :, n:n + new] = fresh[b]
        caches.append(cache)
        afters.append(after)
        news.append(fresh if new else None)
    table = None
    if page is not None:
        pages = cap // page
        spare = 1 + ex.seed % 3  # pages no row owns: NaN, never to be read or written
        order = torch.randperm(ex.B * pages + spare, generator=_gen(ex, 141))
        table = order[:ex.B * pages].view(ex.B, pages)
        for n, t in enumerate(caches + afters):
            phys = t.new_full((ex.B * pages + spare, ex.G, page, ex.D), nan)
            phys[table.reshape(-1)] = t.view(ex.B, ex.G, pages, page, ex.D).transpose(
                1, 2).reshape(ex.B * pages, ex.G, page, ex.D)
            (caches if n < 2 else afters)[n % 2] = phys
    judged = dataclasses.replace(ex, lengths=tuple((ex.Tq, n + new) for n in lens),
                                 cache_seqlens=None, new_tokens=0, page_size=None)
    return _Cache(caches[0], caches[1], afters[0], afters[1], news[0], news[1], table, judged)


def _cache_step(kern: Kernel, q: Tensor, cache: _Cache) -> dict[str, Any]:
    ex, c = kern.ex, kern.c
    assert ex.cache_seqlens is not None

    def laid(t: Tensor) -> Tensor:  # (B or N, G, T, D) in the kernel's layout
        return conv.to_layout(t, c.layout)

    keywords: dict[str, Any] = {"causal": ex.causal}
    if c.has("scale"):
        keywords["scale"] = ex.attn_scale
    if ex.softcap is not None:
        keywords["softcap"] = ex.softcap
    sent_q = laid(q)
    return {"op": "kernel_cache", "q": sent_q, "k_cache": laid(cache.k_cache),
            "v_cache": laid(cache.v_cache),
            "k": None if cache.k_new is None else laid(cache.k_new),
            "v": None if cache.v_new is None else laid(cache.v_new),
            "cache_seqlens": list(ex.cache_seqlens),
            "block_table": None if cache.block_table is None else
            cache.block_table.reshape(-1).tolist(),
            "keywords": keywords, "lse": c.lse is not None, "out_shape": list(sent_q.shape),
            "lse_shape": list(conv.lse_shape(c, ex.B, ex.H, ex.Tq, ex.B * ex.Tq))}


def _cache_slot(ex: KernelExample, cache: _Cache, index: tuple[int, ...]) -> str:
    """Where a cache element is, in words: its row and position, and what belongs there."""
    assert ex.cache_seqlens is not None
    first, g, slot = index[0], index[1], index[2]
    b, j = first, slot
    if cache.block_table is not None:
        found = (cache.block_table == first).nonzero()
        if not len(found):
            return (f"physical page {first} (kv head {g}, slot {slot}), which no row's "
                    "block_table lists: it must never be written")
        b, m = (int(i) for i in found[0])
        j = m * (ex.page_size or 1) + slot
    n, new = ex.cache_seqlens[b], ex.new_tokens
    what = ("a token already cached" if j < n else "an appended token" if j < n + new
            else "past the tokens, to be left untouched")
    paged = "" if cache.block_table is None else f" (physical page {first}, slot {slot})"
    return (f"row {b}, kv head {g}, position {j}{paged}, {what} (cache_seqlens[{b}] = {n}: "
            f"the {new} new tokens belong at positions {n} .. {n + new - 1})")


def _cache_outcome(kern: Kernel, cache: _Cache, raw: Mapping[str, Any]) -> Outcome | None:
    """The caches after the call: bitwise the appended k and v at L_b .. L_b + Tnew - 1, and
    as sent everywhere else (NaN stays NaN)."""
    ex, c = kern.ex, kern.c
    for name, want in (("k_cache", cache.k_after), ("v_cache", cache.v_after)):
        got = conv.from_layout(raw[name], c.layout)
        same = (got == want) | (got.isnan() & want.isnan())
        if not bool(same.all()):
            index = tuple(int(i) for i in (~same).nonzero()[0])
            return _failed(f"{name} after attention_with_cache holds {float(got[index]):g} "
                           f"where {float(want[index]):g} belongs, at "
                           f"{_cache_slot(ex, cache, index)}: the call must append k and v "
                           "in place there and leave every other slot as it was")
    return None


def _cache_check(kern: Kernel, what: str) -> Outcome:
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    cache = _cache_of(ex, k, v)
    (raw,) = kern.ctx.request(ex, [_cache_step(kern, q, cache)])
    failed = _cache_outcome(kern, cache, raw) if ex.new_tokens else None
    if failed is not None:
        failed.message = what + failed.message
        return failed
    got = {"o": conv.from_layout(raw["out"], c.layout), "raw": raw,
           "lse": None if raw.get("lse") is None else conv.lse_from_layout(
               raw["lse"].double(), c)}
    # flash_attn_with_kvcache's corner: query i at cache_seqlens + Tnew - Tq + i.
    judge = Kernel(kern.ctx, cache.judged, dataclasses.replace(c, causal="bottom_right"))
    failed = _oracle_outcome(judge, got, q, k, v, what=what)
    if failed is not None and not bool((got["o"].isfinite() | ~_judgeable(
            cache.judged, judge.c)).all()):
        failed.message += ("; o holds NaN or inf on finite keys: the kernel read a slot "
                           "attnspec filled with NaN (past a row's cache_seqlens + Tnew, or a "
                           "page its block_table does not name)")
    return failed or Outcome(PASS)


def check_paged(kern: Kernel) -> Outcome:
    """A paged cache (physical pages shuffled, unused pages NaN) gives o and the LSE of the
    same keys, within the rule, and appends into the pages the block table names."""
    ex = kern.ex
    return _cache_check(kern, f"a paged cache (page size {ex.page_size}, pages shuffled, "
                              f"cache_seqlens {list(ex.cache_seqlens or ())}, "
                              f"{ex.new_tokens} appended): ")


def check_kv_append(kern: Kernel) -> Outcome:
    """Appending new k and v to a cache of L_b tokens: the cache then holds them at L_b .., and
    o is the core's on all L_b + Tnew keys within the rule."""
    ex = kern.ex
    return _cache_check(kern, f"appending {ex.new_tokens} tokens to caches of "
                              f"{list(ex.cache_seqlens or ())}: ")


# ---- the catalogue ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelProperty:
    """One kernel property: its id, its check, what its examples need."""

    id: str
    check: Check
    input_scales: tuple[float, ...] = (1.0,)
    needs: tuple[str, ...] = ()  # backward, lse, window, gqa, masked_rows, varlen, knobs,
    # cache, paged
    min_batch: int = 1
    cuts: bool = False


# Inputs x1, x2, x3: logits of std about 1, 4 and 9 (q.k/sqrt(D) of randn x s has std s^2), so
# peaked rows where a kernel that returns the mean of v, or rescales wrongly, fails.
KERNEL_TRAINED = (1.0, 2.0, 3.0)

KERNEL_PROPERTIES: tuple[KernelProperty, ...] = (
    KernelProperty("width", check_width),
    KernelProperty("dtype", check_dtype),
    KernelProperty("causality", check_causality, cuts=True),
    KernelProperty("batch_independence", check_batch_independence, min_batch=2),
    KernelProperty("determinism", check_determinism),
    KernelProperty("input_unchanged", check_input_unchanged),
    # x8: logits past 88 in most examples (a softmax without its row max overflows there)
    KernelProperty("finite", check_finite, input_scales=(1.0, 4.0, 8.0)),
    KernelProperty("oracle", check_oracle, input_scales=KERNEL_TRAINED),
    KernelProperty("oracle_grad", check_oracle_grad, input_scales=KERNEL_TRAINED,
                   needs=("backward",)),
    KernelProperty("window", check_window, needs=("window",), cuts=True),
    KernelProperty("gqa_grouping", check_gqa_grouping, needs=("gqa",)),
    KernelProperty("masked_rows", check_masked_rows, needs=("masked_rows",)),
    KernelProperty("varlen", check_varlen, input_scales=KERNEL_TRAINED, needs=("varlen",)),
    KernelProperty("paged", check_paged, input_scales=(1.0, 2.0), needs=("cache", "paged")),
    KernelProperty("kv_append", check_kv_append, input_scales=(1.0, 2.0), needs=("cache",)),
    KernelProperty("knobs", check_knobs, input_scales=KERNEL_TRAINED, needs=("knobs",)),
    KernelProperty("lse_grad", check_lse_grad, needs=("lse", "backward", "lse_grad")),
    KernelProperty("sensitivity", check_sensitivity),
    KernelProperty("fresh_results", check_fresh_results, input_scales=KERNEL_TRAINED),
)
KERNEL_PROPERTY_IDS: tuple[str, ...] = tuple(p.id for p in KERNEL_PROPERTIES)
KERNEL_BY_ID: dict[str, KernelProperty] = {p.id: p for p in KERNEL_PROPERTIES}
# The self-comparisons whose two sides run in two processes.
KERNEL_TWINNED = frozenset({"causality", "batch_independence", "window", "gqa_grouping"})


def skip_reason(prop: KernelProperty, c: conv.KernelConventions) -> str | None:
    """Why a kernel with conventions `c` has nothing for `prop` to check (None: it has)."""
    for need in prop.needs:
        if need == "backward" and not c.backward:
            return "the kernel declares no backward (BACKWARD = False)"
        if need == "lse" and c.lse is None:
            return "the kernel returns no LSE (LSE = None)"
        if need == "lse_grad" and not c.lse_grad:
            return ("the kernel's LSE carries no gradient (LSE_GRAD = False, as FlashAttention "
                    "2 and 3 and xformers return it)")
        if need == "window" and c.window is None:
            return "the kernel takes no window (WINDOW = None)"
        if need == "gqa" and not c.has("gqa"):
            return "the kernel takes no grouped kv heads ('gqa' is not in FEATURES)"
        if need == "varlen" and c.layout != "varlen":
            return f"the kernel's LAYOUT is {c.layout!r}, not 'varlen'"
        if need == "cache" and not c.cache:
            return ("the kernel defines no attention_with_cache(q, k_cache, v_cache, *, "
                    "cache_seqlens, causal, ...)")
        if need == "paged" and c.paged is None:
            return "the kernel declares no paged cache (PAGED = None)"
        if need == "knobs" and not c.knobs:
            return "the kernel declares no scheduling knobs (KNOBS)"
        if need == "masked_rows":
            if c.masked_rows != "zero":
                return "the kernel leaves rows without keys undefined (MASKED_ROWS)"
            if c.causal == "top_left" and not c.has("cross") and c.window is None:
                return ("with CAUSAL = 'top_left' every query sees key 0: no row without keys "
                        "can be drawn ('cross' for Tk = 0, or a WINDOW, would make them)")
            if c.causal == "bottom_right" and not c.has("cross") and c.window is None:
                return ("without 'cross' (Tq > Tk) or a WINDOW, every query sees a key")
    return None


def run_kernel_check(ctx: Context, prop: str, ex: KernelExample,
                     conventions: conv.KernelConventions) -> Outcome:
    """One kernel property on one example; the subject's faults become `error` outcomes."""
    try:
        outcome = KERNEL_BY_ID[prop].check(Kernel(ctx, ex, conventions))
    except SubjectFault as fault:
        outcome = Outcome("error", str(fault))
    except Unsupported as declined:
        outcome = Outcome("unsupported", str(declined))
    outcome.forwards = ctx.forwards
    return outcome


def first_call(ctx: Context, c: conv.KernelConventions, device: str,
               dtype: str) -> str | None:
    """The first call of a fresh worker (the load's, before any property's) against the same
    call made again at once: a kernel wrong only on its first call (a workspace read before it
    is written, a warm-up with other constants) is found here, where a harness that warms up
    first never looks. What differs, in one line, for determinism to report (None: the same)."""
    if c.layout == "varlen":
        return None  # its calls need lengths drawn; left to the properties' own calls
    ex = KernelExample(B=2, H=3, G=3, Tq=5, Tk=5, D=4, dtype=dtype, device=device, seed=0)
    q, k, v = inputs(ex)
    kern = Kernel(ctx, ex, c)
    try:
        cold, warm = kern.run([kern.step(q, k, v), kern.step(q, k, v)])
    except (SubjectFault, Unsupported):
        return None  # the properties say what is wrong, each with its example
    a, b = cold.get("o"), warm.get("o")
    if a is None or b is None or a.shape != b.shape:
        return None
    err, index = tol.max_abs_diff(a.masked_fill(~_judgeable(ex, c), 0.0),
                                  b.masked_fill(~_judgeable(ex, c), 0.0))
    wrong = _oracle_outcome(kern, cold, q, k, v)
    if wrong is None or _oracle_outcome(kern, warm, q, k, v) is not None or not err > 0:
        return None  # right first, or as wrong the second time: the properties judge that
    return (f"the first call of a fresh worker (attnspec's own, as the subject loaded: q, k, v "
            f"{tuple(q.shape)} {dtype} on {device}, seed 0) gave o {err:.3g} away from the "
            f"same call made again at once{_at(index)}, and only the second is the reference's "
            f"({wrong.message}): the kernel's first call is wrong (a workspace read before it "
            "is written, a warm-up that changes what it computes)")


def layout_hint(ctx: Context, c: conv.KernelConventions, device: str,
                dtype: str) -> str | None:
    """A one-line hint where a kernel declared (or left) LAYOUT = "bhsd" reads its inputs as
    (B, T, H, D): one probe call, whose output then matches the reference on the inputs with
    their head and position axes swapped (None: it does not, or the probe did not run)."""
    if c.layout != "bhsd":
        return None
    ex = KernelExample(B=2, H=3, G=3, Tq=5, Tk=5, D=4, dtype=dtype, device=device, seed=0)
    q, k, v = inputs(ex)
    kern = Kernel(ctx, ex, c)
    try:
        (got,) = kern.run([kern.step(q, k, v)])
    except (SubjectFault, Unsupported):
        return None  # the properties say what is wrong, each with its example
    if got["o"] is None or tuple(got["o"].shape) != (ex.B, ex.H, ex.Tq, ex.D):
        return None
    if _oracle_outcome(kern, got, q, k, v) is None:
        return None
    swapped = dataclasses.replace(ex, H=ex.Tq, G=ex.Tq, Tq=ex.H, Tk=ex.H)
    qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
    as_bshd = reference(swapped, qs, ks, vs, c.causal)[0]
    err = float((got["o"].double() - as_bshd.transpose(1, 2)).abs().max())
    if not err <= tol.allowed(0.0, dtype, float(as_bshd.abs().max())):
        return None
    return (f"the kernel reads q, k and v as (B, T, H, D), but LAYOUT is \"bhsd\" (B, H, T, D, "
            f"the default): on q {tuple(q.shape)} its output is the reference's with the head and "
            "position axes swapped; declare LAYOUT = \"bshd\"")
