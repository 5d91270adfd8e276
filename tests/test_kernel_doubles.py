"""The kernel catalogue's doubles are what they claim, proved without the engine.

Every correct kernel in tests/kernels/good/ agrees with an independent float64 formulation (below)
and passes a cheap imitation of every kernel property on a few cases; every broken kernel in
tests/kernels/broken/ is flagged, on its TRIGGER case, by the imitation of each property its
EXPECTED names, and the correct kernel under the same declarations (its twin) is not. The
imitations are small and exact where the contract is exact; they are not the engine's
properties, only evidence that each double shows its bug (or its correctness).

TRIGGER keys (all optional, defaults in BASE): B, H, G, Tq, Tk, D, dtype, causal; window as
(left, right) inclusive with None unbounded (encoded here per the subject's WINDOW); scale,
softcap (floats); alibi, sinks (bools: drawn slopes / sink logits); seqlens_q, seqlens_k (varlen
per-sequence lengths, B follows); knobs (keywords); mag (input multiplier, x3 by default); seed.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import Tensor

KERNELS = Path(__file__).parent / "kernels"
GOOD = sorted(p for p in (KERNELS / "good").glob("*.py") if not p.name.startswith("_"))
BROKEN = sorted(p for p in (KERNELS / "broken").glob("*.py") if not p.name.startswith("_"))
PROPERTY_IDS = ("width", "dtype", "causality", "batch_independence", "determinism",
                "input_unchanged", "finite", "oracle", "oracle_grad", "window", "gqa_grouping",
                "masked_rows", "varlen", "paged", "kv_append", "knobs", "lse_grad", "sensitivity",
                "fresh_results")
BASE: dict[str, Any] = {"B": 2, "H": 4, "G": 2, "Tq": 5, "Tk": 9, "D": 7, "dtype": torch.float32,
                        "causal": True, "window": None, "scale": None, "softcap": None,
                        "alibi": False, "sinks": False, "seqlens_q": None, "seqlens_k": None,
                        "knobs": {}, "mag": 3.0, "seed": 0}
TOL = {torch.float32: 1e-4, torch.float64: 1e-9, torch.bfloat16: 3e-2}


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    # tiny tensors: a second intra-op thread only spins against the other sessions on the cores
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def load(path: Path) -> ModuleType:
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"kernel_double_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


# -- cases and inputs

class Case:
    """One example: sizes, semantics, and per-sequence lengths (dense: B copies of Tq, Tk)."""

    def __init__(self, module: ModuleType, **overrides: Any) -> None:
        c = {**BASE, **overrides}
        self.__dict__.update(c)
        self.module = module
        self.layout = module.LAYOUT
        self.corner = module.CAUSAL
        if "G" not in overrides and "gqa" not in module.FEATURES:
            self.G = self.H
        if self.seqlens_q is None:
            self.seqlens_q = [self.Tq] * self.B
            self.seqlens_k = [self.Tk] * self.B
        self.B = len(self.seqlens_q)

    def tol(self) -> float:
        return TOL[self.dtype]


def fields(case: Case) -> dict[str, Any]:
    return {key: getattr(case, key) for key in BASE}


def draw(case: Case, seed: int | None = None) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """Per-sequence float64 q (H, Tq_b, D), k and v (G, Tk_b, D), zero-mean, times `mag`."""
    gen = torch.Generator().manual_seed(case.seed if seed is None else seed)

    def one(heads: int, T: int) -> Tensor:
        x = torch.randn(heads, T, case.D, generator=gen, dtype=torch.float64) * case.mag
        return x.to(case.dtype).to(torch.float64)  # representable in the subject's dtype

    qs = [one(case.H, t) for t in case.seqlens_q]
    ks = [one(case.G, t) for t in case.seqlens_k]
    vs = [one(case.G, t) for t in case.seqlens_k]
    return qs, ks, vs


def extras(case: Case) -> dict[str, Tensor]:
    gen = torch.Generator().manual_seed(1000 + case.seed)
    out = {}
    if case.alibi:
        out["alibi"] = torch.rand(case.H, generator=gen) * 0.5 + 0.1
    if case.sinks:
        out["sinks"] = torch.randn(case.H, generator=gen) * 2
    return out


def pack(case: Case, parts: list[Tensor], heads_first: bool = True) -> Tensor:
    """Per-sequence (heads, T, D) tensors in the subject's layout and dtype."""
    if case.layout == "varlen":
        return torch.cat([p.transpose(0, 1) for p in parts], 0).to(case.dtype)
    x = torch.stack(parts)
    if case.layout == "bshd":
        x = x.transpose(1, 2)
    return x.to(case.dtype).contiguous()


def unpack(case: Case, x: Tensor, lengths: list[int]) -> list[Tensor]:
    """The subject's layout back to per-sequence (heads, T, D)."""
    if case.layout == "varlen":
        edges = [0]
        for t in lengths:
            edges.append(edges[-1] + t)
        return [x[edges[b]:edges[b + 1]].transpose(0, 1) for b in range(len(lengths))]
    if case.layout == "bshd":
        x = x.transpose(1, 2)
    return list(x.unbind(0))


def unpack_lse(case: Case, lse: Tensor) -> list[Tensor]:
    """The declared LSE (base, layout) to per-sequence natural-log (H, Tq_b)."""
    module = case.module
    lse = lse.to(torch.float64)
    if module.LSE == "base2":
        lse = lse * math.log(2)
    layout = getattr(module, "LSE_LAYOUT", "hs" if case.layout == "varlen" else "bhs")
    if case.layout == "varlen":
        lse = lse.transpose(0, 1) if layout == "sh" else lse
        edges = [0]
        for t in case.seqlens_q:
            edges.append(edges[-1] + t)
        return [lse[:, edges[b]:edges[b + 1]] for b in range(case.B)]
    return list((lse.transpose(1, 2) if layout == "bsh" else lse).unbind(0))


