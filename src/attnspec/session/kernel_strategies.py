"""Hypothesis strategies for kernel examples: sizes that catch shape bugs, the call's features.

By default B, H, Tq, Tk and D are pairwise distinct (so a BSHD/BHSD mix-up cannot hide behind
equal sizes; varlen packs sequences, so there only B, H and D are kept apart), lengths favour
block boundaries (powers of two and their neighbours, 113, 200, 1023 ...) up to max_seq, head
dims range over 32..256 with the odd 59 and 111, and Tq < Tk as well as Tq > Tk where the
kernel takes both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from hypothesis import assume
from hypothesis import strategies as st
from torch import Tensor

from .._errors import ConfigError
from ..common.options import (
    HEAD_DIM_LIMIT,
    HEADS_LIMIT,
    KERNEL_MAX_SEQ,
    NARROW_HEAD_DIM,
    NARROW_HEADS,
)
from ..properties.kernel import (
    KERNEL_BY_ID,
    KernelExample,
    KernelProperty,
    inputs,
    reference,
    sink_logits,
    slopes,
)
from ..reference.config import divisors
from ..reference.conventions import KernelConventions, from_layout, to_layout
from .strategies import SEEDS, _device, _dtype, _range, _refuse, _size

__all__ = ["KERNEL_HEAD_DIMS", "KernelCase", "kernel_cases", "kernel_examples",
           "kernel_lengths"]

# FlashAttention's test head dims (59 and 111 among them) and the sizes kernels specialise on.
KERNEL_HEAD_DIMS = (32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256)
_ODD_LENGTHS = (97, 113, 200, 239, 383, 799, 1000)
SCORE_BUDGET = 1 << 20  # B x H x Tq x Tk at most: the float64 reference holds a few of these
# B x H x Tq x Tk x D, as far as fewer heads and rows allow: the float64 reference's matmuls
# (about 30 ms a call here); the widest 2% of examples took a third of a default verify.
FLOP_BUDGET = 1 << 26
NARROW_SEQ = 64  # a narrow example's longest sequence
KERNEL_SHARE = 3  # one example in this many is wide where the bounds allow


def kernel_lengths(*, min_value: int | None = None, max_value: int | None = None,
                   ) -> st.SearchStrategy[int]:
    """Kernel sequence lengths (Tq, Tk) in min_value..max_value (defaults 1 and 256; 0 is
    allowed: a call with no keys), weighted towards the block boundaries kernels tile by:
    1 to 5, powers of two and their neighbours (63, 64, 65, 127, 128, 129, ...), and the odd
    lengths 97, 113, 200, 239, 383, 799, 1000.

    >>> kernel_lengths(max_value=512).example()  # doctest: +SKIP
    129
    """
    min_value, max_value = _range("kernel_lengths", {"min_value": min_value,
                                                     "max_value": max_value},
                                  "kernel sequence lengths", 1, KERNEL_MAX_SEQ, lowest=0)
    special = {1, 2, 3, 4, 5, *_ODD_LENGTHS}
    power = 8
    while power - 1 <= max_value:
        special |= {power - 1, power, power + 1}
        power *= 2
    chosen = sorted(t for t in special if min_value <= t <= max_value)
    anything = st.integers(min_value, max(min_value, max_value))
    shortest = [t for t in (1, 2, 3) if min_value <= t <= max_value]  # one key, one query
    tiles = [t for t in (63, 64, 65, 127, 128, 129, 255, 256, 257)  # the tiles kernels use
             if min_value <= t <= max_value]
    options = [st.sampled_from(chosen)] if chosen else []
    options += [st.sampled_from(shortest)] if shortest else []
    options += [st.sampled_from(tiles)] if tiles else []
    return st.one_of(*options, anything)


def _cuts(Tq: int, Tk: int, shift: int, window: tuple[int | None, int | None] | None,
          ) -> st.SearchStrategy[tuple[int, ...]]:
    """Key positions to change: the corner's and the window's edges, and anywhere."""
    near = {0, Tk - 1, Tk // 2, shift, shift + 1, shift - 1, Tq - 1}
    left, right = window if window is not None else (None, None)
    if left is not None:
        near |= {shift - left, shift - left - 1, Tk - 1 - left}
    if right is not None:
        near |= {shift + right, shift + right + 1, right}
    spots = sorted(j for j in near if 0 <= j < Tk)
    if not spots:
        return st.just(())
    one = st.one_of(st.sampled_from(spots), st.integers(0, Tk - 1))
    return st.lists(one, min_size=1, max_size=3, unique=True).map(tuple)


def _cache_lengths(longest: int, page: int | None) -> st.SearchStrategy[int]:
    """Tokens already in a row's cache: 0, page edges (one less, at, one more; two pages), and
    anything up to `longest`."""
    edges = {0, 1}
    if page is not None:
        edges |= {page - 1, page, page + 1, 2 * page - 1, 2 * page, 2 * page + 1}
    chosen = sorted(n for n in edges if 0 <= n <= longest)
    return st.one_of(st.sampled_from(chosen), st.integers(0, longest))


def _cache_examples(prop: KernelProperty, c: KernelConventions, pairs: list[tuple[str, str]],
                    *, longest: int, max_heads: int, max_head_dim: int, distinct: bool,
                    ) -> st.SearchStrategy[KernelExample]:
    """Examples for paged and kv_append: cache_seqlens differing per row (some 0, some at a
    page's edge), tokens appended (kv_append always; paged often, 0 too), 1 query (decoding)
    or a few."""
    page = c.paged if prop.id == "paged" else None
    if page is not None:  # rows of two pages and more, or the page table is never read
        longest = max(longest, 2 * page + 2)

    @st.composite
    def draw(draw: st.DrawFn) -> KernelExample:
        device, dtype = draw(st.sampled_from(pairs))
        H = draw(st.integers(1, min(max_heads, NARROW_HEADS)))
        G = draw(st.sampled_from(divisors(H) if c.has("gqa") else [H]))
        D = draw(st.integers(1, min(max_head_dim, NARROW_HEAD_DIM)))
        B = draw(st.integers(1, 4))
        new = draw(st.integers(1 if prop.id == "kv_append" else 0, max(1, min(longest, 17))))
        lens = tuple(draw(st.lists(_cache_lengths(max(0, longest - new), page), min_size=B,
                                   max_size=B)))
        Tq = draw(st.one_of(st.just(1), st.integers(1, max(new, 1))))
        Tk = max(lens) + new
        if distinct:  # a (B, T, G, D) read as (B, G, T, D) must not fit by chance
            assume(len({B, H, D}) == 3)
        assume(B * H * Tq * max(Tk, 1) <= SCORE_BUDGET)
        causal = True if not c.has("noncausal") else draw(st.sampled_from((True, True, False)))
        softcap = draw(st.sampled_from((None, None, None, 5.0))) if c.has("softcap") else None
        scale = draw(st.one_of(st.none(), st.floats(0.25, 2.0).map(
            lambda f: f / D ** 0.5))) if c.has("scale") else None
        return KernelExample(
            B=B, H=H, G=G, Tq=Tq, Tk=Tk, D=D, dtype=dtype, device=device,
            seed=draw(SEEDS),
            scale=draw(st.sampled_from(prop.input_scales)), causal=causal,
            softmax_scale=scale, softcap=softcap, cache_seqlens=lens, new_tokens=new,
            page_size=page)

    return draw()


def kernel_examples(prop: KernelProperty, c: KernelConventions, *,
                    dtypes: Mapping[str, Sequence[str]], max_seq: int, max_heads: int,
                    max_head_dim: int, narrow: bool = False, distinct: bool = True,
                    ) -> st.SearchStrategy[KernelExample]:
    """Examples for one kernel property, within the kernel's conventions and the bounds."""
    pairs = [(dev, dt) for dev, dts in dtypes.items() for dt in dts]
    if prop.id in ("paged", "kv_append"):
        return _cache_examples(prop, c, pairs, longest=min(max_seq, NARROW_SEQ) if narrow
                               else max_seq, max_heads=max_heads, max_head_dim=max_head_dim,
                               distinct=distinct)
    cross, varlen = c.has("cross"), c.layout == "varlen"
    want_masked = prop.id == "masked_rows"
    # Narrow examples keep the long lengths (a tile bug needs T past 128; the cost is
    # B x H x Tq x Tk, which the budget bounds); the quick pass stays short.
    longest = min(max_seq, NARROW_SEQ) if narrow else max_seq
    # The strategies, built once, not at every draw (each new one is validated when drawn).
    lengths_upto = kernel_lengths(max_value=longest)
    placed, shares = st.sampled_from(pairs), st.integers(0, KERNEL_SHARE - 1)
    dims = [d for d in KERNEL_HEAD_DIMS if d <= max_head_dim]
    wide_dims = st.one_of(st.sampled_from(dims), st.integers(1, max_head_dim)) if dims else None
    narrow_dims = st.integers(1, min(max_head_dim, NARROW_HEAD_DIM))
    corners = st.sampled_from((True, False) if prop.id == "window" else (True, True, True, False))
    quarter = st.integers(0, 3)
    caps = st.sampled_from((None, None, None, 2.0, 5.0, 20.0))
    own_scales = st.one_of(st.none(), st.floats(0.25, 2.0))
    input_scales = st.sampled_from(prop.input_scales)

    @st.composite
    def draw(draw: st.DrawFn) -> KernelExample:
        device, dtype = draw(placed)
        wide = not narrow and draw(shares) == 0
        heads = max_heads if wide else min(max_heads, NARROW_HEADS)
        D = draw(wide_dims if wide and wide_dims is not None else narrow_dims)
        # Sizes are drawn apart (filtered as they are drawn, not rejected once all are: half
        # of all draws were rejected that way, each a whole example's draw).
        apart = distinct and not varlen
        fewest = 2 if prop.id == "gqa_grouping" else 1
        assume(heads >= fewest)
        # FlashInfer's window_left bounds the left side of a causal window only.
        causal = True if prop.id in ("causality", "masked_rows") or not c.has("noncausal") or (
            prop.id == "window" and c.window == "left") \
            else draw(corners)
        taken = (D,)
        Tq = _apart(draw, lengths_upto, taken if apart else ())
        Tk = Tq
        if want_masked and cross:
            if c.causal == "bottom_right":
                assume(Tq > 1)
                Tk = _apart(draw, st.integers(0, Tq - 1), taken if apart else ())
            else:
                Tk = 0
        elif cross and draw(quarter):  # and Tk = Tq, self-attention, in one of four
            Tk = _apart(draw, lengths_upto, taken if apart else ())
        H, B = _heads_and_rows(draw, prop, heads, fewest, D, Tq, Tk, wide=wide,
                               apart=apart, distinct=distinct)
        groups = [g for g in divisors(H) if g < H] if prop.id == "gqa_grouping" else (
            divisors(H) if c.has("gqa") else [H])
        G = draw(st.sampled_from(groups))
        lengths = None
        if varlen:
            low = 0 if prop.id == "varlen" else 1
            qs = draw(st.lists(st.integers(low, Tq), min_size=B, max_size=B))
            ks = [n for n in qs] if not cross else draw(
                st.lists(st.integers(min(low, Tk), Tk), min_size=B, max_size=B))
            assume(any(qs))
            lengths = tuple(zip(qs, ks, strict=True))
            Tq, Tk = max(max(qs), 1), max(ks)
        if distinct:  # Tk may equal Tq (self-attention), never B, H or D
            sizes = [B, H, D] if varlen else [B, H, Tq, D]
            assume(len(set(sizes)) == len(sizes) and (varlen or Tk not in (B, H, D)))
        window = _window(draw, prop, c, causal, Tk, quarter)
        softcap = draw(caps) if c.has("softcap") else None
        alibi = c.has("alibi") and draw(quarter) == 0
        sinks = c.has("sinks") and not want_masked and draw(quarter) == 0
        # A scale of its own, around 1/sqrt(D) (x 0.25 to 2): logits stay of trained size.
        own = draw(own_scales) if c.has("scale") else None
        scale = None if own is None else own / D ** 0.5
        shift = Tk - Tq if c.causal == "bottom_right" else 0
        cuts = draw(_cuts(Tq, Tk, shift, window)) if prop.cuts else ()
        return KernelExample(
            B=B, H=H, G=G, Tq=Tq, Tk=Tk, D=D, dtype=dtype, device=device,
            seed=draw(SEEDS),
            scale=draw(input_scales) if len(prop.input_scales) > 1
            else prop.input_scales[0],
            causal=causal, softmax_scale=scale, window=window, softcap=softcap, alibi=alibi,
            sinks=sinks, lengths=lengths, cuts=cuts)

    return draw()


def _heads_and_rows(draw: st.DrawFn, prop: KernelProperty, heads: int, fewest: int, D: int,
                    Tq: int, Tk: int, *, wide: bool, apart: bool, distinct: bool,
                    ) -> tuple[int, int]:
    """H, then B, drawn within both budgets, apart from the sizes they must differ from."""
    # H after the lengths, then B, within both budgets (the reference's cost, not the
    # lengths or head dims drawn, is what they bound: they never cut those).
    scores = max(Tq, 1) * max(Tk, 1)

    def fits(b: int, h: int) -> bool:
        return b * h * scores <= SCORE_BUDGET and b * h * scores * D <= FLOP_BUDGET

    heads_apart_from = (D, Tq, Tk) if apart else (D,) if distinct else ()
    least_H = _least_apart(fewest, heads_apart_from)
    most = min(heads, max(least_H, min(SCORE_BUDGET // scores,
                                       FLOP_BUDGET // (scores * D))))
    H = draw(_other_than(fewest, most, heads_apart_from))
    fewest_rows = max(prop.min_batch, 1)

    def rows_apart_from(h: int) -> tuple[int, ...]:
        return (h, D, Tq, Tk) if apart else (h, D) if distinct else ()

    B = draw(_other_than(fewest_rows, max(4 if not wide else max(prop.min_batch, 2),
                                          _least_apart(fewest_rows, rows_apart_from(H))),
                         rows_apart_from(H)))
    # B lowered to fit, never onto a size it must differ from; where even the least B is
    # past a budget, H too; where the least of both are (--max-seq past 256 or
    # --max-head-dim past 512: 1023 x 1023 with H = 1, B = 2), the example keeps them.
    cheap = [b for b in range(fewest_rows, B + 1)
             if b not in rows_apart_from(H) and fits(b, H)]
    if cheap:
        B = max(cheap)
    else:
        fewer = [(h, _least_apart(fewest_rows, rows_apart_from(h)))
                 for h in range(H - 1, least_H, -1) if h not in heads_apart_from]
        H, B = next(((h, b) for h, b in fewer if fits(b, h)),
                    (least_H, _least_apart(fewest_rows, rows_apart_from(least_H))))
    return H, B


def _window(draw: st.DrawFn, prop: KernelProperty, c: KernelConventions, causal: bool,
            Tk: int, quarter: st.SearchStrategy[int]) -> tuple[int | None, int | None] | None:
    """A window, where the kernel takes one: always for the window property, else in one
    example of four."""
    takes_window = c.window is not None and (causal or c.window != "left")
    if not (takes_window and (prop.id == "window" or draw(quarter) == 0)):
        return None
    left = draw(st.one_of(st.integers(0, max(0, Tk)), st.none())
                if prop.id != "window" else st.integers(0, max(0, Tk - 1)))
    right: int | None = 0 if causal else draw(st.one_of(st.none(), st.integers(0, Tk)))
    return left, right


def _least_apart(low: int, taken: tuple[int, ...]) -> int:
    """The least value from `low` on that is not in `taken`."""
    while low in taken:
        low += 1
    return low


def _other_than(low: int, high: int, taken: tuple[int, ...]) -> st.SearchStrategy[int]:
    """low..high without `taken` (none left: the example is rejected)."""
    if not taken:
        return st.integers(low, high)
    left = tuple(n for n in range(low, high + 1) if n not in taken)
    return st.sampled_from(left) if left else st.nothing()


def _apart(draw: st.DrawFn, values: st.SearchStrategy[int], taken: tuple[int, ...]) -> int:
    """A value not in `taken`, in eight tries (a filter, without a new strategy to validate at
    every draw), else the example is rejected."""
    for _ in range(8):
        value = draw(values)
        if value not in taken:
            return value
    assume(False)
    raise AssertionError("unreachable")  # assume(False) raises


@dataclass(frozen=True, eq=False)
class KernelCase:
    """One kernel call, drawn: q, k and v in `layout` (bhsd: q (B, H, Tq, D), k and v
    (B, G, Tk, D); bshd: (B, Tq, H, D) and (B, Tk, G, D)), what the call uses (causal with
    its `corner`, window, softcap, softmax_scale, ALiBi slopes, sinks) and `example`, the
    engine's record of it (sizes, dtype, seed; its to_json() replays it)."""

    q: Tensor
    k: Tensor
    v: Tensor
    layout: str
    corner: str
    example: KernelExample

    def __repr__(self) -> str:
        """Shapes, dtype and device, not tensors' values: what a falsifying example prints."""
        def shown(t: Tensor) -> str:
            return f"<{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')} {t.device}>"

        calls = [f"causal={self.causal}"] + [
            f"{name}={value!r}" for name, value in (("window", self.window),
                                                    ("softcap", self.softcap),
                                                    ("softmax_scale", self.softmax_scale))
            if value is not None]
        calls += [f"{name}=<(H,) float32>" for name in ("alibi_slopes", "sinks")
                  if getattr(self.example, "alibi" if name == "alibi_slopes" else name, None)]
        return (f"KernelCase(q={shown(self.q)}, k={shown(self.k)}, v={shown(self.v)}, "
                f"layout={self.layout!r}, corner={self.corner!r}, {', '.join(calls)}, "
                f"seed={self.example.seed})")

    @property
    def causal(self) -> bool:
        return self.example.causal

    @property
    def window(self) -> tuple[int | None, int | None] | None:
        """(left, right), inclusive, None unbounded; None: no window."""
        return self.example.window

    @property
    def softcap(self) -> float | None:
        return self.example.softcap

    @property
    def softmax_scale(self) -> float | None:
        """None: the kernel's default, 1/sqrt(D)."""
        return self.example.softmax_scale

    @property
    def alibi_slopes(self) -> Tensor | None:
        """(H,) float32 ALiBi slopes, or None (no ALiBi)."""
        s = slopes(self.example)
        return None if s is None else s.to(self.q.device)

    @property
    def sinks(self) -> Tensor | None:
        """(H,) float32 sink logits, or None (no sinks)."""
        s = sink_logits(self.example)
        return None if s is None else s.to(self.q.device)

    def reference(self, dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
        """attnspec's kernel reference on this case, computed in `dtype` (default float64) on
        the CPU: o in `layout` and the natural-log LSE (B, H, Tq) (-inf where a query sees no
        key), as the oracle property compares them."""
        q, k, v = (from_layout(t, self.layout).cpu() for t in (self.q, self.k, self.v))
        o, lse, _ = reference(self.example, q, k, v, self.corner, dtype)
        return to_layout(o, self.layout), lse


def kernel_cases(*, layout: str | None = None, corner: str | None = None,
                 window: str | None = None, features: Sequence[str] | None = None,
                 dtype: torch.dtype | str | None = None, device: torch.device | str | None = None,
                 max_seq: int | None = None, max_heads: int | None = None,
                 max_head_dim: int | None = None, distinct: bool = True,
                 ) -> st.SearchStrategy[KernelCase]:
    """Kernel calls (`KernelCase`: q, k, v and what the call uses) as the oracle property
    draws them for a kernel declaring these conventions (docs/design.md, the kernel protocol):

    - `layout`: "bhsd" (default) or "bshd";
    - `corner`: where causal attention anchors when Tq != Tk, "top_left" (default, SDPA's
      is_causal) or "bottom_right" (FlashAttention's);
    - `window`: how the kernel takes a sliding window, None (default: no window), "pair",
      "pair_none" or "left"; cases then have a (left, right) window one time in four;
    - `features`: what it takes beyond causal self-attention (default none): "gqa" (G < H),
      "scale", "noncausal", "cross" (Tq != Tk), "softcap", "alibi", "sinks".

    Sizes: H up to max_heads (default 32), D up to max_head_dim (default 256), Tq and Tk up
    to max_seq (default 256) from `kernel_lengths`; two in three cases narrow (H <= 8,
    D <= 16); B x H x Tq x Tk at most 2**20 and B x H x Tq x Tk x D at most 2**26 by fewer
    rows and heads, past them only where even the least B and H are (lengths past 256 or
    head dims past 512: lengths and head dims are never cut). `distinct` (default True): B, H,
    Tq and D pairwise different, so that a layout mix-up cannot hide behind equal sizes.
    Inputs: float64 N(0, 1) x 1, 2 or 3 from the case's seed, cast to `dtype` (default
    float32) on `device` (default "cpu").

    >>> case = kernel_cases(layout="bshd", features=("gqa", "softcap")).example()
    ... # doctest: +SKIP
    >>> o, lse = case.reference()  # doctest: +SKIP
    """
    given: dict[str, object] = {
        "layout": layout, "corner": corner, "window": window,
        "features": features if features is None or isinstance(features, str)
        else tuple(features), "dtype": dtype,
        "device": device, "max_seq": max_seq, "max_heads": max_heads,
        "max_head_dim": max_head_dim}
    if not distinct:
        given["distinct"] = distinct
    what = "kernel cases"
    name = _dtype("kernel_cases", given, what, dtype)
    where = _device("kernel_cases", given, what, device)
    longest = _size("kernel_cases", given, "max_seq", what, KERNEL_MAX_SEQ)
    heads = _size("kernel_cases", given, "max_heads", what, 32)
    dims = _size("kernel_cases", given, "max_head_dim", what, 256)
    for option, value, limit in (("max_heads", heads, HEADS_LIMIT),
                                 ("max_head_dim", dims, HEAD_DIM_LIMIT)):
        if value > limit:
            raise _refuse("kernel_cases", given, option, what, f"{option}={value} is above "
                          f"{limit}, the most attnspec draws.")
    if layout == "varlen":
        raise _refuse("kernel_cases", given, "layout", what, "varlen packs sequences of their "
                      "own lengths; kernel_cases draws the padded layouts, 'bhsd' and 'bshd'.")
    if isinstance(features, str):
        raise _refuse("kernel_cases", given, "features", what, "features is a tuple of "
                      "names, not one string.")
    try:
        conventions = KernelConventions(
            layout="bhsd" if layout is None else layout,
            causal="top_left" if corner is None else corner, window=window,
            features=() if features is None else tuple(features))
    except ConfigError as error:  # said in the kernel protocol's names: say it in ours
        why, option = str(error), "layout"
        for declared, ours in (("LAYOUT = ", "layout"), ("CAUSAL = ", "corner"),
                               ("WINDOW = ", "window"), ("FEATURES lists", "features")):
            if why.startswith(declared):
                why, option = why.replace(declared, f"{ours}=" if "=" in declared
                                          else f"{ours} lists", 1), ours
        raise _refuse("kernel_cases", given, option, what, why) from None
    if distinct and heads == 1 and dims == 1:
        raise _refuse("kernel_cases", given, "max_heads", what, "distinct=True needs H and D "
                      "to differ, and max_heads=1 with max_head_dim=1 makes both 1.")
    examples = kernel_examples(KERNEL_BY_ID["oracle"], conventions,
                               dtypes={where.type: [name]}, max_seq=longest, max_heads=heads,
                               max_head_dim=dims, distinct=distinct)

    def make(ex: KernelExample) -> KernelCase:
        q, k, v = (to_layout(t, conventions.layout).to(where) for t in inputs(ex))
        return KernelCase(q, k, v, conventions.layout, conventions.causal, ex)

    return examples.map(make)
