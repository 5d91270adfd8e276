"""The cache properties (attention_with_cache): paged and kv_append.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ...reference import conventions as conv
from ..base import PASS, Outcome
from .checks import (
    _oracle_outcome,
)
from .example import (
    KernelExample,
    _gen,
    inputs,
)
from .harness import (
    Kernel,
)
from .judging import (
    _failed,
    _judgeable,
)

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
