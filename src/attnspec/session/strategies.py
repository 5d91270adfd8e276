"""Hypothesis strategies for examples: shapes, configurations, specs, inputs, cut points.

The public ones (attnspec.strategies re-exports them) take keyword-only bounds, None meaning
the documented default, and refuse impossible bounds when made (StrategyError), not mid-draw.
The engine's `examples` builds every module example from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch import Tensor

from .._errors import ConfigError, TargetError, UsageError
from ..common.dtypes import DTYPE_NAMES, dtype_name
from ..common.options import (
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_WIDTH,
    MODULE_MAX_SEQ,
    NARROW_HEAD_DIM,
    NARROW_HEADS,
)
from ..properties import Property
from ..properties.base import Example, seeded_normal
from ..properties.inference import padded_batch
from ..reference.config import divisors
from ..reference.spec import (
    VARIABLE_FIELDS,
    ALiBi,
    AttentionSpec,
    DynamicNTK,
    LinearScaling,
    Llama3Scaling,
    QKNorm,
    RoPE,
    YaRN,
    positions_from_json,
    positions_to_json,
    qk_norm_from_json,
    qk_norm_to_json,
)
from ..runner.subject import check_variants

__all__ = ["PaddedBatch", "StrategyError", "batch_sizes", "configs", "cut_points", "examples",
           "head_dims", "inputs", "invalid_configs", "padded_batches", "seq_lengths", "specs"]


class StrategyError(UsageError, InvalidArgument):
    """A strategy asked for what it cannot draw (min_value > max_value, a negative size, a
    `supported` pair whose n_head does not divide n_embd): raised when the strategy is made.

    An `attnspec.UsageError` and a `hypothesis.errors.InvalidArgument` both; `option` names
    the argument, `value` is what was given.
    """


def _refuse(strategy: str, given: Mapping[str, object], option: str, what: str,
            why: str) -> StrategyError:
    """The three-part error: which strategy with which arguments, what it draws, why not."""
    args = ", ".join(f"{k}={v!r}" for k, v in given.items() if v is not None)  # defaults
    error = StrategyError(f"attnspec.strategies.{strategy}({args}) cannot draw {what}: {why}")
    error.option, error.value, error.reason = option, given.get(option), why
    return error


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _size(strategy: str, given: Mapping[str, object], option: str, what: str,
          default: int, lowest: int = 1) -> int:
    """given[option], or `default` where it is None, checked to be a whole number >= lowest."""
    value = given.get(option)
    if value is None:
        return default
    if not _whole(value):
        raise _refuse(strategy, given, option, what,
                      f"{option} must be a whole number (an int), not {type(value).__name__}.")
    assert isinstance(value, int)
    if value < lowest:
        raise _refuse(strategy, given, option, what, f"{option}={value} is below {lowest}.")
    return value


def _range(strategy: str, given: Mapping[str, object], what: str, low: int, high: int,
           lowest: int = 1) -> tuple[int, int]:
    """(min_value, max_value) from `given`, defaults where None, checked: lowest <= min <= max."""
    lo = _size(strategy, given, "min_value", what, low, lowest)
    hi = _size(strategy, given, "max_value", what, high, lowest)
    if lo > hi:
        said = [f"{k}={v}" + ("" if given.get(k) is not None else " (the default)")
                for k, v in (("min_value", lo), ("max_value", hi))]
        raise _refuse(strategy, given, "min_value" if given.get("min_value") is not None
                      else "max_value", what,
                      f"{said[0]} is above {said[1]}: no value lies between them.")
    return lo, hi


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


def seq_lengths(*, min_value: int | None = None, max_value: int | None = None,
                ) -> st.SearchStrategy[int]:
    """Sequence lengths T in min_value..max_value (defaults 1 and 64), weighted towards 1 to
    5, powers of two and their neighbours (7, 8, 9, 15, 16, 17, ...), and T > 16: the lengths
    where off-by-one and block-boundary bugs live. The model examples' T.

    >>> seq_lengths(max_value=32).example()  # doctest: +SKIP
    17
    """
    min_value, max_value = _range("seq_lengths", {"min_value": min_value,
                                                  "max_value": max_value},
                                  "sequence lengths T", 1, MODULE_MAX_SEQ)
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


def head_dims(*, min_value: int | None = None, max_value: int | None = None,
              ) -> st.SearchStrategy[int]:
    """Head dims D in min_value..max_value (defaults 1 and 256), weighted towards the sizes
    kernels specialise on (32, 64, 80, 96, 128, 256) and their neighbours (63, 65, ...).

    >>> head_dims(max_value=128).example()  # doctest: +SKIP
    64
    """
    min_value, max_value = _range("head_dims", {"min_value": min_value,
                                                "max_value": max_value},
                                  "head dims D", 1, MAX_HEAD_DIM)
    special = [d for d in _kernel_sizes(max_value) if d >= min_value]
    anything = st.integers(min_value, max_value)
    return st.one_of(st.sampled_from(special), anything) if special else anything


# One narrow example in this many is wide (H > NARROW_HEADS or D > NARROW_HEAD_DIM) where the
# bounds allow: head sizes kernels specialise on, at a cost that grows with C squared.
NARROW_SHARE = 4


def heads_and_dims(max_heads: int = MAX_HEADS, max_head_dim: int = MAX_HEAD_DIM,
                   max_width: int = MAX_WIDTH) -> st.SearchStrategy[tuple[int, int]]:
    """(H, D) with H·D <= max_width: mostly narrow (H <= 8, D <= 16), else over the whole range
    with the kernel head sizes favoured."""
    narrow = st.tuples(st.integers(1, min(NARROW_HEADS, max_heads)),
                       head_dims(max_value=min(NARROW_HEAD_DIM, max_head_dim)))
    if max_heads <= NARROW_HEADS and max_head_dim <= NARROW_HEAD_DIM:
        return narrow.filter(lambda hd: hd[0] * hd[1] <= max_width)

    @st.composite
    def wide(draw: st.DrawFn) -> tuple[int, int]:
        H = draw(st.integers(1, max_heads).filter(lambda h: h <= max_width))
        D = draw(head_dims(max_value=min(max_head_dim, max_width // H)))
        return H, D

    return st.one_of(*[narrow] * (NARROW_SHARE - 1), wide()).filter(
        lambda hd: hd[0] * hd[1] <= max_width)


def is_wide(H: int, D: int) -> bool:
    """Wide examples are drawn with B = 1 and a shorter T (see `examples`)."""
    return H > NARROW_HEADS or D > NARROW_HEAD_DIM


def batch_sizes(*, min_value: int | None = None, max_value: int | None = None,
                ) -> st.SearchStrategy[int]:
    """Batch sizes B in min_value..max_value (defaults 1 and 4), shrinking towards min_value.

    >>> batch_sizes(min_value=2).example()  # doctest: +SKIP
    3
    """
    min_value, max_value = _range("batch_sizes", {"min_value": min_value,
                                                  "max_value": max_value},
                                  "batch sizes B", 1, 4)
    return st.integers(min_value, max_value)


def configs(
    *, max_heads: int | None = None, max_head_dim: int | None = None,
    max_width: int | None = None, supported: Sequence[tuple[int, int]] | None = None,
) -> st.SearchStrategy[tuple[int, int]]:
    """Valid configurations (n_embd, n_head) = (C, H): H in 1..max_heads (default 32), D in
    1..max_head_dim (default 256), C = H * D <= max_width (default 512). Three in four are
    narrow (H <= 8, D <= 16); the rest favour the head dims kernels specialise on.

    `supported` (None: any): the (C, H) pairs the code under test handles; only those are
    drawn (each as given, even outside the bounds). The draws outside it are filtered out,
    as the engine does (it suppresses Hypothesis's health checks): a short list needs
    `suppress_health_check=[HealthCheck.filter_too_much]`.

    >>> configs(max_heads=4, max_width=64).example()  # doctest: +SKIP
    (12, 3)
    """
    given: dict[str, object] = {"max_heads": max_heads, "max_head_dim": max_head_dim,
                                "max_width": max_width}
    what = "configurations (n_embd, n_head)"
    max_heads = _size("configs", given, "max_heads", what, MAX_HEADS)
    max_head_dim = _size("configs", given, "max_head_dim", what, MAX_HEAD_DIM)
    max_width = _size("configs", given, "max_width", what, MAX_WIDTH)
    pairs = heads_and_dims(max_heads, max_head_dim, max_width).map(
        lambda hd: (hd[0] * hd[1], hd[0]))
    if supported is None:
        return pairs
    allowed = set(map(tuple, supported))
    given["supported"] = sorted(allowed) if len(allowed) <= 8 else f"<{len(allowed)} pairs>"
    if not allowed:
        raise _refuse("configs", given, "supported", what, "supported is empty: there is no "
                      "configuration to draw.")
    for pair in sorted(allowed, key=repr):
        if len(pair) != 2 or not all(map(_whole, pair)) or min(pair) < 1 or pair[0] % pair[1]:
            raise _refuse("configs", given, "supported", what,
                          f"supported lists {pair!r}, which is no configuration: each pair is "
                          "(n_embd, n_head), whole numbers >= 1 with n_embd % n_head == 0.")
    return st.one_of(pairs.filter(lambda ch: ch in allowed), st.sampled_from(sorted(allowed)))


def invalid_configs(*, max_embd: int | None = None) -> st.SearchStrategy[tuple[int, int]]:
    """Configurations (n_embd, n_head) that a module must refuse to build: n_embd % n_head
    != 0 (n_embd in 1..max_embd, default 128; n_head in 2..16), or n_embd < 1, or n_head < 1.
    The divisibility property's draw.

    >>> invalid_configs().example()  # doctest: +SKIP
    (10, 3)
    """
    max_embd = _size("invalid_configs", {"max_embd": max_embd}, "max_embd",
                     "invalid configurations", 128)
    indivisible = st.tuples(st.integers(1, max_embd), st.integers(2, 16)).filter(
        lambda ch: ch[0] % ch[1] != 0)
    below_one = st.one_of(
        st.tuples(st.integers(-4, 0), st.integers(1, 8)),
        st.tuples(st.integers(1, max_embd), st.integers(-4, 0)),
    )
    return st.one_of(indivisible, below_one)


def cut_points(*, T: int) -> st.SearchStrategy[tuple[int, ...]]:
    """Cut points for a sequence of length T (required, >= 1): sorted distinct positions in
    0..T-1 where a causality check changes the future (tokens after the cut) and expects the
    past's outputs unchanged. Always 0, 1, T//2, T-2, T-1 and the powers of two and their
    neighbours below T, plus up to 4 drawn anywhere.

    >>> cut_points(T=10).example()  # doctest: +SKIP
    (0, 1, 2, 3, 4, 5, 7, 8, 9)
    """
    if not _whole(T) or T < 1:
        raise _refuse("cut_points", {"T": T}, "T", "cut points",
                      "T must be a whole number of tokens >= 1 (the sequence being cut).")
    base = {0, 1, T // 2, T - 2, T - 1} | _powers_of_two_and_neighbours(2, T - 1)
    fixed = sorted(t for t in base if 0 <= t < T)
    extra = st.lists(st.integers(0, max(0, T - 1)), max_size=4)
    return extra.map(lambda more: tuple(sorted(set(fixed) | set(more))))


SEEDS = st.integers(0, 2**31 - 1)  # an example's input seed: its tensors follow from it
Shape = tuple[int, ...]


def _dtype(strategy: str, given: Mapping[str, object], what: str, dtype: object) -> str:
    """The dtype's name (float32 where None), one of the dtypes attnspec checks."""
    if dtype is None:
        return "float32"
    name = dtype_name(dtype) if isinstance(dtype, torch.dtype) else dtype
    if not isinstance(name, str) or name.removeprefix("torch.") not in DTYPE_NAMES:
        raise _refuse(strategy, given, "dtype", what, f"dtype must be one of "
                      f"{', '.join(DTYPE_NAMES)} (a torch.dtype or its name).")
    return name.removeprefix("torch.")


def _device(strategy: str, given: Mapping[str, object], what: str, device: object,
            ) -> torch.device:
    try:
        where: torch.device = torch.device(
            "cpu" if device is None else device)  # type: ignore[call-overload]
    except (RuntimeError, TypeError) as error:
        raise _refuse(strategy, given, "device", what, f"device is no torch device: {error}"
                      ) from None
    if where.type == "cuda" and not torch.cuda.is_available():
        raise _refuse(strategy, given, "device", what, "torch sees no CUDA device here.")
    return where


def _scale(strategy: str, given: Mapping[str, object], what: str, scale: object) -> float:
    if scale is None:
        return 1.0
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not (
            math.isfinite(scale) and scale > 0):
        raise _refuse(strategy, given, "scale", what, "scale must be a finite number > 0 (the "
                      "inputs' standard deviation).")
    return float(scale)


def _shape_check(strategy: str, given: Mapping[str, object], what: str, shape: object,
                 rank: int | None, lowest: int) -> Shape:
    """`shape` as a tuple of whole sizes >= lowest (`rank` of them where given), or refused."""
    sizes = tuple(shape) if isinstance(shape, tuple | list) else None
    if sizes is None or (rank is not None and len(sizes) != rank) or not all(
            _whole(n) and n >= lowest for n in sizes):
        need = f"{rank} " if rank is not None else ""
        raise _refuse(strategy, {**given, "shape": shape}, "shape", what,
                      f"shape must be a tuple of {need}whole sizes >= {lowest}, or a strategy "
                      "drawing one.")
    return sizes


def _shapes(strategy: str, given: Mapping[str, object], what: str,
            shape: Shape | st.SearchStrategy[Shape], rank: int | None, lowest: int,
            ) -> st.SearchStrategy[Shape]:
    """Fixed shapes are checked now; drawn ones as they are drawn (the one check left late)."""
    if isinstance(shape, st.SearchStrategy):
        return shape.map(lambda s: _shape_check(strategy, given, what, s, rank, lowest))
    return st.just(_shape_check(strategy, given, what, shape, rank, lowest))


def inputs(*, shape: Shape | st.SearchStrategy[Shape], dtype: torch.dtype | str | None = None,
           device: torch.device | str | None = None, scale: float | None = None,
           ) -> st.SearchStrategy[Tensor]:
    """Input tensors x of `shape` (a tuple, or a strategy drawing one; for attention
    (B, T, n_embd)), in `dtype` (default float32) on `device` (default "cpu"), exactly as the
    engine makes every example's inputs: float64 N(0, 1) x scale (default 1.0) from a drawn
    seed, then cast. Hypothesis draws the seed, so a failure shrinks to smaller seeds, not to
    smaller values; the same seed gives the same tensor.

    >>> inputs(shape=(2, 5, 12), dtype=torch.bfloat16).example().shape  # doctest: +SKIP
    torch.Size([2, 5, 12])
    """
    given: dict[str, object] = {"shape": shape, "dtype": dtype, "device": device,
                                "scale": scale}
    what = "input tensors"
    name = _dtype("inputs", given, what, dtype)
    where = _device("inputs", given, what, device)
    factor = _scale("inputs", given, what, scale)
    wanted = DTYPE_NAMES[name]
    return st.tuples(_shapes("inputs", given, what, shape, None, 0), SEEDS).map(
        lambda drawn: seeded_normal(drawn[1], drawn[0], scale=factor, dtype=wanted).to(where))


@dataclass(frozen=True, eq=False)
class PaddedBatch:
    """A padded batch: x (B, T, C) with each row's real tokens on one `side` and random values
    in the padding, key_mask (B, T) bool (True at real tokens), and each row's real length."""

    x: Tensor
    key_mask: Tensor
    lengths: tuple[int, ...]
    side: str


def padded_batches(*, shape: tuple[int, int, int] | st.SearchStrategy[tuple[int, int, int]],
                   side: str | None = None, dtype: torch.dtype | str | None = None,
                   device: torch.device | str | None = None, scale: float | None = None,
                   ) -> st.SearchStrategy[PaddedBatch]:
    """Padded batches of `shape` (B, T, C) (a tuple, or a strategy drawing one), as the
    padding_invariance property makes them: real lengths 1..T per row (at least one row padded
    where T > 1), the real tokens on `side` ("left", as generate() pads, or "right"; None, the
    default: either, drawn), the padding random values. dtype (default float32), device
    (default "cpu") and scale (default 1.0) as for `inputs`.

    >>> batch = padded_batches(shape=(3, 8, 16), side="left").example()  # doctest: +SKIP
    >>> batch.key_mask.sum(dim=1).tolist() == list(batch.lengths)  # doctest: +SKIP
    True
    """
    given: dict[str, object] = {"shape": shape, "side": side, "dtype": dtype,
                                "device": device, "scale": scale}
    what = "padded batches"
    name = _dtype("padded_batches", given, what, dtype)
    where = _device("padded_batches", given, what, device)
    factor = _scale("padded_batches", given, what, scale)
    if side not in (None, "left", "right"):
        raise _refuse("padded_batches", given, "side", what, "side must be 'left', 'right' or "
                      "None (either, drawn).")
    sides = st.sampled_from(("left", "right")) if side is None else st.just(side)

    def make(drawn: tuple[Shape, int, str]) -> PaddedBatch:
        (B, T, C), seed, on = drawn
        ex = Example(B=B, T=T, C=C, H=1, dtype=name, seed=seed, scale=factor)
        x, mask, lengths = padded_batch(ex, on)
        return PaddedBatch(x.to(where), mask.to(where), tuple(lengths), on)

    return st.tuples(_shapes("padded_batches", given, what, shape, 3, 1), SEEDS, sides).map(make)


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


def _variants_json(given: Mapping[str, object], variants: Mapping[str, Any] | None,
                   ) -> dict[str, Any]:
    """`variants` as the engine reads them (parse_variants' JSON form): None is every field
    "any"; RoPE, ALiBi and QKNorm values become their JSON dicts; a bad field is refused."""
    what = "attention specs"
    if variants is None:
        return dict.fromkeys(VARIABLE_FIELDS, "any")
    if not isinstance(variants, Mapping):
        raise _refuse("specs", given, "variants", what, "variants must be a dict of spec field "
                      f"-> 'any' or a list of values, not {type(variants).__name__}.")
    out: dict[str, Any] = {}
    for name, values in variants.items():
        if name not in VARIABLE_FIELDS:
            raise _refuse("specs", given, "variants", what, f"variants names {name!r}; the "
                          f"fields that can vary are {', '.join(VARIABLE_FIELDS)}.")
        if values == "any":
            out[name] = "any"
            continue
        if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            raise _refuse("specs", given, "variants", what, f"variants[{name!r}] = {values!r}: "
                          "give 'any' or a non-empty list of values.")
        listed = list(values)
        try:  # objects as users write them, or the JSON dicts subjects declare
            if name == "positions":
                listed = [positions_to_json(_positions(v)) for v in listed]
            elif name == "qk_norm":
                listed = [qk_norm_to_json(qk_norm_from_json(v)) for v in listed]
        except (ConfigError, TypeError) as error:
            raise _refuse("specs", given, "variants", what, f"variants[{name!r}] lists "
                          f"{values!r}, which it cannot read: {error}") from None
        out[name] = listed
    try:  # the subject loader's own check: a listed value no spec can take
        check_variants(out, "specs")
    except TargetError as error:
        raise _refuse("specs", given, "variants", what,
                      str(error).removeprefix("TARGET specs: ").replace("VARIANTS[", "variants[")
                      ) from None
    return out


def _positions(value: object) -> RoPE | ALiBi | None:
    if value is None or isinstance(value, RoPE | ALiBi):
        return value
    if isinstance(value, dict):
        return positions_from_json(value)
    raise ConfigError(f"{value!r} is none of None, attnspec.RoPE(...) and attnspec.ALiBi(...).")


def specs(*, variants: Mapping[str, Any] | None = None, max_seq: int | None = None,
          max_heads: int | None = None, max_head_dim: int | None = None,
          max_width: int | None = None, windowed: bool = False, grouped: bool = False,
          rotary: bool = False, head_shards: int = 1) -> st.SearchStrategy[AttentionSpec]:
    """Protocol v2 attention specs (`attnspec.AttentionSpec`), as the engine draws them for a
    subject that declares `variants` (its VARIANTS: field -> "any" or a list of values; None,
    the default: every field "any", the whole range attnspec checks). Fields not named keep
    their defaults (plain attention); "any" draws over attnspec's range: windows, RoPE (its
    conventions and scalings), ALiBi (fixed or drawn slopes), q/k norms, soft caps, scales,
    sinks, grouped kv heads, a head_dim of its own.

    n_head is in 1..max_heads (default 32), head_dim in 1..max_head_dim (default 256), and
    n_head * head_dim <= max_width (default 512); three in four specs are narrow (n_head <= 8,
    head_dim <= 16). max_seq (default 64) is the longest T the spec will meet: windows and
    RoPE scalings' original lengths are drawn inside it. `windowed`: always a window (< max_seq
    where it can); `grouped`: only 1 < n_kv_head < n_head; `rotary`: only RoPE positions;
    `head_shards`: only n_head and n_kv_head divisible by it (tensor parallelism).

    >>> specs(variants={"n_kv_head": "any", "positions": [attnspec.RoPE()]}).example()
    ... # doctest: +SKIP
    AttentionSpec(n_embd=24, n_head=6, n_kv_head=2, positions=RoPE(...), ...)
    """
    given: dict[str, object] = {"variants": variants, "max_seq": max_seq,
                                "max_heads": max_heads, "max_head_dim": max_head_dim,
                                "max_width": max_width}
    flags = {"windowed": windowed, "grouped": grouped, "rotary": rotary,
             "head_shards": head_shards}
    given |= {k: v for k, v in flags.items() if v is not False and (k != "head_shards" or
                                                                     v != 1)}
    what = "attention specs"
    max_seq = _size("specs", given, "max_seq", what, MODULE_MAX_SEQ)
    max_heads = _size("specs", given, "max_heads", what, MAX_HEADS)
    max_head_dim = _size("specs", given, "max_head_dim", what, MAX_HEAD_DIM)
    max_width = _size("specs", given, "max_width", what, MAX_WIDTH)
    if not _whole(head_shards) or head_shards < 1:
        raise _refuse("specs", given | {"head_shards": head_shards}, "head_shards", what,
                      "head_shards must be a whole number of ranks >= 1.")
    variants = _variants_json(given, variants)
    windows = variants.get("window")
    if windowed and (windows is None or (windows != "any" and all(w is None for w in windows))):
        raise _refuse("specs", given, "windowed", what, "windowed=True, but variants allow no "
                      "window (name 'window': 'any' or list a window).")
    if grouped and not (grouped_heads(variants, max_heads)):
        raise _refuse("specs", given, "grouped", what, "grouped=True, but variants allow no "
                      f"n_kv_head with 1 < n_kv_head < n_head for n_head <= {max_heads}.")
    positions = variants.get("positions")
    if rotary and (positions is None or (positions != "any" and not any(
            isinstance(positions_from_json(p), RoPE) for p in positions))):
        raise _refuse("specs", given, "rotary", what, "rotary=True, but variants allow no RoPE "
                      "positions.")
    if head_shards > max_heads:
        raise _refuse("specs", given, "head_shards", what, f"head_shards={head_shards} is "
                      f"above max_heads={max_heads}: n_head must be a multiple of it.")
    return _spec_draws(variants, max_seq=max_seq, need_window=windowed, need_groups=grouped,
                       need_rope=rotary, max_heads=max_heads, max_head_dim=max_head_dim,
                       max_width=max_width, heads_per=head_shards)


def _spec_draws(variants: Mapping[str, Any], *, max_seq: int, need_window: bool,
                need_groups: bool, need_rope: bool, max_heads: int, max_head_dim: int,
                max_width: int, heads_per: int) -> st.SearchStrategy[AttentionSpec]:
    """`specs`' draws, its arguments checked: `variants` in JSON form."""
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
            D = draw(head_dims(max_value=most_dim))
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
    by_world = {w: specs(variants=variants, max_seq=max_seq, max_heads=max_heads,
                         max_head_dim=max_head_dim, max_width=max_width,
                         head_shards=w if heads else 1) for w in worlds}
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
                       seed=draw(SEEDS), spec=spec, world=W,
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
        variants=variants, max_seq=max_seq, windowed=prop.needs_window,
        grouped=prop.needs_groups, rotary=prop.needs_rope, max_heads=max_heads,
        max_head_dim=max_head_dim, max_width=max_width)
    batch_st = batch_sizes(min_value=prop.min_batch)
    seq_st = seq_lengths(max_value=max_seq)
    wide_seq = min(max_seq, max(9, max_seq // 8))
    scale_st = st.sampled_from(prop.input_scales)  # shrinks to the first, 1
    seed_st = SEEDS

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
        cuts = draw(cut_points(T=T)) if prop.uses_cuts else ()
        # One scale is no draw: the choice sequences (saved examples) stay as they were.
        scale = draw(scale_st) if len(prop.input_scales) > 1 else prop.input_scales[0]
        return Example(B=B, T=T, C=C, H=H, dtype=dtype, device=device, seed=draw(seed_st),
                       cuts=cuts, scale=scale, spec=spec)

    return draw()
