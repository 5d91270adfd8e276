"""Correct attention kernels in plain torch, following attnspec's kernel protocol (not a subject).

`Kernel` is the dense formulation with one overridable method per decision a kernel makes: layout,
varlen sequence boundaries, corner offset, window edges, visibility mask, head mapping, logits
(scale and softcap), ALiBi distance, compute dtype, softmax, LSE base and layout, output. Each
broken kernel in broken/ overrides only its bug. `Blockwise` computes the same contract the way
FlashAttention does: query and key tiles (the `block_q` and `block_k` knobs), keys zero-padded to
a whole tile and masked, an online softmax per key tile, and split-KV (`num_splits`) merged by LSE.

A subject declares its conventions as module constants (PROTOCOL, LAYOUT, CAUSAL, WINDOW, LSE,
LSE_LAYOUT, MASKED_ROWS, KNOBS, ...) and exports `attention, supports = bind(MyKernel, globals())`,
so the kernel behaves as declared unless its class overrides a hook. Subjects reach this module
through their sibling `_kernel.py`; they import nothing but torch and siblings.

Semantics (kernel_protocol.md): s = scale q k^T, query head h reads kv head h // (H / G); softcap
(after the scale); ALiBi (-slope_h |i' - j|); -inf where hidden; softmax over the visible keys and
the sink; lse natural log of the same sum. A row with nothing to attend to: o = 0, lse = -inf.
With a sink, such a row's softmax is all sink: o = 0 and lse = the sink's logit (see report).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

PROTOCOL = "kernel"
ALL_FEATURES = ("gqa", "scale", "noncausal", "cross", "softcap", "alibi", "sinks")
LAYOUTS = ("bhsd", "bshd", "varlen")
CORNERS = ("top_left", "bottom_right")
WINDOWS = (None, "pair", "pair_none", "left")
LSE_BASES = (None, "natural", "base2")
LSE_LAYOUTS = {"bhsd": ("bhs", "bsh"), "bshd": ("bhs", "bsh"), "varlen": ("hs", "sh")}
NEG_INF = float("-inf")


def fail(doing: str, values: str, why: str) -> None:
    """Raise the three-part error: what was being done, with which values, and why it cannot."""
    raise ValueError(f"{doing}: {values}: {why}")


@dataclass(frozen=True)
class Problem:
    """One call's semantics, decoded from its keywords; None edges mean unbounded."""

    causal: bool
    scale: float
    left: int | None
    right: int | None
    softcap: float | None
    alibi: Tensor | None
    sinks: Tensor | None
    knobs: Mapping[str, Any] = field(default_factory=dict)


