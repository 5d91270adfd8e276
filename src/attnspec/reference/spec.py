"""The attention spec (protocol v2): one frozen value for the attention a subject implements.

Everything a plain (C, H) pair said, and what real models add: grouped key/value heads, a head
size of its own, a sliding window, the score scale, a soft cap, and positions (RoPE or ALiBi).
Validated when made, so an impossible spec fails here with the rule and what would work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from .._errors import ConfigError, DivisibilityError
from .config import _check_count, check_config, divisors

__all__ = ["VARIABLE_FIELDS", "ALiBi", "AttentionSpec", "DynamicNTK", "LinearScaling",
           "Llama3Scaling", "QKNorm", "RoPE", "RoPEScaling", "YaRN", "alibi_slopes",
           "parse_variants"]


def _number(owner: str, name: str, value: object, *, above: float = 0.0) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
            value) or value <= above:
        raise ConfigError(f"Invalid {owner}: {name}={value!r}; it must be a finite number > "
                          f"{above:g}.")


def _length(owner: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"Invalid {owner}: {name}={value!r}; it must be a whole number of "
                          "positions >= 1 (the context length the model was trained on).")


@dataclass(frozen=True)
class LinearScaling:
    """Position interpolation (transformers' "linear"): every frequency divided by `factor`."""

    factor: float

    def __post_init__(self) -> None:
        _number("LinearScaling", "factor", self.factor)


@dataclass(frozen=True)
class DynamicNTK:
    """Dynamic NTK scaling (transformers' "dynamic"): for a sequence of length L >
    `original_max_position` (transformers' max_position_embeddings) the base becomes
    theta · (factor · L / original_max_position - (factor - 1)) ^ (r / (r - 2)), r the rotated
    channels; at or below it, plain RoPE.

    L is the length the rotating call sees, 1 + the largest position it rotates (as transformers'
    max(position_ids) + 1): T + offset for a forward or `shifted`, the row's longest real length
    when padded, Tk for Tq queries on Tk keys, offset + t for each decode call. A cache keeps
    the keys as they were turned when cached, so past the original length a decode is not the
    full forward, for the reference as for transformers; attnspec's decode and
    relative_position properties allow that difference, the reference's own, and no more.
    """

    factor: float
    original_max_position: int

    def __post_init__(self) -> None:
        _number("DynamicNTK", "factor", self.factor)
        _length("DynamicNTK", "original_max_position", self.original_max_position)


@dataclass(frozen=True)
class YaRN:
    """YaRN (transformers' "yarn"): frequencies blended between interpolated (/ factor) and
    kept, by a ramp over the channels set by beta_fast and beta_slow (rotations within
    `original_max_position`); cos and sin scaled by the attention factor, so q·k by its square.

    `attention_factor` None: 0.1 · ln(factor) + 1 (or, with mscale and mscale_all_dim, the
    ratio of those; DeepSeek); `truncate` rounds the ramp's ends to whole channels.
    """

    factor: float
    original_max_position: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True

    def __post_init__(self) -> None:
        _number("YaRN", "factor", self.factor)
        _length("YaRN", "original_max_position", self.original_max_position)
        for name in ("beta_fast", "beta_slow"):
            _number("YaRN", name, getattr(self, name))
        for name in ("attention_factor", "mscale", "mscale_all_dim"):
            if getattr(self, name) is not None:
                _number("YaRN", name, getattr(self, name))
        if not isinstance(self.truncate, bool):
            raise ConfigError(f"Invalid YaRN: truncate={self.truncate!r}; it must be a bool.")

    def scale(self) -> float:
        """The factor cos and sin are multiplied by (transformers' attention_factor)."""
        if self.attention_factor is not None:
            return float(self.attention_factor)

        def mscale(scale: float, m: float = 1.0) -> float:
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if self.mscale and self.mscale_all_dim:
            return mscale(self.factor, self.mscale) / mscale(self.factor, self.mscale_all_dim)
        return mscale(self.factor)


@dataclass(frozen=True)
class Llama3Scaling:
    """Llama 3.1's scaling (transformers' "llama3"): wavelengths above
    original_max_position / low_freq_factor divided by `factor`, below
    original_max_position / high_freq_factor kept, smoothly blended between."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192

    def __post_init__(self) -> None:
        for name in ("factor", "low_freq_factor", "high_freq_factor"):
            _number("Llama3Scaling", name, getattr(self, name))
        _length("Llama3Scaling", "original_max_position", self.original_max_position)
        if self.high_freq_factor <= self.low_freq_factor:
            raise ConfigError(
                f"Invalid Llama3Scaling: high_freq_factor={self.high_freq_factor!r} <= "
                f"low_freq_factor={self.low_freq_factor!r}; the blend divides by their "
                "difference, so high_freq_factor must be the larger (Llama 3.1: 4 and 1).")


RoPEScaling = LinearScaling | DynamicNTK | YaRN | Llama3Scaling
_SCALINGS: dict[str, type] = {"linear": LinearScaling, "dynamic": DynamicNTK, "yarn": YaRN,
                              "llama3": Llama3Scaling}


@dataclass(frozen=True)
class RoPE:
    """Rotary position embeddings on queries and keys.

    - `theta`: the base of the rotation frequencies, theta^(-2i / rotary_dim).
    - `fraction`: the share of each head's D channels rotated (GPT-NeoX's rotary_pct); the
      first `int(D * fraction)` channels rotate, the rest pass through.
    - `interleaved`: rotate channel pairs (0, 1), (2, 3), ... (GPT-J) instead of the halves
      (i, i + rotary_dim / 2) (GPT-NeoX, Llama: "rotate half").
    - `scaling`: None, `LinearScaling`, `DynamicNTK`, `YaRN` or `Llama3Scaling`: the
      frequencies (and YaRN's attention factor) exactly as transformers' ROPE_INIT_FUNCTIONS.
    """

    theta: float = 10000.0
    fraction: float = 1.0
    interleaved: bool = False
    scaling: RoPEScaling | None = None

    def __post_init__(self) -> None:
        for name in ("theta", "fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
                    value) or value <= 0:
                raise ConfigError(f"Invalid RoPE: {name}={value!r}; it must be a finite number "
                                  "> 0.")
        if self.fraction > 1:
            raise ConfigError(f"Invalid RoPE: fraction={self.fraction!r}; it is the share of "
                              "each head's channels that rotate, so at most 1.")
        if not isinstance(self.interleaved, bool):
            raise ConfigError(f"Invalid RoPE: interleaved={self.interleaved!r}; it must be a "
                              "bool.")
        if self.scaling is not None and not isinstance(self.scaling, tuple(_SCALINGS.values())):
            raise ConfigError(f"Invalid RoPE: scaling={self.scaling!r}; it must be None, "
                              "attnspec.LinearScaling, DynamicNTK, YaRN or Llama3Scaling.")

    def rotary_dim(self, head_dim: int) -> int:
        """The channels of a head that rotate."""
        return int(head_dim * self.fraction)


@dataclass(frozen=True)
class ALiBi:
    """Attention with linear biases: head h adds -slope_h * (i - j) to the score of query i and
    key j (after the scale and soft cap).

    - `slopes`: None for the paper's (`alibi_slopes`, as BLOOM and MPT use them), or one finite
      slope per query head (the spec checks there are n_head of them).

    A model that adds its bias before scaling the scores (Falcon-RW: (q·k + slope·j) / sqrt(D))
    is `ALiBi(slopes=tuple(s / math.sqrt(D) for s in alibi_slopes(H)))`.
    """

    slopes: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.slopes is None:
            return
        if isinstance(self.slopes, str) or not isinstance(self.slopes, tuple | list):
            raise ConfigError(f"Invalid ALiBi: slopes={self.slopes!r}; give None (the paper's "
                              "slopes) or a tuple of one float per query head.")
        bad = [s for s in self.slopes if isinstance(s, bool) or not isinstance(s, int | float)
               or not math.isfinite(s)]
        if bad or not self.slopes:
            raise ConfigError(f"Invalid ALiBi: slopes={self.slopes!r}; each must be a finite "
                              f"number{f' ({bad[0]!r} is not)' if bad else ''}, one per query "
                              "head, and there must be at least one.")
        object.__setattr__(self, "slopes", tuple(float(s) for s in self.slopes))  # hashable

    def slopes_for(self, n_head: int) -> list[float]:
        """Each query head's slope: the given ones, or the paper's for n_head heads."""
        return alibi_slopes(n_head) if self.slopes is None else list(self.slopes)


def alibi_slopes(n_head: int) -> list[float]:
    """The standard ALiBi slopes: 2^(-8 (h + 1) / H) for H a power of two; otherwise those of
    the power of two below H, then every other slope of the one above (Press et al., BLOOM)."""
    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_head).is_integer():
        return power_of_two(n_head)
    below = 2 ** math.floor(math.log2(n_head))
    return power_of_two(below) + alibi_slopes(2 * below)[0::2][:n_head - below]


@dataclass(frozen=True)
class QKNorm:
    """Normalisation of queries and keys after their projection, before RoPE (Qwen3, Gemma3,
    OLMo2, Persimmon), with weights the subject exports.

    - `kind`: "rms" (x / sqrt(mean(x²) + eps) · w) or "layer" ((x - mean) / sqrt(var + eps) · w
      + b, var biased, as torch's LayerNorm).
    - `eps`: added to the mean square (variance) under the root.
    - `per_head`: over each head's D channels, with weights (D,) shared by the heads (Qwen3,
      Gemma3, Persimmon); False: over the whole H·D (q) and G·D (k) projection, with weights of
      that width (OLMo2).

    Exports are the effective weight, the factor that multiplies the normalised vector: a
    Gemma-style norm that computes x̂ · (1 + w) exports 1 + w.
    """

    kind: str = "rms"
    eps: float = 1e-6
    per_head: bool = True

    def __post_init__(self) -> None:
        if self.kind not in ("rms", "layer"):
            raise ConfigError(f"Invalid QKNorm: kind={self.kind!r}; it must be 'rms' (RMSNorm: "
                              "Qwen3, Gemma3, OLMo2) or 'layer' (LayerNorm: Persimmon).")
        _positive("QKNorm", "eps", self.eps)
        if not isinstance(self.per_head, bool):
            raise ConfigError(f"Invalid QKNorm: per_head={self.per_head!r}; it must be a bool "
                              "(True: over each head's D channels, False: over the whole "
                              "projection).")


def qk_norm_to_json(value: QKNorm | None) -> dict[str, Any] | None:
    return None if value is None else {"kind": value.kind, "eps": value.eps,
                                       "per_head": value.per_head}


def qk_norm_from_json(value: Any) -> QKNorm | None:
    if value is None or isinstance(value, QKNorm):
        return value
    if isinstance(value, dict) and set(value) <= {"kind", "eps", "per_head"}:
        return QKNorm(**value)
    raise ConfigError(f"qk_norm={value!r}: expected null or {{'kind': 'rms' or 'layer', 'eps': "
                      "..., 'per_head': true or false}.")


def _positive(owner: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
            value) or value <= 0:
        raise ConfigError(f"Invalid {owner}: {name}={value!r}; it must be a finite number > 0.")


@dataclass(frozen=True)
class AttentionSpec:
    """The attention a subject implements (docs/design.md, "The attention spec").

    ```python
    AttentionSpec(n_embd=64, n_head=8, n_kv_head=2, positions=RoPE())   # Llama-style GQA
    AttentionSpec(n_embd=64, n_head=8, window=16)                        # Mistral-style
    AttentionSpec(n_embd=64, n_head=8, n_kv_head=3)   # ConfigError: ... 1, 2, 4, 8.
    ```

    - `n_embd`: C, the residual width.
    - `n_head`: H, the query heads.
    - `n_kv_head`: G, the key/value heads (None: G = H). H % G == 0; query head h reads
      key/value head h // (H / G). G = 1 is multi-query attention.
    - `head_dim`: D (None: C / H, and then C % H == 0). When given, the q and o projections
      are H·D wide, which need not be C (Gemma).
    - `window`: key j is visible to query i iff i - window < j <= i (None: every j <= i).
    - `scale`: the score scale (None: 1 / sqrt(D)).
    - `softcap`: scores become softcap * tanh(scores / softcap) before masking (Gemma-2).
    - `positions`: None, `RoPE(...)` or `ALiBi()`.
    - `bias`: whether the q, k, v and o projections have biases.
    - `qk_norm`: None or `QKNorm(...)`: q and k normalised after projection, before RoPE; the
      subject exports `q_norm_weight`, `k_norm_weight` (and, for kind="layer", `q_norm_bias`,
      `k_norm_bias`): (D,) each per head, else (H·D,) and (G·D,).
    - `sinks`: learned attention sinks (gpt-oss): head h's exported logit `sinks[h]` joins every
      row's softmax as one more key with no value, so a row's weights sum to less than 1 (and a
      row that sees no key gives 0): out_i = sum_j p_ij v_j, p_i = softmax([s_i, sinks[h]])[:-1].
    """

    n_embd: int
    n_head: int
    n_kv_head: int | None = None
    head_dim: int | None = None
    window: int | None = None
    scale: float | None = None
    softcap: float | None = None
    positions: RoPE | ALiBi | None = field(default=None)
    bias: bool = True
    qk_norm: QKNorm | None = None
    sinks: bool = False

    def __post_init__(self) -> None:
        what = f"Invalid attention spec (n_embd={self.n_embd!r}, n_head={self.n_head!r}"
        if self.head_dim is None:
            check_config(self.n_embd, self.n_head)
        else:
            _check_count("n_embd", self.n_embd)
            _check_count("n_head", self.n_head)
            _check_count("head_dim", self.head_dim)
        if self.n_kv_head is not None:
            _check_count("n_kv_head", self.n_kv_head)
            if self.n_head % self.n_kv_head != 0:
                raise DivisibilityError(
                    f"{what}, n_kv_head={self.n_kv_head}): n_head must be divisible by "
                    f"n_kv_head, since each key/value head serves n_head / n_kv_head query "
                    f"heads, and {self.n_head}/{self.n_kv_head} is not a whole number. "
                    f"n_kv_head values that divide n_head={self.n_head}: "
                    f"{', '.join(map(str, divisors(self.n_head)))}.")
        if self.window is not None:
            _check_count("window", self.window)
        if self.scale is not None:
            _positive("attention spec", "scale", self.scale)
        if self.softcap is not None:
            _positive("attention spec", "softcap", self.softcap)
        if self.positions is not None and not isinstance(self.positions, RoPE | ALiBi):
            raise ConfigError(f"{what}): positions={self.positions!r}; it must be None, "
                              "attnspec.RoPE(...) or attnspec.ALiBi().")
        if isinstance(self.positions, RoPE):
            D = self.D
            rotary = self.positions.rotary_dim(D)
            if rotary < 2 or rotary % 2:
                even = sorted({f for f in (0.25, 0.5, 1.0) if int(D * f) >= 2
                               and int(D * f) % 2 == 0})
                hint = (f"fractions that work for D={D}: {', '.join(map(str, even))}" if even
                        else f"D={D} has no even number of channels >= 2 to rotate")
                raise ConfigError(
                    f"{what}, head_dim={D}, RoPE fraction={self.positions.fraction}): RoPE "
                    f"rotates channel pairs, so int(head_dim * fraction) = {rotary} must be "
                    f"even and >= 2; {hint}.")
            if isinstance(self.positions.scaling, DynamicNTK) and rotary < 4:
                raise ConfigError(
                    f"{what}, head_dim={D}, RoPE fraction={self.positions.fraction}): dynamic "
                    f"NTK raises the base to r / (r - 2) for the r = {rotary} rotated channels, "
                    "so r must be at least 4: a larger head_dim or fraction.")
        if isinstance(self.positions, ALiBi) and self.positions.slopes is not None and len(
                self.positions.slopes) != self.n_head:
            raise ConfigError(
                f"{what}): ALiBi has {len(self.positions.slopes)} slopes, but each of the "
                f"n_head={self.n_head} query heads needs its own: give {self.n_head} slopes, or "
                "slopes=None for the paper's.")
        if not isinstance(self.bias, bool):
            raise ConfigError(f"{what}): bias={self.bias!r}; it must be a bool.")
        if self.qk_norm is not None and not isinstance(self.qk_norm, QKNorm):
            raise ConfigError(f"{what}): qk_norm={self.qk_norm!r}; it must be None or "
                              "attnspec.QKNorm(kind='rms' or 'layer', eps=..., per_head=...).")
        if not isinstance(self.sinks, bool):
            raise ConfigError(f"{what}): sinks={self.sinks!r}; it must be a bool (True: one "
                              "learned sink logit per head joins each softmax, exported as "
                              "'sinks' of shape (n_head,)).")

    @property
    def G(self) -> int:
        """The key/value heads."""
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def D(self) -> int:
        """The channels of one head."""
        return self.n_embd // self.n_head if self.head_dim is None else self.head_dim

    @property
    def attn_scale(self) -> float:
        """The factor applied to q·k."""
        return 1.0 / math.sqrt(self.D) if self.scale is None else float(self.scale)

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """The exported weights' shapes (nn.Linear layout), the biases', and those the spec's
        extras add (q/k norm weights)."""
        C, H, G, D = self.n_embd, self.n_head, self.G, self.D
        shapes = {"q_weight": (H * D, C), "k_weight": (G * D, C), "v_weight": (G * D, C),
                  "o_weight": (C, H * D), "q_bias": (H * D,), "k_bias": (G * D,),
                  "v_bias": (G * D,), "o_bias": (C,)}
        if self.qk_norm is not None:
            q, k = ((D,), (D,)) if self.qk_norm.per_head else ((H * D,), (G * D,))
            shapes |= {"q_norm_weight": q, "k_norm_weight": k}
            if self.qk_norm.kind == "layer":
                shapes |= {"q_norm_bias": q, "k_norm_bias": k}
        if self.sinks:
            shapes["sinks"] = (H,)
        return shapes

    def required_weights(self) -> tuple[str, ...]:
        """The exported weights the reference cannot do without (the projections' biases may
        be left out: zero)."""
        extra = tuple(k for k in self.weight_shapes() if k in EXTRA_WEIGHT_KEYS)
        return ("q_weight", "k_weight", "v_weight", "o_weight", *extra)

    def describe(self) -> str:
        """The fields that differ from plain multi-head attention, for messages."""
        parts = [f"C={self.n_embd}", f"H={self.n_head}"]
        for f in fields(self)[2:]:
            value = getattr(self, f.name)
            if value != f.default:
                parts.append(f"{f.name}={value!r}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        """The spec as JSON (reports and replays), defaults left out."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value == f.default and f.name not in ("n_embd", "n_head"):
                continue
            out[f.name] = _TO_JSON.get(f.name, lambda v: v)(value)
        return out

    @classmethod
    def from_json(cls, data: Any) -> AttentionSpec:
        """The spec from `to_json`'s form; a malformed one raises ConfigError saying why."""
        if not isinstance(data, dict):
            raise ConfigError(f"an attention spec must be a JSON object, not {data!r}.")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown attention spec fields {unknown}; the fields are "
                              f"{', '.join(sorted(known))}.")
        values = dict(data)
        values["positions"] = positions_from_json(values.get("positions"))
        values["qk_norm"] = qk_norm_from_json(values.get("qk_norm"))
        try:
            return cls(**values)
        except TypeError as error:
            raise ConfigError(f"attention spec {data!r}: {error}") from None


