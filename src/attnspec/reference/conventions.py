"""A kernel's conventions, declared once and checked at load, and the conversions between its
layout and the reference's: q `"B H Tq D"`, k and v `"B G Tk D"`, the LSE `"B H Tq"` in
natural log (docs/design.md, the kernel protocol)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from .._errors import ConfigError

__all__ = ["CAUSAL_CORNERS", "FEATURES", "KernelConventions", "LAYOUTS", "LSE_BASES",
           "LSE_LAYOUTS", "MASKED_ROWS", "WINDOWS", "from_layout", "lse_from_layout",
           "to_layout", "window_argument"]

LAYOUTS = {"bhsd": "q (B, H, Tq, D), k and v (B, G, Tk, D)",
           "bshd": "q (B, Tq, H, D), k and v (B, Tk, G, D)",
           "varlen": "q (total_q, H, D), k and v (total_k, G, D), with cu_seqlens_q/_k"}
CAUSAL_CORNERS = {"top_left": "query i sees keys j <= i (SDPA's is_causal)",
                  "bottom_right": "query i sees keys j <= i + Tk - Tq (FlashAttention)"}
WINDOWS = {"pair": "window=(left, right), inclusive, -1 unbounded (FlashAttention 2 and 3)",
           "pair_none": "window=(left, right), inclusive, None unbounded (FlashAttention 4)",
           "left": "window=left, an int: keys i - left .. i (FlashInfer's window_left)"}
LSE_BASES = {"natural": "log-sum-exp in natural log", "base2": "log-sum-exp in base 2"}
LSE_LAYOUTS = {"bhs": "(B, H, Tq)", "bsh": "(B, Tq, H)", "hs": "varlen: (H, total_q)",
               "sh": "varlen: (total_q, H)"}
MASKED_ROWS = {"zero": "a row that sees no key gives o = 0 and LSE = -inf",
               "undefined": "such rows are not judged"}
FEATURES = {"gqa": "fewer kv heads than query heads (G < H, H % G == 0)",
            "scale": "a scale keyword (otherwise 1/sqrt(D))",
            "noncausal": "causal=False",
            "cross": "Tq != Tk",
            "softcap": "softcap=c: scores -> c * tanh(scores / c)",
            "alibi": "alibi_slopes (H,) float32: scores -= slope * |i' - j|",
            "sinks": "sinks (H,) float32: one more logit per head in each row's softmax"}
_MAX_PAGE = 4096  # the largest page size attnspec draws caches for
_KNOB_VALUES = 8  # values one knob may list: each is a full call per example


def _choice(name: str, value: Any, allowed: Mapping[str, str], optional: bool = False) -> None:
    if optional and value is None:
        return
    if not isinstance(value, str) or value not in allowed:
        options = "; ".join(f"{k!r}: {v}" for k, v in allowed.items())
        none = "None (it takes none), or " if optional else ""
        raise ConfigError(f"{name} = {value!r}: it must be {none}one of {options}.")


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, str | bool | int | float) and (
        not isinstance(value, float) or math.isfinite(value))


@dataclass(frozen=True)
class KernelConventions:
    """What a kernel subject declares once: LAYOUT, CAUSAL, WINDOW, LSE, LSE_LAYOUT,
    MASKED_ROWS, BACKWARD, DETERMINISTIC, LSE_GRAD, FEATURES, KNOBS (docs/design.md). Made from the
    subject's module attributes by `of`; every value is checked when made."""

    layout: str = "bhsd"
    causal: str = "top_left"
    window: str | None = None
    lse: str | None = None
    lse_layout: str = "bhs"
    masked_rows: str = "zero"
    backward: bool = True
    deterministic: bool = False
    lse_grad: bool = False  # whether the LSE is differentiable (FA4's is; FA2's and FA3's not)
    features: tuple[str, ...] = ()
    knobs: tuple[tuple[str, tuple[Any, ...]], ...] = field(default_factory=tuple)
    cache: bool = False  # whether it defines attention_with_cache (flash_attn_with_kvcache's)
    paged: int | None = None  # PAGED: the page size its paged cache takes (None: not paged)

    # Whether attention's `scale` keyword has a default: examples with the default scale
    # (1/sqrt(D)) then leave it out, so the kernel's own default path is checked too.
    scale_default: bool = False

    def __post_init__(self) -> None:
        _choice("LAYOUT", self.layout, LAYOUTS)
        _choice("CAUSAL", self.causal, CAUSAL_CORNERS)
        _choice("WINDOW", self.window, WINDOWS, optional=True)
        _choice("LSE", self.lse, LSE_BASES, optional=True)
        _choice("LSE_LAYOUT", self.lse_layout, LSE_LAYOUTS)
        packed = self.lse_layout in ("hs", "sh")
        if self.lse is not None and packed != (self.layout == "varlen"):
            want = "'hs' or 'sh'" if self.layout == "varlen" else "'bhs' or 'bsh'"
            raise ConfigError(f"LSE_LAYOUT = {self.lse_layout!r} with LAYOUT = "
                              f"{self.layout!r}: a {self.layout} kernel's LSE is {want}.")
        _choice("MASKED_ROWS", self.masked_rows, MASKED_ROWS)
        for name in ("backward", "deterministic", "lse_grad"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name.upper()} = {getattr(self, name)!r}: it must be True "
                                  "or False.")
        unknown = [f for f in self.features if f not in FEATURES]
        if unknown or not all(isinstance(f, str) for f in self.features):
            raise ConfigError(f"FEATURES lists {', '.join(map(repr, unknown))}: the features "
                              f"are {', '.join(FEATURES)}.")
        for name, values in self.knobs:
            if not (isinstance(name, str) and name.isidentifier()):
                raise ConfigError(f"KNOBS has key {name!r}: each knob is a keyword name.")
            if name in _RESERVED:
                raise ConfigError(f"KNOBS[{name!r}]: {name} is a keyword attnspec passes "
                                  "itself; knobs are the kernel's scheduling keywords.")
            if not (1 <= len(values) <= _KNOB_VALUES) or not all(map(_plain, values)):
                raise ConfigError(f"KNOBS[{name!r}] = {list(values)!r}: give 1 to "
                                  f"{_KNOB_VALUES} plain values (numbers, strings, True/False, "
                                  "None) that must all give the same result.")

        if not isinstance(self.cache, bool):
            raise ConfigError(f"the conventions' cache = {self.cache!r}: it must be True or "
                              "False (whether attention_with_cache is defined).")
        if self.paged is not None:
            if isinstance(self.paged, bool) or not isinstance(self.paged, int) or not (
                    1 <= self.paged <= _MAX_PAGE):
                raise ConfigError(f"PAGED = {self.paged!r}: it must be None (no paged cache) or "
                                  f"the page size, an int from 1 to {_MAX_PAGE}.")
            if not self.cache:
                raise ConfigError(f"PAGED = {self.paged!r} without attention_with_cache: a page "
                                  "size means nothing without the cache entry point "
                                  "(define attention_with_cache, or drop PAGED).")
        if self.cache and self.layout == "varlen":
            raise ConfigError("attention_with_cache with LAYOUT = 'varlen': the cache call "
                              "takes k_cache and v_cache in 'bhsd' or 'bshd' "
                              "(flash_attn_with_kvcache's), so a varlen kernel cannot declare "
                              "one.")

    @classmethod
    def of(cls, obj: Any) -> KernelConventions:
        """The conventions a subject module (or object) declares, defaults where it is silent."""
        features = getattr(obj, "FEATURES", ())
        knobs = getattr(obj, "KNOBS", {})
        if isinstance(features, str) or not isinstance(features, Sequence | set | frozenset):
            raise ConfigError(f"FEATURES = {features!r}: give a tuple of names, such as "
                              "('gqa', 'scale').")
        if not isinstance(knobs, Mapping):
            raise ConfigError(f"KNOBS = {knobs!r}: give a dict of keyword -> values, such as "
                              "{'num_splits': (1, 2, 3)}.")
        for name, values in knobs.items():
            if isinstance(values, str) or not isinstance(values, Sequence):
                raise ConfigError(f"KNOBS[{name!r}] = {values!r}: give a tuple of values.")
        with_cache = getattr(obj, "attention_with_cache", None)
        if with_cache is not None and not callable(with_cache):
            raise ConfigError(f"attention_with_cache = {with_cache!r}: it must be a function "
                              "attention_with_cache(q, k_cache, v_cache, *, cache_seqlens, "
                              "causal, ...), or absent.")
        return cls(layout=getattr(obj, "LAYOUT", "bhsd"), causal=getattr(obj, "CAUSAL", "top_left"),
                   window=getattr(obj, "WINDOW", None), lse=getattr(obj, "LSE", None),
                   lse_layout=getattr(obj, "LSE_LAYOUT", "hs" if getattr(
                       obj, "LAYOUT", "bhsd") == "varlen" else "bhs"),
                   masked_rows=getattr(obj, "MASKED_ROWS", "zero"),
                   backward=getattr(obj, "BACKWARD", True),
                   deterministic=getattr(obj, "DETERMINISTIC", False),
                   lse_grad=getattr(obj, "LSE_GRAD", False),
                   features=tuple(features),
                   knobs=tuple((k, tuple(v)) for k, v in knobs.items()),
                   cache=with_cache is not None, paged=getattr(obj, "PAGED", None),
                   scale_default=_has_default(getattr(obj, "attention", obj), "scale"))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["features"] = list(self.features)
        data["knobs"] = {k: list(v) for k, v in self.knobs}
        return data

    @classmethod
    def from_json(cls, data: Any) -> KernelConventions:
        if not isinstance(data, Mapping):
            raise ConfigError(f"the conventions are {type(data).__name__}, not an object.")
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"the conventions have unknown fields {unknown}.")
        features, knobs = known.get("features", []), known.get("knobs", {})
        if not isinstance(features, list) or not isinstance(knobs, dict) or not all(
                isinstance(v, list) for v in knobs.values()):
            raise ConfigError("the conventions' features must be a list and knobs a dict of "
                              "lists.")
        known["features"] = tuple(features)
        known["knobs"] = tuple((k, tuple(v)) for k, v in knobs.items())
        return cls(**known)

    def has(self, feature: str) -> bool:
        return feature in self.features