class Kernel:
    """Dense, correct attention per the protocol, as declared by the constructor's arguments."""

    KNOB_DEFAULTS: Mapping[str, Any] = {}

    def __init__(self, *, layout: str = "bhsd", causal: str = "bottom_right",
                 window: str | None = None, lse: str | None = None, lse_layout: str | None = None,
                 masked_rows: str = "zero", knobs: Mapping[str, Any] | None = None) -> None:
        for name, value, allowed in (("LAYOUT", layout, LAYOUTS), ("CAUSAL", causal, CORNERS),
                                     ("WINDOW", window, WINDOWS), ("LSE", lse, LSE_BASES),
                                     ("MASKED_ROWS", masked_rows, ("zero", "undefined"))):
            if value not in allowed:
                fail("declaring a kernel", f"{name}={value!r}", f"it must be one of {allowed}")
        lse_layout = lse_layout or LSE_LAYOUTS[layout][0]
        if lse_layout not in LSE_LAYOUTS[layout]:
            fail("declaring a kernel", f"LSE_LAYOUT={lse_layout!r} with LAYOUT={layout!r}",
                 f"that layout's LSE is one of {LSE_LAYOUTS[layout]}")
        self.layout, self.corner, self.window = layout, causal, window
        self.lse, self.lse_layout, self.masked_rows = lse, lse_layout, masked_rows
        self.knobs = dict(knobs or {})
        unknown = set(self.knobs) - set(self.KNOB_DEFAULTS)
        if unknown:
            fail("declaring a kernel", f"KNOBS {sorted(unknown)}",
                 f"{type(self).__name__} takes only {sorted(self.KNOB_DEFAULTS)}")

    # -- the protocol's entry points ------------------------------------------------------------

    def supports(self, case: Mapping[str, Any]) -> bool:
        return True

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool,
                  scale: float | None = None, window: Any = None, softcap: float | None = None,
                  alibi_slopes: Tensor | None = None, sinks: Tensor | None = None,
                  cu_seqlens_q: Tensor | None = None, cu_seqlens_k: Tensor | None = None,
                  max_seqlen_q: int | None = None, max_seqlen_k: int | None = None,
                  **knobs: Any) -> Tensor | tuple[Tensor, Tensor]:
        self.check(q, k, v, cu_seqlens_q, cu_seqlens_k)
        for name in knobs:
            if name not in self.knobs:
                fail("calling attention", f"keyword {name}={knobs[name]!r}",
                     f"this kernel's knobs are {sorted(self.knobs)}")
        left, right = self.window_edges(window, causal)
        problem = Problem(causal=causal, scale=self.scale_of(scale, q.shape[-1]), left=left,
                          right=right, softcap=softcap if softcap else None, alibi=alibi_slopes,
                          sinks=sinks, knobs={**self.KNOB_DEFAULTS, **knobs})
        if self.layout == "varlen":
            assert cu_seqlens_q is not None and cu_seqlens_k is not None
            o, lse = self.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, problem)
        else:
            o, lse = self.core(self.to_bhsd(q), self.to_bhsd(k), self.to_bhsd(v), problem)
            o = self.from_bhsd(o)
        o = self.output(o, q)
        if self.lse is None:
            return o
        return o, self.lse_out(lse)

    def attention_with_cache(self, q: Tensor, k_cache: Tensor, v_cache: Tensor, *,
                             cache_seqlens: Tensor, causal: bool,
                             block_table: Tensor | None = None, k: Tensor | None = None,
                             v: Tensor | None = None, scale: float | None = None,
                             softcap: float | None = None,
                             **knobs: Any) -> Tensor | tuple[Tensor, Tensor]:
        """flash_attn_with_kvcache: k and v appended in place at cache_seqlens, then q attends
        over each row's cache_seqlens + Tnew keys, query i at cache_seqlens + Tnew - Tq + i."""
        if self.layout == "varlen":
            fail("calling attention_with_cache", "LAYOUT 'varlen'", "the cache is bhsd or bshd")
        B = q.shape[0]
        if cache_seqlens.shape != (B,):
            fail("calling attention_with_cache", f"cache_seqlens {tuple(cache_seqlens.shape)}",
                 f"it must be ({B},), one length per batch row")
        if (k is None) != (v is None):
            fail("calling attention_with_cache", "k or v alone", "append both or neither")
        kc, vc = self.to_bhsd(k_cache), self.to_bhsd(v_cache)  # views: writes land in place
        k_new = None if k is None else self.to_bhsd(k)
        v_new = None if v is None else self.to_bhsd(v)
        new = 0 if k_new is None else k_new.shape[2]
        problem = Problem(causal=causal, scale=self.scale_of(scale, q.shape[-1]), left=None,
                          right=None, softcap=softcap if softcap else None, alibi=None,
                          sinks=None, knobs={**self.KNOB_DEFAULTS, **knobs})
        dense = copy.copy(self)
        dense.corner = self.cache_corner()
        qs = self.to_bhsd(q)
        outs, lses = [], []
        with torch.no_grad():
            for b, n in enumerate(int(t) for t in cache_seqlens.tolist()):
                if k_new is not None and v_new is not None:
                    self.append(kc, k_new[b], b, n, block_table)
                    self.append(vc, v_new[b], b, n, block_table)
                keys = self.cached(kc, k_new, b, n, new, block_table)
                values = self.cached(vc, v_new, b, n, new, block_table)
                o, lse = dense.core(qs[b:b + 1], keys, values, problem)
                outs.append(o)
                lses.append(lse)
        o = self.output(self.from_bhsd(torch.cat(outs)), q)
        return o if self.lse is None else (o, self.lse_out(torch.cat(lses)))

    # -- the cache, in (B or pages, G, T, D) views ----------------------------------------------

    def cache_corner(self) -> str:
        """The cache call's corner: the bottom right, whatever CAUSAL declares for attention."""
        return "bottom_right"

    def physical_page(self, table: Tensor, b: int, m: Tensor) -> Tensor:
        """The physical pages row b's logical pages m live in."""
        return table[b].long()[m]

    def slots(self, cache: Tensor, b: int, positions: Tensor, table: Tensor | None,
              ) -> tuple[Any, Any]:
        """(first index, slot index) of row b's logical positions in the (N, G, T, D) view."""
        if table is None:
            return b, positions
        page = cache.shape[2]
        return self.physical_page(table, b, positions // page), positions % page

    def append_at(self, n: int) -> int:
        """Where row b's new tokens start: cache_seqlens[b]."""
        return n

    def append(self, cache: Tensor, new: Tensor, b: int, n: int, table: Tensor | None) -> None:
        """Write new (G, Tnew, D) into row b's cache at positions append_at(n) .."""
        start = self.append_at(n)
        positions = torch.arange(start, start + new.shape[1], device=cache.device)
        first, slot = self.slots(cache, b, positions, table)
        if table is None:
            cache[b][:, slot] = new.to(cache.dtype)
        else:
            cache[first, :, slot] = new.transpose(0, 1).to(cache.dtype)

    def cached(self, cache: Tensor, new: Tensor | None, b: int, n: int, count: int,
               table: Tensor | None) -> Tensor:
        """Row b's n + count keys, read back from the cache: (1, G, n + count, D)."""
        positions = torch.arange(n + count, device=cache.device)
        first, slot = self.slots(cache, b, positions, table)
        if table is None:
            return cache[b:b + 1, :, slot]
        return cache[first, :, slot].transpose(0, 1).unsqueeze(0)

    # -- inputs ----------------------------------------------------------------------------------

    def check(self, q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor | None,
              cu_k: Tensor | None) -> None:
        dims = 3 if self.layout == "varlen" else 4
        shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        if not (q.dim() == k.dim() == v.dim() == dims):
            fail("calling attention", shapes, f"LAYOUT {self.layout!r} takes {dims}-dim tensors")
        if k.shape != v.shape or q.shape[-1] != k.shape[-1]:
            fail("calling attention", shapes, "k and v must match, and share q's head dim D")
        head_axis = 2 if self.layout == "bshd" else 1
        H, G = q.shape[head_axis], k.shape[head_axis]
        if G < 1 or H % G:
            fail("calling attention", f"{H} query heads, {G} kv heads", "G must divide H")
        if self.layout != "varlen" and q.shape[0] != k.shape[0]:
            fail("calling attention", shapes, "q and k must have the same batch size")
        if q.dtype != k.dtype or q.dtype != v.dtype:
            fail("calling attention", f"dtypes {q.dtype}, {k.dtype}, {v.dtype}", "they must match")
        if self.layout == "varlen":
            if cu_q is None or cu_k is None:
                fail("calling attention", "cu_seqlens_q or cu_seqlens_k missing",
                     "LAYOUT 'varlen' needs both")
            assert cu_q is not None and cu_k is not None
            if cu_q.shape != cu_k.shape or cu_q.dim() != 1 or cu_q.numel() < 1:
                fail("calling attention", f"cu_seqlens {tuple(cu_q.shape)}, {tuple(cu_k.shape)}",
                     "both must be (B+1,)")
            for name, cu, total in (("q", cu_q, q.shape[0]), ("k", cu_k, k.shape[0])):
                bounds = cu.tolist()
                if bounds[0] != 0 or bounds[-1] != total or any(
                        b > a for a, b in zip(bounds[1:], bounds[:-1], strict=True)):
                    fail("calling attention", f"cu_seqlens_{name}={bounds} for {total} tokens",
                         "it must rise from 0 to the token count")

    def scale_of(self, scale: float | None, D: int) -> float:
        return 1.0 / math.sqrt(D) if scale is None else float(scale)

    def window_edges(self, window: Any, causal: bool) -> tuple[int | None, int | None]:
        """The declared window encoding, decoded to inclusive (left, right); None is unbounded."""
        if window is None or self.window is None:
            return None, None
        if self.window == "pair":
            left, right = window
            return (None if left < 0 else int(left)), (None if right < 0 else int(right))
        if self.window == "pair_none":
            left, right = window
            return (None if left is None else int(left)), (None if right is None else int(right))
        # "left" (FlashInfer window_left): -1 is unbounded; the right edge is the causal one
        return (None if window < 0 else int(window)), None

    # -- layouts ---------------------------------------------------------------------------------

    def to_bhsd(self, x: Tensor) -> Tensor:
        return x.transpose(1, 2) if self.layout == "bshd" else x

    def from_bhsd(self, o: Tensor) -> Tensor:
        return o.transpose(1, 2) if self.layout == "bshd" else o

    def sequences(self, cu_q: Tensor, cu_k: Tensor) -> list[tuple[int, int, int, int]]:
        """(q start, q end, k start, k end) of each packed sequence."""
        bq, bk = cu_q.tolist(), cu_k.tolist()
        return [(bq[b], bq[b + 1], bk[b], bk[b + 1]) for b in range(len(bq) - 1)]

    def varlen(self, q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor, cu_k: Tensor,
               p: Problem) -> tuple[Tensor, Tensor]:
        """Each sequence alone as a batch of one (T, H, D) -> (1, H, T, D); corner per sequence."""
        outs, lses = [], []
        for qs, qe, ks, ke in self.sequences(cu_q, cu_k):
            def one(x: Tensor, a: int, b: int) -> Tensor:
                return x[a:b].transpose(0, 1).unsqueeze(0)

            o, lse = self.core(one(q, qs, qe), one(k, ks, ke), one(v, ks, ke), p)
            outs.append(o[0].transpose(0, 1))
            lses.append(lse[0])
        if not outs:
            return q.new_zeros(q.shape), q.new_zeros(q.shape[1], 0)
        return torch.cat(outs, 0), torch.cat(lses, 1)

    # -- the math, in BHSD: q (B, H, Tq, D), k and v (B, G, Tk, D) ---------------------------------

    def compute_dtype(self, dtype: torch.dtype) -> torch.dtype:
        return torch.promote_types(dtype, torch.float32)

    def kv_heads(self, H: int, G: int, device: torch.device) -> Tensor:
        """The kv head each query head reads: h // (H / G)."""
        return torch.arange(H, device=device) // (H // G)

    def offset(self, Tq: int, Tk: int) -> int:
        """i' - i: where the causal diagonal sits."""
        return Tk - Tq if self.corner == "bottom_right" else 0

    def visible(self, i: Tensor, j: Tensor, Tq: int, Tk: int, p: Problem) -> Tensor:
        """Query i sees key j: (len(i), len(j)) bool, from global indices."""
        ip = (i + self.offset(Tq, Tk))[:, None]
        j = j[None, :]
        seen = torch.ones(ip.shape[0], j.shape[1], dtype=torch.bool, device=i.device)
        if p.causal:
            seen &= j <= ip
        if p.left is not None:
            seen &= j >= ip - p.left
        if p.right is not None:
            seen &= j <= ip + p.right
        return seen

    def logits(self, q: Tensor, k: Tensor, p: Problem) -> Tensor:
        s = (q @ k.transpose(-2, -1)) * p.scale
        if p.softcap is not None:
            s = p.softcap * torch.tanh(s / p.softcap)
        return s

    def alibi_distance(self, i: Tensor, j: Tensor, Tq: int, Tk: int) -> Tensor:
        return ((i + self.offset(Tq, Tk))[:, None] - j[None, :]).abs()

    def alibi(self, s: Tensor, i: Tensor, j: Tensor, Tq: int, Tk: int, p: Problem) -> Tensor:
        if p.alibi is None:
            return s
        slopes = p.alibi.to(s.dtype)[:, None, None]
        return s - slopes * self.alibi_distance(i, j, Tq, Tk).to(s.dtype)

    def hide(self, s: Tensor, seen: Tensor) -> Tensor:
        return s.masked_fill(~seen, NEG_INF)

    def prepare(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Upcast, and give every query head its kv head."""
        acc = self.compute_dtype(q.dtype)
        heads = self.kv_heads(q.shape[1], k.shape[1], q.device)
        return q.to(acc), k.to(acc).index_select(1, heads), v.to(acc).index_select(1, heads)

    def core(self, q: Tensor, k: Tensor, v: Tensor, p: Problem) -> tuple[Tensor, Tensor]:
        """o (B, H, Tq, D) in the compute dtype, lse (B, H, Tq) natural log."""
        Tq, Tk = q.shape[2], k.shape[2]
        q, k, v = self.prepare(q, k, v)
        i = torch.arange(Tq, device=q.device)
        j = torch.arange(Tk, device=q.device)
        s = self.alibi(self.logits(q, k, p), i, j, Tq, Tk, p)
        s = self.hide(s, self.visible(i, j, Tq, Tk, p))
        return self.softmax_attend(s, v, p)

    def row_max(self, s: Tensor) -> Tensor:
        if s.shape[-1] == 0:  # no keys at all (Tk = 0): nothing to subtract
            return s.new_full(s.shape[:-1] + (1,), NEG_INF)
        return s.amax(dim=-1, keepdim=True)

    def softmax_attend(self, s: Tensor, v: Tensor, p: Problem) -> tuple[Tensor, Tensor]:
        """Safe softmax: rows with nothing visible give o = 0 and lse = -inf, gradients 0."""
        m = self.row_max(s)
        sink = None
        if p.sinks is not None:
            sink = p.sinks.to(s.dtype)[None, :, None, None].expand(m.shape)
            m = torch.maximum(m, sink)
        # the result does not depend on m, so its gradient need not flow through the max
        m = m.detach()
        m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        denom = e.sum(dim=-1, keepdim=True)
        if sink is not None:
            denom = denom + torch.exp(sink - m)
        some = denom > 0
        safe = torch.where(some, denom, torch.ones_like(denom))
        o = (e @ v) / safe
        lse = torch.where(some, m + torch.log(safe), torch.full_like(m, NEG_INF))
        return o, lse.squeeze(-1)

    # -- outputs ---------------------------------------------------------------------------------

    def output(self, o: Tensor, q: Tensor) -> Tensor:
        return o.to(q.dtype).contiguous()

    def lse_base(self, lse: Tensor) -> Tensor:
        return lse / math.log(2) if self.lse == "base2" else lse

    def lse_shape(self, lse: Tensor) -> Tensor:
        """(B, H, Tq) or varlen (H, total_q), to the declared LSE_LAYOUT."""
        if self.lse_layout == "bsh":
            return lse.transpose(1, 2)
        if self.lse_layout == "sh":
            return lse.transpose(0, 1)
        return lse

    def lse_out(self, lse: Tensor) -> Tensor:
        return self.lse_shape(self.lse_base(lse)).contiguous()


class Blockwise(Kernel):
    """The same contract, FlashAttention-style: tiles, padded tails, online softmax, split-KV."""

    KNOB_DEFAULTS: Mapping[str, Any] = {"block_q": 16, "block_k": 8, "num_splits": 1}

    def pad(self, x: Tensor, block: int) -> Tensor:
        """Zero-pad the sequence axis to a whole number of tiles (Triton's `other=0` loads)."""
        T = x.shape[2]
        extra = -T % block
        if not extra:
            return x
        return torch.cat([x, x.new_zeros(x.shape[:2] + (extra,) + x.shape[3:])], dim=2)

    def tile_mask(self, i: Tensor, j: Tensor, Tq: int, Tk: int, p: Problem) -> Tensor:
        """Visibility within a tile, padded keys (j >= Tk) hidden."""
        return self.visible(i, j, Tq, Tk, p) & (j < Tk)[None, :]

    def splits(self, n_tiles: int, p: Problem) -> list[range]:
        """Key tiles in `num_splits` contiguous groups (FA's split-KV); some may be empty."""
        n = max(1, int(p.knobs["num_splits"]))
        edges = [round(s * n_tiles / n) for s in range(n + 1)]
        return [range(edges[s], edges[s + 1]) for s in range(n)]

    def update(self, m: Tensor, den: Tensor, acc: Tensor, s: Tensor,
               vt: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One key tile of the online softmax: new running max, denominator, accumulator."""
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True)).detach()
        m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        rescale = torch.exp(m - m_safe)  # 0 while nothing was seen (m = -inf)
        e = torch.exp(s - m_safe)
        return m_new, den * rescale + e.sum(dim=-1, keepdim=True), acc * rescale + e @ vt

    def finish(self, m: Tensor, den: Tensor, acc: Tensor) -> tuple[Tensor, Tensor]:
        m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        some = den > 0
        safe = torch.where(some, den, torch.ones_like(den))
        lse = torch.where(some, m + torch.log(safe), torch.full_like(m, NEG_INF))
        return acc / safe, lse

    def merge(self, parts: list[tuple[Tensor, Tensor]], sink: Tensor | None,
              sizes: list[int]) -> tuple[Tensor, Tensor]:
        """Combine split results (o_s, lse_s) by their LSEs; the sink is one more part, o = 0."""
        outs = [o for o, _ in parts]
        lses = [lse for _, lse in parts]
        if sink is not None:
            outs.append(torch.zeros_like(outs[0]))
            lses.append(sink)
        L = torch.stack(lses)
        top = L.amax(dim=0, keepdim=True).detach()
        top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
        w = torch.exp(L - top)
        z = w.sum(dim=0)
        some = z > 0
        safe = torch.where(some, z, torch.ones_like(z))
        o = (w * torch.stack(outs)).sum(dim=0) / safe
        lse = torch.where(some, top[0] + torch.log(safe), torch.full_like(z, NEG_INF))
        return o, lse

    def core(self, q: Tensor, k: Tensor, v: Tensor, p: Problem) -> tuple[Tensor, Tensor]:
        B, H, Tq, D = q.shape
        Tk = k.shape[2]
        bq, bk = int(p.knobs["block_q"]), int(p.knobs["block_k"])
        if Tq == 0 or Tk == 0:  # no tiles: the dense answer, still attached to the graph
            return Kernel.core(self, q, k, v, p)
        q, k, v = self.prepare(q, k, v)
        q, k, v = self.pad(q, bq), self.pad(k, bk), self.pad(v, bk)
        n_tiles = k.shape[2] // bk
        sink = None
        if p.sinks is not None:
            sink = p.sinks.to(q.dtype)[None, :, None, None].expand(B, H, bq, 1)
        outs, lses = [], []
        for qs in range(0, q.shape[2], bq):
            qt = q[:, :, qs:qs + bq]
            i = torch.arange(qs, qs + bq, device=q.device)
            parts, sizes = [], []
            for group in self.splits(n_tiles, p):
                m = qt.new_full((B, H, bq, 1), NEG_INF)
                den = qt.new_zeros((B, H, bq, 1))
                acc = qt.new_zeros((B, H, bq, D))
                for t in group:
                    ks = t * bk
                    j = torch.arange(ks, ks + bk, device=q.device)
                    seen = self.tile_mask(i, j, Tq, Tk, p)
                    if not bool(seen.any()):  # a tile wholly hidden (future, outside the window)
                        continue
                    s = self.logits(qt, k[:, :, ks:ks + bk], p)
                    s = self.hide(self.alibi(s, i, j, Tq, Tk, p), seen)
                    m, den, acc = self.update(m, den, acc, s, v[:, :, ks:ks + bk])
                parts.append(self.finish(m, den, acc))
                sizes.append(len(group) * bk)
            o, lse = self.merge(parts, sink, sizes)
            outs.append(o)
            lses.append(lse)
        return torch.cat(outs, 2)[:, :, :Tq], torch.cat(lses, 2)[:, :, :Tq, 0]


def bind(cls: type[Kernel], namespace: Mapping[str, Any]) -> tuple[
        Callable[..., Tensor | tuple[Tensor, Tensor]], Callable[[Mapping[str, Any]], bool]]:
    """`attention, supports` of `cls` configured by a subject module's declarations."""
    kernel = cls(layout=namespace.get("LAYOUT", "bhsd"), causal=namespace.get("CAUSAL", "top_left"),
                 window=namespace.get("WINDOW"), lse=namespace.get("LSE"),
                 lse_layout=namespace.get("LSE_LAYOUT"),
                 masked_rows=namespace.get("MASKED_ROWS", "zero"), knobs=namespace.get("KNOBS"))
    return kernel.attention, kernel.supports


def bind_cache(cls: type[Kernel], namespace: Mapping[str, Any]) -> tuple[
        Callable[..., Any], Callable[..., Any], Callable[[Mapping[str, Any]], bool]]:
    """`attention, attention_with_cache, supports` of `cls`, configured as `bind` does."""
    attention, supports = bind(cls, namespace)
    kernel = attention.__self__  # type: ignore[attr-defined]
    return attention, kernel.attention_with_cache, supports