def lse_shape(case: Case) -> tuple[int, ...]:
    layout = getattr(case.module, "LSE_LAYOUT", "hs" if case.layout == "varlen" else "bhs")
    total = sum(case.seqlens_q)
    return {"bhs": (case.B, case.H, case.Tq), "bsh": (case.B, case.Tq, case.H),
            "hs": (case.H, total), "sh": (total, case.H)}[layout]


def out_shape(case: Case) -> tuple[int, ...]:
    if case.layout == "varlen":
        return (sum(case.seqlens_q), case.H, case.D)
    if case.layout == "bshd":
        return (case.B, case.Tq, case.H, case.D)
    return (case.B, case.H, case.Tq, case.D)


def keywords(case: Case, ex: dict[str, Tensor]) -> dict[str, Any]:
    module = case.module
    kw: dict[str, Any] = {"causal": case.causal}
    if case.scale is not None:
        kw["scale"] = case.scale
    if case.window is not None:
        left, right = case.window
        kw["window"] = {"pair": (-1 if left is None else left, -1 if right is None else right),
                        "pair_none": (left, right), "left": -1 if left is None else left,
                        }[module.WINDOW]
    if case.softcap is not None:
        kw["softcap"] = case.softcap
    if "alibi" in ex:
        kw["alibi_slopes"] = ex["alibi"]
    if "sinks" in ex:
        kw["sinks"] = ex["sinks"]
    if case.layout == "varlen":
        def cu(lengths: list[int]) -> Tensor:
            return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)

        kw |= {"cu_seqlens_q": cu(case.seqlens_q), "cu_seqlens_k": cu(case.seqlens_k),
               "max_seqlen_q": max(case.seqlens_q, default=0),
               "max_seqlen_k": max(case.seqlens_k, default=0)}
    return kw | dict(case.knobs)


# -- the independent float64 formulation

def visible_mask(case: Case, Tq: int, Tk: int) -> Tensor:
    shift = Tk - Tq if case.corner == "bottom_right" else 0
    rows = torch.arange(Tq)[:, None] + shift
    cols = torch.arange(Tk)[None, :]
    allowed = torch.ones(Tq, Tk, dtype=torch.bool)
    if case.causal:
        allowed &= cols <= rows
    if case.window is not None:
        left, right = case.window
        if left is not None:
            allowed &= cols >= rows - left
        if right is not None:
            allowed &= cols <= rows + right
    return allowed