def positions_to_json(value: RoPE | ALiBi | None) -> dict[str, Any] | None:
    if isinstance(value, RoPE):
        out = {"kind": "rope", "theta": value.theta, "fraction": value.fraction,
               "interleaved": value.interleaved}
        if value.scaling is not None:  # left out when None: replays from before it still match
            kind = next(k for k, c in _SCALINGS.items() if isinstance(value.scaling, c))
            out["scaling"] = {"kind": kind, **{f.name: getattr(value.scaling, f.name)
                                               for f in fields(value.scaling)}}
        return out
    if isinstance(value, ALiBi):
        return {"kind": "alibi"} if value.slopes is None else {"kind": "alibi",
                                                               "slopes": list(value.slopes)}
    return None


def scaling_from_json(value: Any) -> RoPEScaling:
    if isinstance(value, dict) and value.get("kind") in _SCALINGS:
        cls = _SCALINGS[value["kind"]]
        rest = {k: v for k, v in value.items() if k != "kind"}
        names = {f.name for f in fields(cls)}
        if set(rest) <= names:
            try:
                scaling: RoPEScaling = cls(**rest)
            except TypeError as error:
                raise ConfigError(f"RoPE scaling={value!r}: {error}.") from None
            return scaling
        raise ConfigError(f"RoPE scaling={value!r}: unknown fields "
                          f"{sorted(set(rest) - names)}; {cls.__name__}'s are {sorted(names)}.")
    raise ConfigError(f"RoPE scaling={value!r}: expected {{'kind': one of "
                      f"{', '.join(map(repr, _SCALINGS))}, ...its fields}}.")


