"""Weights found by name, confirmed: a guess (runner/finder.py) counts only where the reference
with its weights reproduces the subject, on a one-token probe (where attention is v projected
through o, whatever the scores) and on a longer one, each by the oracle's rule."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..reference.spec import (
    VARIABLE_FIELDS,
    AttentionSpec,
    positions_from_json,
    qk_norm_from_json,
)
from . import tolerance as tol
from .base import (
    Context,
    Example,
    SubjectFault,
    Unfound,
    Unsupported,
    _reference,
    seeded_normal,
)
from .diagnose import diagnose
from .yardsticks import _checked_weights

__all__ = ["Found", "find_weights", "probe_examples"]

PROBE_T = 7  # the longer probe: enough positions for the scores to matter
_SALT = 31_000  # the probes' inputs, apart from every property's
# (C, H) tried for the probe, most telling first: H >= 2 tells a fused [q|k|v] from GPT-NeoX's
# per-head interleave, D >= 2 an interleave of q and k.
_SIZES = ((12, 3), (8, 2), (16, 4), (16, 2), (32, 2), (24, 3), (64, 4), (6, 2), (4, 2),
          (2, 2), (4, 1), (2, 1), (1, 1))
_TRIES = 6  # probe builds at most, before giving up on finding weights


@dataclass
class Found:
    """What the search found: the candidate kept (None: none), and what was tried."""

    ident: str | None = None
    describe: str | None = None
    tried: list[str] = field(default_factory=list)
    why: str = ""  # why nothing was found, in one clause (the oracle's skip reason)

    def header(self) -> dict[str, Any]:
        if self.ident is not None:
            return {"source": "found by name", "found": self.describe}
        return {"source": "none", "why": self.why, "tried": self.tried}


def _spec_fields(variants: Mapping[str, Any] | None) -> dict[str, Any]:
    """A v2 subject's spec fields for the probe: each listed field's first value."""
    fields: dict[str, Any] = {}
    for name, values in (variants or {}).items():
        if name not in VARIABLE_FIELDS or values == "any" or not values:
            continue
        value = values[0]
        if name == "positions":
            value = positions_from_json(value)
        elif name == "qk_norm":
            value = qk_norm_from_json(value)
        fields[name] = value
    return fields


def probe_examples(protocol: int | str, variants: Mapping[str, Any] | None,
                   supported: Sequence[tuple[int, int]] | None, dtype: str, device: str,
                   sizes: tuple[int, int, int]) -> Iterator[Example]:
    """The probe's examples, most telling first, within the run's bounds and what the subject
    says it supports."""
    max_heads, max_head_dim, max_width = sizes
    fields = _spec_fields(variants) if protocol == 2 else {}
    pairs = [(c, h) for c, h in _SIZES if h <= max_heads and c // h <= max_head_dim
             and c <= max_width]
    if supported is not None:
        allowed = set(supported)
        pairs = [p for p in pairs if p in allowed] or sorted(
            allowed, key=lambda p: (p[1] < 2, p[0]))[:_TRIES]
    for C, H in pairs:
        spec = None
        if protocol == 2:
            try:
                spec = AttentionSpec(C, H, **fields)
            except (ValueError, TypeError):  # a listed value that needs other sizes
                continue
        yield Example(B=2, T=PROBE_T, C=C, H=H, dtype=dtype, device=device, seed=0, spec=spec)


def _judge(ex: Example, weights: dict[str, Tensor], x: Tensor, out: Tensor,
           ) -> tuple[float, float, Tensor]:
    """(error, allowance, golden) of the subject's output against the reference's."""
    golden = _reference(x, weights, ex, torch.float64)
    yard = tol.max_abs_diff(_reference(x, weights, ex), golden)[0]
    allowed = tol.allowed(yard, ex.dtype, float(golden.abs().max()) if golden.numel() else 1.0)
    return tol.max_abs_diff(out, golden)[0], allowed, golden


def find_weights(run: Callable[[Example, list[dict[str, Any]]], list[Any]],
                 examples: Iterator[Example]) -> Found:
    """The first guess whose weights reproduce the subject at T = 1 and T = PROBE_T.

    `run(ex, steps)`: the results of one request to the worker (raises the subject's faults
    as Context.request does)."""
    found = Found()
    tries = 0
    for ex in examples:
        if tries == _TRIES:
            break
        tries += 1
        short = seeded_normal(0, (ex.B, 1, ex.C), salt=_SALT, dtype=_dtype(ex))
        long = seeded_normal(0, (ex.B, ex.T, ex.C), salt=_SALT + 1, dtype=_dtype(ex))
        try:
            guesses, out_short, out_long = run(ex, [
                {"op": "find_weights"}, {"op": "forward", "x": short},
                {"op": "forward", "x": long}])
        except (Unsupported, Unfound):
            continue  # supports(spec) declined this probe: another size
        except SubjectFault as fault:
            found.why = f"the probe's module ({ex.describe()}) could not be run: {fault}"
            return found
        candidates = guesses["candidates"]
        if not candidates:
            found.why = ("no projections were found by name (q_proj/k_proj/v_proj/o_proj, "
                         "query/key/value, to_q/to_k/to_v/to_out, wq/wk/wv/wo, c_attn+c_proj, "
                         "qkv/Wqkv/query_key_value, nn.MultiheadAttention)")
            return found
        for guess in candidates:
            verdict = _confirm(ex, guess, short, long, out_short["out"], out_long["out"])
            if verdict is None:
                found.ident, found.describe = guess["id"], guess["describe"]
                return found
            found.tried.append(f"{guess['describe']}: {verdict}")
        found.why = ("the weights found by name do not reproduce the subject: "
                     + "; ".join(t.rstrip(".") for t in found.tried))
        return found
    found.why = found.why or ("no probe could be built: supports(spec) declined every size "
                              "tried" if tries else "no probe size fits the run's bounds")
    return found


def _dtype(ex: Example) -> torch.dtype:
    from ..common.dtypes import dtype_from_name

    return dtype_from_name(ex.dtype)


def _confirm(ex: Example, guess: Mapping[str, Any], short: Tensor, long: Tensor,
             out_short: Tensor, out_long: Tensor) -> str | None:
    """None where the guess reproduces both probes; else what was off, in one clause."""
    try:
        weights = _checked_weights({"weights": guess["weights"]}, ex)
    except SubjectFault as wrong:
        return f"its weights do not fit the spec ({wrong})"
    if tuple(out_short.shape) != tuple(short.shape) or tuple(out_long.shape) != tuple(long.shape):
        return (f"the module returned {tuple(out_long.shape)} for {tuple(long.shape)}, so "
                "nothing could be compared (see width)")
    err, allowed, _ = _judge(ex, weights, short, out_short)
    if not err <= allowed:
        return f"off by {err:.3g} at T = 1 (allowed {allowed:.3g}), where attention is v and o"
    err, allowed, golden = _judge(ex, weights, long, out_long)
    if not err <= allowed:
        why = diagnose(out_long, long, weights, ex.attention, ex.dtype,
                       float(golden.abs().max()))
        return (f"right at T = 1 (v and o), but off by {err:.3g} at T = {ex.T} (allowed "
                f"{allowed:.3g}): the scores are not the reference's with these q and k. {why}")
    return None


def confirmed_here(ctx: Context, ex: Example, weights: Mapping[str, Tensor],
                   x: Tensor) -> bool:
    """Whether the found weights reproduce this example's module at T = 1 (its v and o): where
    they do not, the module's layout differs from the probe's and nothing can be judged."""
    short = x[:, :1].contiguous()
    (out,) = ctx.forwards_of(ex, [short])
    err, allowed, _ = _judge(ex, dict(weights), short, out)
    return err <= allowed


def module_hint(run: Callable[[Example, list[dict[str, Any]]], list[Any]],
                examples: Iterator[Example]) -> str | None:
    """A one-line hint where what build returns cannot be a subject as it stands (None: it may
    be): torch.nn.MultiheadAttention, whose forward takes (query, key, value) and returns a
    tuple, is the common one."""
    for ex in list(examples)[:_TRIES]:
        try:
            (kind,) = run(ex, [{"op": "module_type"}])
        except (Unsupported, Unfound):
            continue
        except SubjectFault:
            return None  # the properties say what build does wrong, each with its example
        if kind["mha"]:
            return ("build returns torch.nn.MultiheadAttention, whose forward takes (query, key, "
                    "value) and returns (output, weights): wrap it in a module whose forward(x) "
                    "returns self.mha(x, x, x, attn_mask=torch.ones(T, T, dtype=torch.bool, "
                    "device=x.device).triu(1), need_weights=False)[0] (T = x.size(1))")
        return None
    return None
