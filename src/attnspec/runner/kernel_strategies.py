"""Hypothesis strategies for kernel examples: sizes that catch shape bugs, the call's features.

By default B, H, Tq, Tk and D are pairwise distinct (so a BSHD/BHSD mix-up cannot hide behind
equal sizes; varlen packs sequences, so there only B, H and D are kept apart), lengths favour
block boundaries (powers of two and their neighbours, 113, 200, 1023 ...) up to max_seq, head
dims range over 32..256 with the odd 59 and 111, and Tq < Tk as well as Tq > Tk where the
kernel takes both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hypothesis import assume
from hypothesis import strategies as st

from ..properties.kernel import KernelExample, KernelProperty
from ..reference.config import divisors
from ..reference.conventions import KernelConventions
from .options import NARROW_HEAD_DIM, NARROW_HEADS

__all__ = ["KERNEL_HEAD_DIMS", "kernel_examples", "kernel_lengths"]

# FlashAttention's test head dims (59 and 111 among them) and the sizes kernels specialise on.
KERNEL_HEAD_DIMS = (32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256)
_ODD_LENGTHS = (97, 113, 200, 239, 383, 799, 1000)
SCORE_BUDGET = 1 << 20  # B x H x Tq x Tk at most: the float64 reference holds a few of these
NARROW_SEQ = 64  # a narrow example's longest sequence
KERNEL_SHARE = 3  # one example in this many is wide where the bounds allow


def kernel_lengths(max_value: int, min_value: int = 1) -> st.SearchStrategy[int]:
    """Lengths around block boundaries, and anything in range."""
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
            seed=draw(st.integers(0, 2**31 - 1)),
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

    @st.composite
    def draw(draw: st.DrawFn) -> KernelExample:
        device, dtype = draw(st.sampled_from(pairs))
        wide = not narrow and draw(st.integers(0, KERNEL_SHARE - 1)) == 0
        heads = max_heads if wide else min(max_heads, NARROW_HEADS)
        dims = [d for d in KERNEL_HEAD_DIMS if d <= max_head_dim]
        D = draw(st.one_of(st.sampled_from(dims), st.integers(1, max_head_dim))
                 if wide and dims else st.integers(1, min(max_head_dim, NARROW_HEAD_DIM)))
        H = draw(st.integers(1, heads))
        if prop.id == "gqa_grouping":
            assume(H > 1)
        groups = [g for g in divisors(H) if g < H] if prop.id == "gqa_grouping" else (
            divisors(H) if c.has("gqa") else [H])
        G = draw(st.sampled_from(groups))
        # Narrow examples keep the long lengths (a tile bug needs T past 128; the cost is
        # B x H x Tq x Tk, which the budget bounds); the quick pass stays short.
        longest = min(max_seq, NARROW_SEQ) if narrow else max_seq
        # FlashInfer's window_left bounds the left side of a causal window only.
        causal = True if prop.id in ("causality", "masked_rows") or not c.has("noncausal") or (
            prop.id == "window" and c.window == "left") \
            else draw(st.sampled_from((True, False) if prop.id == "window" else
                                      (True, True, True, False)))
        Tq = draw(kernel_lengths(longest))
        Tk = Tq
        if want_masked and cross:
            if c.causal == "bottom_right":
                assume(Tq > 1)
                Tk = draw(st.integers(0, Tq - 1))
            else:
                Tk = 0
        elif cross and draw(st.integers(0, 3)):  # and Tk = Tq, self-attention, in one of four
            Tk = draw(kernel_lengths(longest))
        B = draw(st.integers(max(prop.min_batch, 1), 4 if not wide else max(prop.min_batch, 2)))
        while B * H * max(Tq, 1) * max(Tk, 1) > SCORE_BUDGET and B > prop.min_batch:
            B -= 1
        assume(B * H * max(Tq, 1) * max(Tk, 1) <= SCORE_BUDGET)
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
        window = None
        takes_window = c.window is not None and (causal or c.window != "left")
        if takes_window and (prop.id == "window" or draw(st.integers(0, 3)) == 0):
            left = draw(st.one_of(st.integers(0, max(0, Tk)), st.none())
                        if prop.id != "window" else st.integers(0, max(0, Tk - 1)))
            right: int | None = 0 if causal else draw(st.one_of(st.none(), st.integers(0, Tk)))
            window = (left, right)
        softcap = draw(st.sampled_from((None, None, None, 2.0, 5.0, 20.0))) if c.has(
            "softcap") else None
        alibi = c.has("alibi") and draw(st.integers(0, 3)) == 0
        sinks = c.has("sinks") and not want_masked and draw(st.integers(0, 3)) == 0
        # A scale of its own, around 1/sqrt(D) (x 0.25 to 2): logits stay of trained size.
        scale = draw(st.one_of(st.none(), st.floats(0.25, 2.0).map(
            lambda f: f / D ** 0.5))) if c.has("scale") else None
        shift = Tk - Tq if c.causal == "bottom_right" else 0
        cuts = draw(_cuts(Tq, Tk, shift, window)) if prop.cuts else ()
        return KernelExample(
            B=B, H=H, G=G, Tq=Tq, Tk=Tk, D=D, dtype=dtype, device=device,
            seed=draw(st.integers(0, 2**31 - 1)),
            scale=draw(st.sampled_from(prop.input_scales)) if len(prop.input_scales) > 1
            else prop.input_scales[0],
            causal=causal, softmax_scale=scale, window=window, softcap=softcap, alibi=alibi,
            sinks=sinks, lengths=lengths, cuts=cuts)

    return draw()