def positions_from_json(positions: Any) -> RoPE | ALiBi | None:
    if positions is None:
        return None
    if isinstance(positions, dict):
        kind = positions.get("kind")
        rest = {k: v for k, v in positions.items() if k != "kind"}
        if kind == "rope" and set(rest) <= {"theta", "fraction", "interleaved", "scaling"}:
            if rest.get("scaling") is not None:
                rest["scaling"] = scaling_from_json(rest["scaling"])
            return RoPE(**rest)
        if kind == "alibi" and set(rest) <= {"slopes"}:
            return ALiBi(**rest)
    raise ConfigError(f"positions={positions!r}: expected null, {{'kind': 'rope', 'theta': ..., "
                      "'fraction': ..., 'interleaved': ...} or {'kind': 'alibi', 'slopes': null "
                      "or [one per head]}.")


# The weights a spec's extras add to the projections' (exported only where the spec has them).
EXTRA_WEIGHT_KEYS = ("q_norm_weight", "k_norm_weight", "q_norm_bias", "k_norm_bias", "sinks")

_TO_JSON: dict[str, Any] = {"positions": positions_to_json, "qk_norm": qk_norm_to_json}

# The fields a protocol v2 subject may let vary (VARIANTS); n_embd and n_head always do.
VARIABLE_FIELDS = ("n_kv_head", "head_dim", "window", "scale", "softcap", "positions", "bias",
                   "qk_norm", "sinks")