def _has_default(fn: Any, name: str) -> bool:
    """Whether `fn` takes keyword `name` with a default of its own."""
    import inspect

    try:
        parameter = inspect.signature(fn).parameters.get(name)
    except (TypeError, ValueError):  # no signature to read: say no, pass it always
        return False
    return parameter is not None and parameter.default is not inspect.Parameter.empty


_RESERVED = frozenset({"causal", "scale", "window", "softcap", "alibi_slopes", "sinks",
                       "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k",
                       "cache_seqlens", "block_table", "k", "v"})


def to_layout(t: Tensor, layout: str) -> Tensor:
    """A (B, N, T, D) tensor in the kernel's layout, contiguous (varlen: all rows, packed;
    `pack` packs sequences of their own lengths)."""
    if layout == "bhsd":
        return t.contiguous()
    if layout == "bshd":
        return t.transpose(1, 2).contiguous()
    raise ValueError(f"to_layout: {layout!r} packs with pack()")


def from_layout(t: Tensor, layout: str) -> Tensor:
    """A kernel's output (its layout) as (B, H, Tq, D)."""
    if layout == "bhsd":
        return t
    if layout == "bshd":
        return t.transpose(1, 2)
    raise ValueError(f"from_layout: {layout!r} unpacks with unpack()")


