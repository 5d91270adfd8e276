"""Hypothesis strategies for examples: shapes, configurations, dtypes, devices, cut points."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from .._errors import ConfigError
from ..properties import Property
from ..properties.base import Example
from ..reference.config import divisors
from ..reference.spec import (
    ALiBi,
    AttentionSpec,
    DynamicNTK,
    LinearScaling,
    Llama3Scaling,
    QKNorm,
    RoPE,
    YaRN,
    positions_from_json,
    qk_norm_from_json,
)
from .options import MAX_HEAD_DIM, MAX_HEADS, MAX_WIDTH, NARROW_HEAD_DIM, NARROW_HEADS

__all__ = ["batch_sizes", "configs", "cut_points", "examples", "head_dims", "invalid_configs",
           "seq_lengths", "specs"]


def _powers_of_two_and_neighbours(first: int, limit: int) -> set[int]:
    """2^k - 1, 2^k and 2^k + 1 for each power 2^k >= `first` with 2^k - 1 <= `limit`: where
    off-by-one and block-boundary bugs live."""
    found: set[int] = set()
    power = first
    while power - 1 <= limit:
        found |= {power - 1, power, power + 1}
        power *= 2
    return found


def _special_lengths(max_value: int) -> list[int]:
    """T values worth drawing often: 1 to 5, then 7, 8, 9, 15, 16, 17, ... up to max_value."""
    special = {1, 2, 3, 4, 5} | _powers_of_two_and_neighbours(8, max_value)
    return sorted(t for t in special if t <= max_value)


def seq_lengths(*, min_value: int = 1, max_value: int = 64) -> st.SearchStrategy[int]:
    """T, weighted towards 1, 2, powers of two and their neighbours, and T > 16."""
    special = [t for t in _special_lengths(max_value) if t >= min_value]
    options = [st.sampled_from(special)] if special else []
    if max_value > 16:
        options.append(st.integers(max(17, min_value), max_value))
    options.append(st.integers(min_value, max_value))
    return st.one_of(*options)


# The head sizes kernels specialise on; they and their neighbours are drawn often where allowed.
KERNEL_HEAD_DIMS = (32, 64, 80, 96, 128, 256)


def _kernel_sizes(max_value: int) -> list[int]:
    return sorted({d + k for d in KERNEL_HEAD_DIMS for k in (-1, 0, 1) if d + k <= max_value})


def head_dims(max_value: int = MAX_HEAD_DIM) -> st.SearchStrategy[int]:
    """D in 1..max_value, weighted towards KERNEL_HEAD_DIMS and their neighbours."""
    special = _kernel_sizes(max_value)
    anything = st.integers(1, max_value)
    return st.one_of(st.sampled_from(special), anything) if special else anything


# One narrow example in this many is wide (H > NARROW_HEADS or D > NARROW_HEAD_DIM) where the
# bounds allow: head sizes kernels specialise on, at a cost that grows with C squared.
NARROW_SHARE = 4


def heads_and_dims(max_heads: int = MAX_HEADS, max_head_dim: int = MAX_HEAD_DIM,
                   max_width: int = MAX_WIDTH) -> st.SearchStrategy[tuple[int, int]]:
    """(H, D) with H·D <= max_width: mostly narrow (H <= 8, D <= 16), else over the whole range
    with the kernel head sizes favoured."""
    narrow = st.tuples(st.integers(1, min(NARROW_HEADS, max_heads)),
                       head_dims(min(NARROW_HEAD_DIM, max_head_dim)))
    if max_heads <= NARROW_HEADS and max_head_dim <= NARROW_HEAD_DIM:
        return narrow.filter(lambda hd: hd[0] * hd[1] <= max_width)

    @st.composite
    def wide(draw: st.DrawFn) -> tuple[int, int]:
        H = draw(st.integers(1, max_heads).filter(lambda h: h <= max_width))
        D = draw(head_dims(min(max_head_dim, max_width // H)))
        return H, D

    return st.one_of(*[narrow] * (NARROW_SHARE - 1), wide()).filter(
        lambda hd: hd[0] * hd[1] <= max_width)


def is_wide(H: int, D: int) -> bool:
    """Wide examples are drawn with B = 1 and a shorter T (see `examples`)."""
    return H > NARROW_HEADS or D > NARROW_HEAD_DIM


def batch_sizes(*, min_value: int = 1, max_value: int = 4) -> st.SearchStrategy[int]:
    """B."""
    return st.integers(min_value, max_value)


def configs(
    *, max_heads: int = MAX_HEADS, max_head_dim: int = MAX_HEAD_DIM, max_width: int = MAX_WIDTH,
    supported: Sequence[tuple[int, int]] | None = None,
) -> st.SearchStrategy[tuple[int, int]]:
    """Valid (C, H) pairs: H in 1..max_heads, D in 1..max_head_dim, C = H * D <= max_width.

    `supported`, when given, is the subject's own list of (C, H) it handles.
    """
    pairs = heads_and_dims(max_heads, max_head_dim, max_width).map(
        lambda hd: (hd[0] * hd[1], hd[0]))
    if supported is None:
        return pairs
    allowed = set(map(tuple, supported))
    if not allowed:
        raise ValueError("the subject supports none of the configurations attnspec draws "
                         f"(H 1..{max_heads}, D 1..{max_head_dim}, C <= {max_width}).")
    return st.one_of(pairs.filter(lambda ch: ch in allowed), st.sampled_from(sorted(allowed)))


def invalid_configs(*, max_embd: int = 128) -> st.SearchStrategy[tuple[int, int]]:
    """(C, H) that `build` must refuse: C % H != 0, or C < 1, or H < 1."""
    indivisible = st.tuples(st.integers(1, max_embd), st.integers(2, 16)).filter(
        lambda ch: ch[0] % ch[1] != 0)
    below_one = st.one_of(
        st.tuples(st.integers(-4, 0), st.integers(1, 8)),
        st.tuples(st.integers(1, max_embd), st.integers(-4, 0)),
    )
    return st.one_of(indivisible, below_one)


def cut_points(T: int) -> st.SearchStrategy[tuple[int, ...]]:
    """Many cut points for one example: 0, 1, T-1, T//2, powers of two and neighbours, plus
    a few drawn at random."""
    base = {0, 1, T // 2, T - 2, T - 1} | _powers_of_two_and_neighbours(2, T - 1)
    fixed = sorted(t for t in base if 0 <= t < T)
    extra = st.lists(st.integers(0, max(0, T - 1)), max_size=4)
    return extra.map(lambda more: tuple(sorted(set(fixed) | set(more))))


# The positions drawn where a subject lets them vary: none, ALiBi, and RoPE's conventions.
POSITIONS: tuple[RoPE | ALiBi | None, ...] = (
    None, ALiBi(), RoPE(), RoPE(interleaved=True), RoPE(fraction=0.5),
    RoPE(theta=500000.0, fraction=0.25, interleaved=True))


# The q/k norms drawn where a subject lets them vary: none, Qwen3's, Persimmon's, OLMo2's.
QK_NORMS: tuple[QKNorm | None, ...] = (
    None, QKNorm(), QKNorm(kind="layer", eps=1e-5), QKNorm(per_head=False),
    QKNorm(kind="layer", per_head=False))


def scaled_ropes(max_seq: int) -> tuple[RoPE, ...]:
    """RoPE scalings drawn where positions may be "any", with the original lengths inside
    max_seq so that T beyond them is drawn too (where dynamic NTK and YaRN change anything)."""
    half = max(1, max_seq // 2)
    return (RoPE(scaling=LinearScaling(4.0)), RoPE(scaling=DynamicNTK(2.0, half)),
            RoPE(fraction=0.5, scaling=YaRN(4.0, half)),
            RoPE(theta=500000.0, interleaved=True, scaling=Llama3Scaling(
                8.0, 1.0, 4.0, max(2, max_seq))))


# In the "any" draw of positions: ALiBi with a slope per head drawn from SLOPES.
DRAWN_SLOPES = "ALiBi with drawn slopes"
SLOPES = st.one_of(st.sampled_from((0.0, 0.5, 2.0 ** -4)),
                   st.floats(0.0, 1.0, allow_nan=False, allow_infinity=False))


def specs(variants: Mapping[str, Any], *, max_seq: int, need_window: bool = False,
          need_groups: bool = False, need_rope: bool = False, max_heads: int = MAX_HEADS,
          max_head_dim: int = MAX_HEAD_DIM, max_width: int = MAX_WIDTH, heads_per: int = 1,
          ) -> st.SearchStrategy[AttentionSpec]:
    """Attention specs a protocol v2 subject declares (its VARIANTS, in JSON form): fields it
    names vary ("any": over attnspec's range; a list: over it), the others keep defaults.
    `need_groups`: only 1 < n_kv_head < n_head, where grouping can go wrong; `need_rope`: only
    rotary positions; `heads_per`: only n_head and n_kv_head it divides (tensor parallelism
    over that many ranks)."""
    def field(name: str, anything: st.SearchStrategy[Any], default: Any = None,
              ) -> st.SearchStrategy[Any]:
        values = variants.get(name)
        if values is None:
            return st.just(default)
        if values == "any":
            return anything
        decode = {"positions": positions_from_json, "qk_norm": qk_norm_from_json}.get(name)
        listed = [decode(v) for v in values] if decode is not None else values
        return st.sampled_from(listed)

    # Mostly short windows; for the window property W < max_seq, so that T > W can be drawn.
    longest = max(1, max_seq - 1) if need_window else max(1, max_seq)
    windows = st.one_of(st.integers(1, min(8, longest)), st.integers(1, longest))
    window_st = field("window", st.one_of(st.none(), windows))
    if need_window:
        window_st = window_st.filter(lambda w: w is not None)
    positions_st = field("positions", st.sampled_from((*POSITIONS, *scaled_ropes(max_seq),
                                                       DRAWN_SLOPES)))
    # A listed ALiBi with given slopes fixes n_head: positions are drawn first, H follows.
    slopes_listed = isinstance(variants.get("positions"), list) and any(
        isinstance(p, dict) and p.get("slopes") is not None for p in variants["positions"])
    if need_rope:
        positions_st = positions_st.filter(lambda p: isinstance(p, RoPE))
    scale_st = field("scale", st.one_of(st.none(), st.sampled_from((0.05, 0.25, 1.0))))
    softcap_st = field("softcap", st.one_of(st.none(), st.sampled_from((1.0, 5.0, 30.0))))
    bias_st = field("bias", st.booleans(), default=True)
    qk_norm_st = field("qk_norm", st.sampled_from(QK_NORMS))
    sinks_st = field("sinks", st.booleans(), default=False)
    if need_groups:  # a norm over all G·D channels has no per-kv-head form to regroup
        qk_norm_st = qk_norm_st.filter(lambda n: n is None or n.per_head)
    own_width = variants.get("head_dim") is not None
    can_be_wide = max_heads > NARROW_HEADS or max_head_dim > NARROW_HEAD_DIM
    wide_st = st.integers(1, NARROW_SHARE).map(lambda n: n == NARROW_SHARE)

    @st.composite
    def draw(draw: st.DrawFn) -> AttentionSpec:
        early = draw(positions_st) if slopes_listed else None
        wide = can_be_wide and draw(wide_st)
        most_heads = max_heads if wide else min(NARROW_HEADS, max_heads)
        heads = (grouped_heads(variants, most_heads) or grouped_heads(variants, max_heads)
                 if need_groups else list(range(1, most_heads + 1)))
        if heads_per > 1:
            heads = [h for h in range(1, max_heads + 1) if h % heads_per == 0 and
                     (h <= most_heads or h == heads_per)]
        if isinstance(early, ALiBi) and early.slopes is not None:
            heads = [len(early.slopes)]
            assume(heads[0] % heads_per == 0 and heads[0] <= max_heads)
        H = draw(st.sampled_from([h for h in heads if h <= max_width] or heads))
        most_dim = (min(max_head_dim, max(1, max_width // H)) if wide
                    else min(NARROW_HEAD_DIM, max_head_dim, max(1, max_width // H)))
        positions = early if slopes_listed else draw(positions_st)
        if positions == DRAWN_SLOPES:  # slopes of its own per head (as Falcon-RW's are)
            positions = ALiBi(tuple(draw(st.lists(SLOPES, min_size=H, max_size=H))))
        if isinstance(positions, RoPE):  # it turns channel pairs: D among the sizes it can
            rope = positions
            fewest = 4 if isinstance(rope.scaling, DynamicNTK) else 2  # r / (r - 2): r > 2
            fits = [d for d in range(1, most_dim + 1)
                    if rope.rotary_dim(d) >= fewest and rope.rotary_dim(d) % 2 == 0]
            assume(bool(fits))
            favoured = [d for d in _kernel_sizes(most_dim) if d in fits]
            D = draw(st.one_of(st.sampled_from(favoured), st.sampled_from(fits)) if favoured
                     else st.sampled_from(fits))
        else:
            D = draw(head_dims(most_dim))
        kv_heads = [g for g in divisors(H) if g % heads_per == 0]
        G = draw(field("n_kv_head", st.sampled_from(kv_heads), default=H))
        if heads_per > 1:
            assume(G % heads_per == 0)
        if need_groups:
            assume(G in divisors(H) and 1 < G < H)
        head_dim = None
        C = H * D
        if own_width and draw(st.booleans()):  # q and o widths H·D, unrelated to C
            head_dim, C = D, draw(st.integers(1, min(max_width, max(128, H * D))))
        qk_norm = draw(qk_norm_st)
        # A norm over fewer than 4 channels is no model's, and ill-conditioned: LayerNorm of 2
        # gives +-1 whatever the input, its gradient 1 / (their difference).
        assume(qk_norm is None or (D if qk_norm.per_head else min(H, G) * D) >= 4)
        try:
            return AttentionSpec(C, H, n_kv_head=None if G == H else G, head_dim=head_dim,
                                 window=draw(window_st), scale=draw(scale_st),
                                 softcap=draw(softcap_st), positions=positions,
                                 bias=draw(bias_st), qk_norm=qk_norm,
                                 sinks=draw(sinks_st))
        except ConfigError:  # a listed value that does not fit (n_kv_head not dividing H)
            assume(False)
            raise

    return draw()


def grouped_heads(variants: Mapping[str, Any], max_heads: int) -> list[int]:
    """The H up to max_heads with an n_kv_head G the subject allows and 1 < G < H."""
    declared = variants.get("n_kv_head")
    if declared is None:
        return []
    return [H for H in range(1, max_heads + 1)
            if any(1 < G < H for G in divisors(H) if declared == "any" or G in declared)]


# Sharded examples start W processes' worth of work each: a few rows, short sequences.
SHARDED_MAX_BATCH = 2
SHARDED_MAX_SEQ = 32


def sharded_examples(prop: Property, *, dtypes: Mapping[str, Sequence[str]], max_seq: int,
                     variants: Mapping[str, Any], worlds: Sequence[int], layout: str,
                     max_heads: int = MAX_HEADS, max_head_dim: int = MAX_HEAD_DIM,
                     max_width: int = MAX_WIDTH) -> st.SearchStrategy[Example]:
    """Examples for tp_equivalence (n_head and n_kv_head divisible by the world) and
    cp_equivalence (T divisible by the world's chunks in `layout`), CPU only."""
    heads = prop.shards == "heads"
    by_world = {w: specs(variants, max_seq=max_seq, max_heads=max_heads,
                         max_head_dim=max_head_dim, max_width=max_width,
                         heads_per=w if heads else 1) for w in worlds}
    dtype_st = st.sampled_from(list(dtypes["cpu"]))
    longest = min(max_seq, SHARDED_MAX_SEQ)

    @st.composite
    def draw(draw: st.DrawFn) -> Example:
        dtype = draw(dtype_st)
        W = draw(st.sampled_from(list(worlds)))
        B = draw(st.integers(1, SHARDED_MAX_BATCH))
        chunks = 1 if heads else (2 * W if layout == "head_tail" else W)
        T = chunks * draw(st.integers(1, max(1, longest // chunks)))
        if heads:
            T = draw(seq_lengths(max_value=longest))
        spec = draw(by_world[W])
        return Example(B=B, T=T, C=spec.n_embd, H=spec.n_head, dtype=dtype, device="cpu",
                       seed=draw(st.integers(0, 2**31 - 1)), spec=spec, world=W,
                       scale=draw(st.sampled_from(prop.input_scales))
                       if len(prop.input_scales) > 1 else prop.input_scales[0])

    return draw()


def examples(prop: Property, *, dtypes: Mapping[str, Sequence[str]],
             supported: Sequence[tuple[int, int]] | None, max_seq: int,
             variants: Mapping[str, Any] | None = None, max_heads: int = MAX_HEADS,
             max_head_dim: int = MAX_HEAD_DIM, max_width: int = MAX_WIDTH,
             worlds: Sequence[int] = (), layout: str = "head_tail",
             ) -> st.SearchStrategy[Example]:
    """Every example `prop` is checked on, as one strategy (built once per run and property).

    `dtypes` maps each device to check to its dtypes; `supported` is the subject's (C, H) list;
    `variants`, for a protocol v2 subject, what it lets vary (examples then carry a spec).
    Wide examples (H > 8 or D > 16) have the fewest rows the property allows and T up to
    max(9, max_seq // 8): they are there for the head sizes, and cost C squared per row.
    """
    if prop.invalid_configs:
        return invalid_configs().map(lambda ch: Example(B=1, T=1, C=ch[0], H=ch[1]))
    if prop.shards is not None:
        assert variants is not None and worlds, "sharded properties are protocol 2's"
        return sharded_examples(prop, dtypes=dtypes, max_seq=max_seq, variants=variants,
                                worlds=worlds, layout=layout, max_heads=max_heads,
                                max_head_dim=max_head_dim, max_width=max_width)
    devices = ["cuda"] if prop.needs_cuda else [d for d in dtypes if dtypes[d]]
    by_device = {d: st.sampled_from(list(dtypes[d])) for d in devices}
    device_st = st.sampled_from(devices)
    config_st = configs(max_heads=max_heads, max_head_dim=max_head_dim, max_width=max_width,
                        supported=supported) if variants is None else None
    spec_st = None if variants is None else specs(
        variants, max_seq=max_seq, need_window=prop.needs_window, need_groups=prop.needs_groups,
        need_rope=prop.needs_rope, max_heads=max_heads, max_head_dim=max_head_dim,
        max_width=max_width)
    batch_st = batch_sizes(min_value=prop.min_batch)
    seq_st = seq_lengths(max_value=max_seq)
    wide_seq = min(max_seq, max(9, max_seq // 8))
    scale_st = st.sampled_from(prop.input_scales)  # shrinks to the first, 1
    seed_st = st.integers(0, 2**31 - 1)

    @st.composite
    def draw(draw: st.DrawFn) -> Example:
        device = draw(device_st)
        dtype = draw(by_device[device])
        # B and T first: shrinking works on earlier choices first, and most bugs hang on T.
        B = draw(batch_st)
        T = draw(seq_st) if not prop.needs_window else 0
        spec = None
        if spec_st is not None:
            spec = draw(spec_st)
            C, H = spec.n_embd, spec.n_head
        else:
            assert config_st is not None
            C, H = draw(config_st)
        wide = is_wide(H, spec.D if spec is not None else C // H)
        longest = wide_seq if wide else max_seq
        if wide:
            B, T = prop.min_batch, min(T, wide_seq)
        W = spec.window if spec is not None and prop.needs_window else None
        if prop.needs_window:  # a key just inside the window and one just outside: T > W
            T = draw(st.integers(W + 1, max(W + 1, longest)) if W is not None and W < max_seq
                     else seq_lengths(max_value=longest))
        cuts = draw(cut_points(T)) if prop.uses_cuts else ()
        # One scale is no draw: the choice sequences (saved examples) stay as they were.
        scale = draw(scale_st) if len(prop.input_scales) > 1 else prop.input_scales[0]
        return Example(B=B, T=T, C=C, H=H, dtype=dtype, device=device, seed=draw(seed_st),
                       cuts=cuts, scale=scale, spec=spec)

    return draw()