def parse_variants(declared: Any) -> dict[str, Any]:
    """A subject's VARIANTS, checked, in JSON form: field -> "any" or a list of its values.

    `{"n_kv_head": "any", "positions": [RoPE()]}`: attnspec draws n_kv_head from its own range
    and positions from the list; every field not named keeps its default (plain attention).
    """
    if not isinstance(declared, dict):
        raise ConfigError(f"VARIANTS must be a dict of spec field -> 'any' or a list of values, "
                          f"not {type(declared).__name__}.")
    out: dict[str, Any] = {}
    for name, values in declared.items():
        if name not in VARIABLE_FIELDS:
            raise ConfigError(f"VARIANTS names {name!r}; the fields that can vary are "
                              f"{', '.join(VARIABLE_FIELDS)}.")
        if values == "any":
            out[name] = "any"
            continue
        if isinstance(values, str) or not hasattr(values, "__iter__"):
            raise ConfigError(f"VARIANTS[{name!r}] = {values!r}: give 'any' or a list of values.")
        listed = list(values)
        if not listed:
            raise ConfigError(f"VARIANTS[{name!r}] is empty: list at least one value.")
        if name == "positions":
            bad = [v for v in listed if v is not None and not isinstance(v, RoPE | ALiBi)]
            if bad:
                raise ConfigError(f"VARIANTS['positions'] lists {bad!r}; its values are None, "
                                  "attnspec.RoPE(...) and attnspec.ALiBi().")
            out[name] = [positions_to_json(v) for v in listed]
        elif name == "qk_norm":
            bad = [v for v in listed if v is not None and not isinstance(v, QKNorm)]
            if bad:
                raise ConfigError(f"VARIANTS['qk_norm'] lists {bad!r}; its values are None and "
                                  "attnspec.QKNorm(...).")
            out[name] = [qk_norm_to_json(v) for v in listed]
        else:
            out[name] = listed
    return out