def reference(case: Case, q: Tensor, k: Tensor, v: Tensor,
              ex: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """One sequence, float64: o (H, Tq, D), natural lse (H, Tq); empty rows 0 and -inf."""
    H, Tq, D = q.shape
    G, Tk = k.shape[0], k.shape[1]
    kk = k.repeat_interleave(H // G, dim=0)
    vv = v.repeat_interleave(H // G, dim=0)
    scale = case.scale if case.scale is not None else D ** -0.5
    s = torch.einsum("hid,hjd->hij", q, kk) * scale
    if case.softcap is not None:
        s = case.softcap * torch.tanh(s / case.softcap)
    if "alibi" in ex:
        shift = Tk - Tq if case.corner == "bottom_right" else 0
        dist = (torch.arange(Tq)[:, None] + shift - torch.arange(Tk)[None, :]).abs()
        s = s - ex["alibi"].double()[:, None, None] * dist
    s = s.masked_fill(~visible_mask(case, Tq, Tk), float("-inf"))
    if "sinks" in ex:
        s = torch.cat([s, ex["sinks"].double()[:, None, None].expand(H, Tq, 1)], dim=-1)
        vv = torch.cat([vv, vv.new_zeros(H, 1, D)], dim=1)
    if s.shape[-1] == 0:
        return q.new_zeros(H, Tq, D), q.new_full((H, Tq), float("-inf"))
    top = s.amax(dim=-1, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weights = torch.exp(s - top)
    total = weights.sum(dim=-1, keepdim=True)
    nonzero = total > 0
    total_safe = torch.where(nonzero, total, torch.ones_like(total))
    lse = torch.where(nonzero, top + torch.log(total_safe), torch.full_like(top, float("-inf")))
    return (weights / total_safe) @ vv, lse[..., 0]


def empty_rows(case: Case, Tq: int, Tk: int) -> Tensor:
    """(Tq,) rows that see no key (the sink does not count: it has no value)."""
    return ~visible_mask(case, Tq, Tk).any(dim=1)


# -- running a subject

class Run:
    """One call of the subject on packed inputs, with its outputs read back per sequence."""

    def __init__(self, case: Case, qs: list[Tensor], ks: list[Tensor], vs: list[Tensor],
                 ex: dict[str, Tensor], grad: bool = False, tensors: tuple | None = None,
                 **kw_over: Any) -> None:
        self.case = case
        if tensors is None:
            tensors = (pack(case, qs), pack(case, ks), pack(case, vs))
        if grad:
            tensors = tuple(t.detach().requires_grad_(True) for t in tensors)
        self.q, self.k, self.v = tensors
        result = case.module.attention(self.q, self.k, self.v, **(keywords(case, ex) | kw_over))
        if case.module.LSE is None:
            self.o, self.lse = result, None
        else:
            assert isinstance(result, tuple) and len(result) == 2, type(result)
            self.o, self.lse = result

    def outs(self) -> list[Tensor]:
        return [o.to(torch.float64) for o in unpack(self.case, self.o, self.case.seqlens_q)]

    def lses(self) -> list[Tensor] | None:
        return None if self.lse is None else unpack_lse(self.case, self.lse)

    def grads(self, cot: list[Tensor]) -> list[list[Tensor]]:
        """dq, dk, dv per sequence for the loss sum(o * cot)."""
        loss = (self.o.to(torch.float64) * pack(self.case, cot).to(torch.float64)).sum()
        dq, dk, dv = torch.autograd.grad(loss, (self.q, self.k, self.v), allow_unused=True)
        c = self.case
        fill = [torch.zeros_like(t) if d is None else d for t, d in
                zip((self.q, self.k, self.v), (dq, dk, dv), strict=True)]
        return [[g.to(torch.float64) for g in unpack(c, d, lengths)] for d, lengths in
                zip(fill, (c.seqlens_q, c.seqlens_k, c.seqlens_k), strict=True)]


def undefined(case: Case) -> list[Tensor]:
    """Rows attnspec does not judge: empty rows of a MASKED_ROWS = 'undefined' kernel."""
    if case.module.MASKED_ROWS != "undefined":
        return [torch.zeros(t, dtype=torch.bool) for t in case.seqlens_q]
    return [empty_rows(case, tq, tk) for tq, tk in zip(case.seqlens_q, case.seqlens_k,
                                                        strict=True)]


def far(a: Tensor, b: Tensor, tol: float, skip: Tensor | None = None) -> str | None:
    """Where a and b differ beyond tol (relative to b's size); -inf must match -inf exactly."""
    if a.shape != b.shape:
        return f"shape {tuple(a.shape)} against {tuple(b.shape)}"
    if skip is not None and skip.any():
        a, b = a[:, ~skip], b[:, ~skip]
    both_inf = torch.isneginf(a) & torch.isneginf(b)
    a = torch.where(both_inf, torch.zeros_like(a), a)
    b = torch.where(both_inf, torch.zeros_like(b), b)
    if not torch.isfinite(a).all() and torch.isfinite(b).all():
        return "non-finite values where the reference has none"
    if b.numel() == 0:
        return None
    err = (a - b).abs().nan_to_num(float("inf")).max().item()
    bound = tol * (1 + b.abs().max().item())
    return None if err <= bound else f"max error {err:.3g} > {bound:.3g}"


def cotangents(case: Case) -> list[Tensor]:
    gen = torch.Generator().manual_seed(77)
    cots = [torch.randn(case.H, t, case.D, generator=gen, dtype=torch.float64)
            for t in case.seqlens_q]
    return [c.masked_fill(u[None, :, None], 0) for c, u in zip(cots, undefined(case),
                                                               strict=True)]


# -- imitations of the kernel properties: each returns None or what it saw

def oracle(case: Case) -> str | None:
    qs, ks, vs = draw(case)
    ex = extras(case)
    run = Run(case, qs, ks, vs, ex)
    lses = run.lses()
    for b, (q, k, v, skip) in enumerate(zip(qs, ks, vs, undefined(case), strict=True)):
        o_ref, lse_ref = reference(case, q, k, v, ex)
        bad = far(run.outs()[b], o_ref, case.tol(), skip)
        if bad:
            return f"o of sequence {b}: {bad}"
        if lses is not None:
            bad = far(lses[b], lse_ref, case.tol(), skip)
            if bad:
                return f"lse of sequence {b}: {bad}"
    return None


def oracle_grad(case: Case) -> str | None:
    if not case.module.BACKWARD:
        return None
    qs, ks, vs = draw(case)
    ex = extras(case)
    cot = cotangents(case)
    got = Run(case, qs, ks, vs, ex, grad=True).grads(cot)
    for b in range(case.B):
        leaves = [x.clone().requires_grad_(True) for x in (qs[b], ks[b], vs[b])]
        o_ref, _ = reference(case, *leaves, ex)
        loss = (o_ref * cot[b]).sum()
        want = (torch.autograd.grad(loss, leaves, allow_unused=True) if loss.requires_grad
                else (None, None, None))
        for name, g, w, x in zip("qkv", (got[0][b], got[1][b], got[2][b]), want, leaves,
                                 strict=True):
            w = torch.zeros_like(x) if w is None else w
            bad = far(g, w, 10 * case.tol())
            if bad:
                return f"d{name} of sequence {b}: {bad}"
    return None


def finite(case: Case) -> str | None:
    qs, ks, vs = draw(case)
    ex = extras(case)
    run = Run(case, qs, ks, vs, ex, grad=case.module.BACKWARD)
    skips = undefined(case)
    for b, o in enumerate(run.outs()):
        if not torch.isfinite(o[:, ~skips[b]]).all():
            return f"non-finite o in sequence {b}"
    if run.lse is not None and torch.isnan(run.lse).any() and not skips[0].any():
        return "NaN in the lse"
    if case.module.BACKWARD:
        for name, per in zip("qkv", run.grads(cotangents(case)), strict=True):
            for b, g in enumerate(per):
                if not torch.isfinite(g).all():
                    return f"non-finite d{name} in sequence {b}"
    return None


def width(case: Case) -> str | None:
    qs, ks, vs = draw(case)
    run = Run(case, qs, ks, vs, extras(case))
    if tuple(run.o.shape) != out_shape(case):
        return f"o shape {tuple(run.o.shape)}, declared {out_shape(case)}"
    if run.lse is not None and tuple(run.lse.shape) != lse_shape(case):
        return f"lse shape {tuple(run.lse.shape)}, declared {lse_shape(case)}"
    return None


def dtype(case: Case) -> str | None:
    qs, ks, vs = draw(case)
    run = Run(case, qs, ks, vs, extras(case))
    if type(run.o) is not torch.Tensor:
        return f"o is a {type(run.o).__name__}, not a plain torch.Tensor"
    if run.o.dtype != case.dtype or run.o.device != run.q.device:
        return f"o is {run.o.dtype} on {run.o.device}, q {case.dtype} on {run.q.device}"
    if run.lse is not None and type(run.lse) is not torch.Tensor:
        return f"lse is a {type(run.lse).__name__}"
    return None


def moved(a: list[Tensor], b: list[Tensor], tol: float) -> list[int]:
    return [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if far(x, y, tol)]


def causality(case: Case) -> str | None:
    qs, ks, vs = draw(case)
    ex = extras(case)
    base = Run(case, qs, ks, vs, ex).outs()
    for b in range(case.B):
        Tq, Tk = case.seqlens_q[b], case.seqlens_k[b]
        seen = visible_mask(case, Tq, Tk)
        for cut in sorted({1, Tk // 2, Tk - 1} - {0}):
            blind = ~seen[:, cut:].any(dim=1)  # rows that must not see keys cut..Tk-1
            blind &= ~undefined(case)[b]  # rows a MASKED_ROWS = "undefined" kernel may fill
            if not blind.any():
                continue
            k2 = [x.clone() for x in ks]
            v2 = [x.clone() for x in vs]
            k2[b][:, cut:] += 5.0
            v2[b][:, cut:] -= 7.0
            after = Run(case, qs, k2, v2, ex).outs()
            bad = far(after[b][:, blind], base[b][:, blind], case.tol())
            if bad:
                return f"sequence {b}: keys from {cut} on moved rows that must not see them: {bad}"
    return None


def batch_independence(case: Case) -> str | None:
    qs, ks, vs = draw(case)
    ex = extras(case)
    base = Run(case, qs, ks, vs, ex).outs()
    if case.B > 1:
        q2, k2, v2 = [x.clone() for x in qs], [x.clone() for x in ks], [x.clone() for x in vs]
        q2[0] = q2[0] * -1.5 + 1
        k2[0] = k2[0].flip(-2) if k2[0].numel() else k2[0]
        v2[0] = v2[0] + 2
        after = Run(case, q2, k2, v2, ex).outs()
        if moved(after[1:], base[1:], case.tol()):
            return "changing batch row 0 moved other batch rows"
    if case.H > 1:
        q2, k2, v2 = [x.clone() for x in qs], [x.clone() for x in ks], [x.clone() for x in vs]
        for x in q2:
            x[0] = -2 * x[0]
        if case.G == case.H:  # kv head 0 feeds query head 0 alone (grouped heads: gqa_grouping)
            for x, y in zip(k2, v2, strict=True):
                x[0] = x[0] * 1.5
                y[0] = y[0] - 2
        after = Run(case, q2, k2, v2, ex).outs()
        if moved([o[1:] for o in after], [o[1:] for o in base], case.tol()):
            return "changing query head 0 moved other heads"
    return None


def gqa_grouping(case: Case) -> str | None:
    qs, ks, vs = draw(case)
    ex = extras(case)
    base = Run(case, qs, ks, vs, ex).outs()
    per = case.H // case.G
    for g in range(case.G):
        k2, v2 = [x.clone() for x in ks], [x.clone() for x in vs]
        for x in k2:
            x[g] = x[g] * -1.3
        for x in v2:
            x[g] = x[g] + 3
        after = Run(case, qs, k2, v2, ex).outs()
        others = [h for h in range(case.H) if h // per != g]
        if moved([o[others] for o in after], [o[others] for o in base], case.tol()):
            return f"changing kv head {g} moved query heads outside {g * per}..{(g + 1) * per - 1}"
    return None


def window(case: Case) -> str | None:
    return oracle(case)


def masked_rows(case: Case) -> str | None:
    if case.module.MASKED_ROWS == "undefined":
        return None
    qs, ks, vs = draw(case)
    ex = extras(case)
    run = Run(case, qs, ks, vs, ex, grad=case.module.BACKWARD)
    lses = run.lses()
    for b, o in enumerate(run.outs()):
        empty = empty_rows(case, case.seqlens_q[b], case.seqlens_k[b])
        if not empty.any():
            continue
        if not torch.equal(o[:, empty], torch.zeros_like(o[:, empty])):
            return f"sequence {b}: rows that see no key are not 0: {o[:, empty].flatten()[:4]}"
        if lses is not None and "sinks" not in ex and not torch.isneginf(lses[b][:, empty]).all():
            return f"sequence {b}: rows that see no key have lse {lses[b][:, empty].flatten()[:4]}"
    if case.module.BACKWARD:
        dq = run.grads(cotangents(case))[0]
        for b, g in enumerate(dq):
            empty = empty_rows(case, case.seqlens_q[b], case.seqlens_k[b])
            if empty.any() and not torch.equal(g[:, empty], torch.zeros_like(g[:, empty])):
                return f"sequence {b}: dq of rows that see no key is not 0"
    return None


def varlen(case: Case) -> str | None:
    if case.layout != "varlen":
        return None
    qs, ks, vs = draw(case)
    ex = extras(case)
    packed = Run(case, qs, ks, vs, ex)
    outs, lses = packed.outs(), packed.lses()
    for b in range(case.B):
        alone = Case(case.module, **{**fields(case), "seqlens_q": [case.seqlens_q[b]],
                                     "seqlens_k": [case.seqlens_k[b]]})
        single = Run(alone, [qs[b]], [ks[b]], [vs[b]], ex)
        bad = far(outs[b], single.outs()[0], case.tol())
        if bad is None and lses is not None:
            bad = far(lses[b], single.lses()[0], case.tol())
        if bad:
            return f"sequence {b} packed differs from it alone: {bad}"
    return oracle(case)


def knobs(case: Case) -> str | None:
    declared = getattr(case.module, "KNOBS", {})
    qs, ks, vs = draw(case)
    ex = extras(case)
    base = Run(case, qs, ks, vs, ex)
    for name, values in declared.items():
        for value in values:
            other = Run(case, qs, ks, vs, ex, **{name: value})
            for a, b in zip(other.outs(), base.outs(), strict=True):
                bad = far(a, b, case.tol())
                if bad:
                    return f"{name}={value} changed o: {bad}"
            if base.lse is not None:
                for a, b in zip(other.lses(), base.lses(), strict=True):
                    bad = far(a, b, case.tol())
                    if bad:
                        return f"{name}={value} changed lse: {bad}"
    return None


def lse_grad(case: Case) -> str | None:
    if case.module.LSE is None or not case.module.BACKWARD:
        return None
    qs, ks, vs = draw(case)
    run = Run(case, qs, ks, vs, extras(case), grad=True)
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(run.lse.shape, generator=gen, dtype=torch.float64)
    lse = run.lse.to(torch.float64)
    loss = (torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)) * w).sum()
    (dv,) = torch.autograd.grad(loss, (run.v,), allow_unused=True)
    if dv is not None and dv.abs().max().item() != 0:
        return f"a loss on the lse alone gives |dv| up to {dv.abs().max().item():.3g}"
    return None


def sensitivity(case: Case) -> str | None:
    qs, ks, vs = draw(case)
    ex = extras(case)
    base = Run(case, qs, ks, vs, ex).outs()
    gen = torch.Generator().manual_seed(11)
    for name in ("q", "k"):
        q2 = [x + torch.randn(x.shape, generator=gen, dtype=x.dtype) * case.mag for x in qs]
        k2 = [x + torch.randn(x.shape, generator=gen, dtype=x.dtype) * case.mag for x in ks]
        after = Run(case, q2 if name == "q" else qs, k2 if name == "k" else ks, vs, ex).outs()
        want = [reference(case, q, k, v, ex)[0] for q, k, v in
                zip(q2 if name == "q" else qs, k2 if name == "k" else ks, vs, strict=True)]
        ref_base = [reference(case, q, k, v, ex)[0] for q, k, v in zip(qs, ks, vs, strict=True)]
        if moved(want, ref_base, case.tol()) and not moved(after, base, case.tol()):
            return f"changing {name} moved nothing"
    return None


def determinism(case: Case) -> str | None:
    qs, ks, vs = draw(case)
    ex = extras(case)
    grad = case.module.BACKWARD and case.module.DETERMINISTIC
    runs = [Run(case, qs, ks, vs, ex, grad=grad) for _ in range(3)]
    for other in runs[1:]:
        if not torch.equal(other.o, runs[0].o):
            return "the forward did not repeat bit for bit"
        if other.lse is not None and not torch.equal(other.lse, runs[0].lse):
            return "the lse did not repeat bit for bit"
    if grad:
        cot = cotangents(case)
        first = runs[0].grads(cot)
        for other in runs[1:]:
            for a, b in zip(other.grads(cot), first, strict=True):
                if not all(torch.equal(x, y) for x, y in zip(a, b, strict=True)):
                    return "the backward did not repeat bit for bit"
    return None


def input_unchanged(case: Case) -> str | None:
    qs, ks, vs = draw(case)
    tensors = (pack(case, qs), pack(case, ks), pack(case, vs))
    before = [t.clone() for t in tensors]
    versions = [t._version for t in tensors]
    Run(case, qs, ks, vs, extras(case), tensors=tensors)
    for name, t, b, was in zip("qkv", tensors, before, versions, strict=True):
        if not torch.equal(t, b):
            return f"{name} was changed in place"
        if t._version != was:
            return f"{name} was written in place during the call (its version moved)"
    return None


def expected_outs(case: Case, qs: list[Tensor], ks: list[Tensor], vs: list[Tensor],
                  ex: dict[str, Tensor]) -> list[Tensor]:
    return [reference(case, q, k, v, ex)[0] for q, k, v in zip(qs, ks, vs, strict=True)]


def check_outs(case: Case, run: Run, want: list[Tensor], what: str) -> str | None:
    for b, (o, w, skip) in enumerate(zip(run.outs(), want, undefined(case), strict=True)):
        bad = far(o, w, case.tol(), skip)
        if bad:
            return f"{what}: sequence {b}: {bad}"
    return None


def fresh_results(case: Case) -> str | None:
    qs, ks, vs = draw(case)
    ex = extras(case)
    tensors = (pack(case, qs), pack(case, ks), pack(case, vs))
    first = Run(case, qs, ks, vs, ex, tensors=tensors)
    for name, t in zip("qkv", tensors, strict=True):
        for out in (first.o, first.lse):
            if out is not None and out.numel() and t.numel() and (
                    out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()):
                return f"the output shares {name}'s storage"
    q2, k2, v2 = draw(case, seed=case.seed + 1)
    # new values written into the same tensors through .data, which leaves _version as it was
    # (a cache keyed by address, or by address and version, returns the old ones)
    for t, new in zip(tensors, (pack(case, q2), pack(case, k2), pack(case, v2)), strict=True):
        t.data.copy_(new)
    second = Run(case, q2, k2, v2, ex, tensors=tensors)
    for out, before in ((second.o, first.o), (second.lse, first.lse)):
        if out is not None and before is not None and out.numel() and (
                out.untyped_storage().data_ptr() == before.untyped_storage().data_ptr()):
            return "the second call's output is in the first's memory, which is still held"
    bad = check_outs(case, second, expected_outs(case, q2, k2, v2, ex),
                     "new values at the same address")
    if bad:
        return bad
    # new values in new tensors of the same shape (a cache keyed by shape), as views into
    # wider storage, the last dimension dense (a kernel that reads memory as if contiguous)
    q3, k3, v3 = draw(case, seed=case.seed + 2)
    wide = []
    for t in (pack(case, q3), pack(case, k3), pack(case, v3)):
        room = torch.full((*t.shape[:-1], t.shape[-1] + 3), float("nan"), dtype=t.dtype)
        wide.append(room[..., 1:1 + t.shape[-1]].copy_(t))
    bad = check_outs(case, Run(case, q3, k3, v3, ex, tensors=tuple(wide)),
                     expected_outs(case, q3, k3, v3, ex), "new values, same shape, strided")
    if bad:
        return bad
    # only the last query and key of the last sequence change (a checksum of the first elements)
    q4, k4, v4 = [x.clone() for x in q3], [x.clone() for x in k3], [x.clone() for x in v3]
    if q4[-1].shape[1] and k4[-1].shape[1]:
        q4[-1][:, -1] *= -1
        k4[-1][:, -1] += 2.0
        v4[-1][:, -1] -= 3.0
    tensors4 = None
    if case.layout != "varlen":  # k one row for all, sent as an expand (stride 0 along B)
        k4 = [k4[0].clone() for _ in k4]
        packed = pack(case, k4)
        tensors4 = (pack(case, q4), packed[:1].expand(packed.shape), pack(case, v4))
    # the first inputs again, from a second thread at the same time (scratch shared by calls)
    q1, k1, v1 = draw(case)
    seen: dict[str, Any] = {}
    gate = threading.Barrier(2)

    def alongside() -> None:
        gate.wait()
        seen["run"] = Run(case, q1, k1, v1, ex)

    thread = threading.Thread(target=alongside)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        thread.start()
        gate.wait()
        fourth = Run(case, q4, k4, v4, ex, tensors=tensors4)
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    bad = check_outs(case, fourth, expected_outs(case, q4, k4, v4, ex),
                     "the last positions changed, k of stride 0 along B")
    if bad:
        return bad
    bad = check_outs(case, seen["run"], expected_outs(case, q1, k1, v1, ex),
                     "the first inputs again from a second thread, at the same time")
    if bad:
        return bad
    # poisoned memory: freed NaN blocks of the output's size, then a fresh call
    size = max(1, math.prod(out_shape(case)))
    poison = [torch.full((size,), float("nan"), dtype=case.dtype) for _ in range(8)]
    del poison

    q5, k5, v5 = draw(case, seed=case.seed + 3)
    return check_outs(case, Run(case, q5, k5, v5, ex), expected_outs(case, q5, k5, v5, ex),
                      "after poisoned memory")


def cache_call(case: Case, paged: bool) -> str | None:
    """attention_with_cache on caches of 0, 5, 3, 8 tokens (cycled over the rows) with 3 new
    tokens and 2 queries: the caches after the call hold the new tokens (bitwise, NaN elsewhere
    left NaN) and o is the float64 reference's at the bottom right over all their keys."""
    module = case.module
    call = getattr(module, "attention_with_cache", None)
    page = getattr(module, "PAGED", None)
    if call is None or (paged and page is None) or case.layout == "varlen":
        return None
    page = page if paged else None
    lens = [(0, 5, 3, 8)[b % 4] for b in range(case.B)]
    new, Tq = 3, 2
    gen = torch.Generator().manual_seed(case.seed + 17)

    def one(heads: int, T: int) -> Tensor:
        x = torch.randn(heads, T, case.D, generator=gen, dtype=torch.float64) * case.mag
        return x.to(case.dtype).to(torch.float64)

    qs = [one(case.H, Tq) for _ in lens]
    ks = [one(case.G, n + new) for n in lens]
    vs = [one(case.G, n + new) for n in lens]
    cap = max(lens) + new + 1
    if page is not None:
        cap = -(-cap // page) * page
    table = None
    if page is not None:
        pages = cap // page
        table = torch.randperm(case.B * pages + 2, generator=gen)[:case.B * pages].view(
            case.B, pages)

    def caches(parts: list[Tensor], upto: list[int]) -> Tensor:
        """(B, G, cap, D) NaN but each row's first upto[b] tokens; paged: (N, G, page, D)."""
        full = torch.full((case.B, case.G, cap, case.D), float("nan"), dtype=torch.float64)
        for b, (t, n) in enumerate(zip(parts, upto, strict=True)):
            full[b, :, :n] = t[:, :n]
        if table is None:
            return full
        assert page is not None
        phys = torch.full((case.B * pages + 2, case.G, page, case.D), float("nan"),
                          dtype=torch.float64)
        for b in range(case.B):
            for m in range(pages):
                phys[int(table[b, m])] = full[b, :, m * page:(m + 1) * page]
        return phys

    def laid(x: Tensor) -> Tensor:
        return (x.transpose(1, 2) if case.layout == "bshd" else x).to(case.dtype).contiguous()

    kc, vc = laid(caches(ks, lens)), laid(caches(vs, lens))
    k_new = laid(torch.stack([t[:, n:] for t, n in zip(ks, lens, strict=True)]))
    v_new = laid(torch.stack([t[:, n:] for t, n in zip(vs, lens, strict=True)]))
    kw = {"causal": case.causal, **({"scale": case.scale} if case.scale is not None else {}),
          **({"softcap": case.softcap} if case.softcap is not None else {})}
    out = call(laid(torch.stack(qs)), kc, vc, cache_seqlens=torch.tensor(lens, dtype=torch.int32),
               causal=kw.pop("causal"), block_table=None if table is None else table.int(),
               k=k_new, v=v_new, **kw)
    o = out[0] if module.LSE else out
    after = [n + new for n in lens]
    for name, got, parts in (("k_cache", kc, ks), ("v_cache", vc, vs)):
        want = laid(caches(parts, after))
        if not bool(((got == want) | (got.isnan() & want.isnan())).all()):
            return f"{name} after the call is not the cache with the new tokens appended"
    corner = Case(module, **{**fields(case), "window": None, "alibi": False, "sinks": False})
    corner.corner = "bottom_right"
    outs = unpack(case, o.to(torch.float64), [Tq] * case.B)
    for b, (q, k, v) in enumerate(zip(qs, ks, vs, strict=True)):
        bad = far(outs[b], reference(corner, q, k, v, {})[0], case.tol())
        if bad:
            return f"o of row {b} (cache_seqlens {lens[b]}, {new} appended): {bad}"
    return None


def paged(case: Case) -> str | None:
    return cache_call(case, paged=True)


def kv_append(case: Case) -> str | None:
    return cache_call(case, paged=False)


IMITATIONS: dict[str, Callable[[Case], str | None]] = {
    "width": width, "dtype": dtype, "causality": causality,
    "batch_independence": batch_independence, "determinism": determinism,
    "input_unchanged": input_unchanged, "finite": finite, "oracle": oracle,
    "oracle_grad": oracle_grad, "window": window, "gqa_grouping": gqa_grouping,
    "masked_rows": masked_rows, "varlen": varlen, "paged": paged, "kv_append": kv_append,
    "knobs": knobs, "lse_grad": lse_grad,
    "sensitivity": sensitivity, "fresh_results": fresh_results}


def flagged(prop: str, case: Case) -> str | None:
    try:
        return IMITATIONS[prop](case)
    except Exception as error:  # a crash is what the property would report
        return f"raised {type(error).__name__}: {error}"


# -- the cases a correct kernel must pass

def good_cases(module: ModuleType) -> list[Case]:
    features = set(module.FEATURES)
    has = features.__contains__
    varlen_lengths = {"seqlens_q": [3, 0, 6, 2], "seqlens_k": [5, 2, 6, 0]}
    cases: list[dict[str, Any]] = [
        {"G": 4 if not has("gqa") else 2, "Tq": 9, "Tk": 9},
        {"G": 4, "Tq": 6, "Tk": 6, "D": 5, "B": 3, "dtype": torch.float64},
    ]
    if torch.bfloat16 in getattr(module, "DTYPES", (torch.bfloat16,)):
        cases.append({"G": 4, "Tq": 8, "Tk": 8, "D": 6, "dtype": torch.bfloat16})
    if has("cross"):
        cases += [{"Tq": 5, "Tk": 11, "D": 7}, {"Tq": 7, "Tk": 4, "D": 3}]
        cases.append({"Tq": 3, "Tk": 0})  # no keys at all: o 0, lse -inf (FA4's seqlen_k == 0)
        if has("sinks"):  # a row that sees no key, with a sink: o 0, lse the sink's logit
            cases.append({"Tq": 6, "Tk": 2, "sinks": True})
    cases.append({"Tq": 1, "Tk": 1, "G": BASE["H"]})  # one key: the shortcut that aliases v
    cases.append({"Tq": 6, "Tk": 6, "mag": 10.0})  # logits past 88: exp without the max overflows
    if has("noncausal"):
        cases.append({"causal": False, "Tq": 6 if not has("cross") else 10, "Tk": 6 if not
                      has("cross") else 7})
    rich: dict[str, Any] = {"Tq": 7, "Tk": 12 if has("cross") else 7}
    if has("scale"):
        rich["scale"] = 0.21
    if has("softcap"):
        rich["softcap"] = 4.0
    if has("alibi"):
        rich["alibi"] = True
    if has("sinks"):
        rich["sinks"] = True
    cases.append(rich)
    if getattr(module, "WINDOW", None):
        cases.append({"window": (3, 0), "Tq": 8, "Tk": 10 if has("cross") else 8})
        if has("noncausal") and module.WINDOW != "left":
            cases.append({"causal": False, "window": (2, 1), "Tq": 8, "Tk": 8})
            cases.append({"causal": False, "window": (None, 2), "Tq": 8, "Tk": 8})
    if module.LAYOUT == "varlen":
        cases = [{**c, **varlen_lengths} for c in cases] + [{**varlen_lengths, "B": 4}]
    for c in cases:
        if not has("gqa"):
            c["G"] = c.get("H", BASE["H"])
    return [Case(module, **c) for c in cases]


@pytest.mark.parametrize("path", GOOD, ids=[p.stem for p in GOOD])
def test_good_kernel_passes_every_imitation(path: Path) -> None:
    module = load(path)
    assert module.PROTOCOL == "kernel" and module.EXPECTED == frozenset()
    failures = []
    for case in good_cases(module):
        assert features_used(case) <= set(module.FEATURES), describe(case)
        for prop in PROPERTY_IDS:
            seen = flagged(prop, case)
            if seen:
                failures.append(f"{prop} on {describe(case)}: {seen}")
    assert not failures, "\n".join(failures)


def describe(case: Case) -> str:
    keys = ("B", "H", "G", "Tq", "Tk", "D", "causal", "window", "scale", "softcap", "alibi",
            "sinks", "seqlens_q", "seqlens_k", "knobs")
    return ", ".join(f"{k}={getattr(case, k)}" for k in keys) + f", {case.dtype}"


def test_catalogue_is_large_enough() -> None:
    assert len(BROKEN) >= 22, [p.name for p in BROKEN]
    assert len(GOOD) >= 5, [p.name for p in GOOD]


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_broken_kernel_shows_its_bug(path: Path) -> None:
    module = load(path)
    expected = module.EXPECTED
    assert module.PROTOCOL == "kernel"
    assert isinstance(expected, frozenset) and expected and expected <= set(PROPERTY_IDS), expected
    assert module.__doc__ and len(module.__doc__) > 80, "the docstring names the bug and its source"
    trigger = getattr(module, "TRIGGER", {})
    case = Case(module, **trigger)
    assert features_used(case) <= set(module.FEATURES), "TRIGGER uses an undeclared feature"
    missed = [prop for prop in sorted(expected) if not flagged(prop, case)]
    assert not missed, f"{path.stem}: on {describe(case)} the imitations of {missed} saw nothing"
    # the control: the correct kernel under the same declarations passes the same imitations
    control = Case(correct_twin(module), **trigger)
    false_alarms = {prop: flagged(prop, control) for prop in sorted(expected)}
    assert not any(false_alarms.values()), f"{path.stem}'s correct twin: {false_alarms}"


def features_used(case: Case) -> set[str]:
    used = {"gqa": case.G != case.H, "scale": case.scale is not None,
            "noncausal": not case.causal, "softcap": case.softcap is not None,
            "alibi": case.alibi, "sinks": case.sinks,
            "cross": any(a != b for a, b in zip(case.seqlens_q, case.seqlens_k, strict=True))}
    return {name for name, yes in used.items() if yes}


def test_rounding_double_rounds_by_position(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its rows differ in the last bits between calls of different shapes, within rounding."""
    module = load(KERNELS / "good" / "rounding_by_position.py")
    case = Case(module, B=3, Tq=8, Tk=8, G=4)
    qs, ks, vs = draw(case)
    together = Run(case, qs, ks, vs, {}).outs()
    alone = [Run(Case(module, B=1, Tq=8, Tk=8, G=4), [q], [k], [v], {}).outs()[0]
             for q, k, v in zip(qs, ks, vs, strict=True)]
    assert any(not torch.equal(a, b) for a, b in zip(together, alone, strict=True))
    assert not moved(together, alone, case.tol())
    # the same values at an address off the 64-byte grid: other last bits, same attention
    q, k, v = pack(case, qs), pack(case, ks), pack(case, vs)
    shifted = torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape).copy_(q)
    assert shifted.data_ptr() % 64 != 0
    aligned = module.attention(q, k, v, causal=True)[0]
    unaligned = module.attention(shifted, k, v, causal=True)[0]
    assert not torch.equal(aligned, unaligned)
    # the double's own rounding: one ulp up on every output of the unaligned call, exactly
    monkeypatch.setattr(module.ChunkedByPosition, "output", module.Kernel.output)
    plain = module.attention(shifted, k, v, causal=True)[0]
    assert torch.equal(unaligned, (plain.view(torch.int32) + 1).view(torch.float32))
    # and torch's: on AMD EPYC (AVX-512) its matmul also rounds by q's alignment, 6e-6 off
    # (300 ulp of a value where a row's terms cancel, 2 ulp of the largest): a few ulp of scale
    assert far(aligned, unaligned, 16 * torch.finfo(torch.float32).eps) is None


def correct_twin(module: ModuleType) -> ModuleType:
    """A module with the same declarations whose attention is the shared correct kernel."""
    kernel = module.attention.__self__
    common = sys.modules["attnspec_kernel_catalogue_common"]
    cls = common.Blockwise if isinstance(kernel, common.Blockwise) else common.Kernel
    twin = ModuleType(f"{module.__name__}_twin")
    twin.__dict__.update({k: v for k, v in vars(module).items() if k.isupper()})
    if hasattr(module, "attention_with_cache"):
        twin.attention, twin.attention_with_cache, twin.supports = common.bind_cache(
            cls, vars(twin))
    else:
        twin.attention, twin.supports = common.bind(cls, vars(twin))
    return twin


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_good_battery_rejects_broken_kernel(path: Path) -> None:
    """The battery the correct kernels pass is not too weak: it rejects every broken one."""
    module = load(path)
    # determinism first: the engine's first call of a fresh worker is made twice, as it is
    first = ("determinism", *(p for p in PROPERTY_IDS if p != "determinism"))
    for case in good_cases(module):
        for prop in first:
            if flagged(prop, case):
                return
    pytest.fail(f"{path.stem} passed every imitation on every case a correct kernel must pass")