def pack(t: Tensor, lengths: Sequence[int]) -> Tensor:
    """(B, N, T, D) with row b's first lengths[b] positions real -> (sum(lengths), N, D)."""
    parts = [t[b, :, :n].transpose(0, 1) for b, n in enumerate(lengths)]
    return torch.cat(parts, dim=0).contiguous() if parts else t.new_zeros(0, t.size(1),
                                                                            t.size(3))


def unpack(t: Tensor, lengths: Sequence[int], T: int) -> Tensor:
    """(total, N, D) packed -> (B, N, T, D), positions past a row's length zero."""
    B, N, D = len(lengths), t.size(1), t.size(2)
    out = t.new_zeros(B, N, T, D)
    start = 0
    for b, n in enumerate(lengths):
        out[b, :, :n] = t[start:start + n].transpose(0, 1)
        start += n
    return out


def cu_seqlens(lengths: Sequence[int]) -> Tensor:
    total, out = 0, [0]
    for n in lengths:
        total += n
        out.append(total)
    return torch.tensor(out, dtype=torch.int32)


def lse_from_layout(lse: Tensor, conventions: KernelConventions,
                    lengths: Sequence[int] | None = None, T: int | None = None) -> Tensor:
    """A kernel's LSE as (B, H, Tq), natural log (varlen: positions past a row's length -inf)."""
    if conventions.lse == "base2":
        lse = lse * math.log(2)
    layout = conventions.lse_layout
    if layout == "bhs":
        return lse
    if layout == "bsh":
        return lse.transpose(1, 2)
    assert lengths is not None and T is not None
    packed = lse if layout == "sh" else lse.transpose(0, 1)  # (total, H)
    out = packed.new_full((len(lengths), packed.size(1), T), float("-inf"))
    start = 0
    for b, n in enumerate(lengths):
        out[b, :, :n] = packed[start:start + n].transpose(0, 1)
        start += n
    return out


def lse_shape(conventions: KernelConventions, B: int, H: int, Tq: int, total: int,
              ) -> tuple[int, ...]:
    return {"bhs": (B, H, Tq), "bsh": (B, Tq, H), "hs": (H, total),
            "sh": (total, H)}[conventions.lse_layout]


def window_argument(window: tuple[int | None, int | None], encoding: str) -> Any:
    """The reference's window (left, right; None unbounded) in the kernel's encoding."""
    left, right = window
    if encoding == "pair":
        return (-1 if left is None else left, -1 if right is None else right)
    if encoding == "pair_none":
        return (left, right)
    return -1 if left is None else left  # "left": right is what causal says (0, or unbounded)
