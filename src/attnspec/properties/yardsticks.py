"""Yardsticks that fit the subject: exports, trained-scale weights, the path oracles."""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..reference import core
from ..reference.spec import AttentionSpec, RoPE
from ..reference.variants import spec_heads
from . import tolerance as tol

if TYPE_CHECKING:
    pass



from .base import Context, Example, Outcome, SubjectFault, _at, _fail, _reference_weights

# Without exports, the yardstick also covers logits of this spread (trained models show 3 to 10;
# attnspec's own random weights about 0.3): rounding grows with the logits.
TRAINED_LOGIT_STD = 10.0


def _has_export(ctx: Context) -> bool:
    return bool(getattr(getattr(ctx.executor, "info", None), "has_export", False))


def _exported(ctx: Context, ex: Example) -> dict[str, Tensor] | None:
    """The subject's own weights (checked against the spec), or None without export_weights."""
    if not _has_export(ctx):
        return None
    # The input scale is no part of the build: _fitted_scale's export serves the check's too.
    key = json.dumps(ex.build(), sort_keys=True)
    if key not in ctx.exports:
        (exported,) = ctx.request(ex, [{"op": "export"}])
        ctx.exports[key] = _checked_weights(exported, ex)
    return ctx.exports[key]


def logit_std(x: Tensor, weights: Mapping[str, Tensor], spec: AttentionSpec) -> float:
    """The spread of the scores q.k x scale on `x` (before positions, caps and masks)."""
    unplaced = dataclasses.replace(spec, positions=None)  # the scores before any positions
    with torch.no_grad():
        q, k, _ = spec_heads(x.detach().double().cpu(), {
            name: w.double().cpu() for name, w in weights.items()}, unplaced, 0)
        scores = core.scores_of(q, core.repeat_kv(k, spec.n_head), spec.attn_scale)
    return float(scores.std()) if scores.numel() > 1 else float(scores.abs().max())


def _trained(weights: Mapping[str, Tensor], x: Tensor, spec: AttentionSpec,
             ) -> dict[str, Tensor] | None:
    """`weights` with q and k scaled so that the logits on `x` spread TRAINED_LOGIT_STD
    (None where they already spread that much, or not at all)."""
    spread = logit_std(x, weights, spec)
    if not 0 < spread < TRAINED_LOGIT_STD:
        return None
    m = math.sqrt(TRAINED_LOGIT_STD / spread)
    # With q/k norms the projections' scale is normalised away: the norms' own weights count.
    names = ("q_norm_weight", "k_norm_weight", "q_norm_bias", "k_norm_bias") if (
        spec.qk_norm is not None) else ("q_weight", "k_weight", "q_bias", "k_bias")
    return {**weights, **{k: weights[k] * m for k in names if k in weights}}


def _yardstick_weights(ctx: Context, ex: Example, x: Tensor,
                       ) -> tuple[list[dict[str, Tensor]], dict[str, Tensor] | None]:
    """The weights a yardstick is measured on, and the subject's own where it exports them.

    With exports, the subject's own weights: its logits make its rounding. Without, attnspec's
    random weights and the same with q and k scaled to trained logits (TRAINED_LOGIT_STD): the
    yardstick is the larger reference discrepancy of the two, so it holds for small and for
    trained weights alike (a subject whose logits spread wider should export its weights)."""
    own = _exported(ctx, ex)
    if own is not None:
        return [own], own
    base = _reference_weights(ex)
    trained = _trained(base, x, ex.attention)
    return [base, *([trained] if trained is not None else [])], None


_FEATURES = ("softcap", "window", "scale", "qk_norm", "sinks", "scaling", "positions")


def _without(spec: AttentionSpec, name: str) -> tuple[str, AttentionSpec] | None:
    """(what, the spec without that feature), or None where the spec has no such feature."""
    value = getattr(spec.positions, "scaling", None) if name == "scaling" else getattr(
        spec, name, None)
    if value is None or value is False:
        return None
    if name == "scaling":
        assert isinstance(spec.positions, RoPE)
        return (f"the RoPE scaling ({type(value).__name__})",
                dataclasses.replace(spec, positions=dataclasses.replace(spec.positions,
                                                                        scaling=None)))
    what = (f"the soft cap ({value:g})" if name == "softcap" else
            f"the window ({value})" if name == "window" else
            f"the custom scale ({value:g}; 1/sqrt(D) is used)" if name == "scale" else
            f"the q/k norm ({value.kind})" if name == "qk_norm" else
            "the attention sinks" if name == "sinks" else type(value).__name__)
    return what, dataclasses.replace(spec, **{name: False if name == "sinks" else None})  # type: ignore[arg-type]


def _dropped_feature(spec: AttentionSpec, out: Tensor, allowed: float, path: str,
                     reference: Callable[[AttentionSpec], Tensor]) -> str:
    """Which feature of `spec` the path dropped: the first spec without one whose reference
    (float64, the subject's weights) matches `out` by the rule; or that none does."""
    tried = []
    for name in _FEATURES:
        try:
            found = _without(spec, name)
        except Exception:  # noqa: BLE001 (a spec without it may be no spec: not this one)
            continue
        if found is None:
            continue
        what, spec_without = found
        tried.append(what)
        try:
            alt = reference(spec_without)
        except Exception:  # noqa: BLE001 (the reference may need what the spec dropped)
            continue
        if alt.shape == out.shape and tol.max_abs_diff(out, alt)[0] <= allowed:
            return f"the {path} path drops {what}: its outputs are the reference's without it"
    if not tried:
        return f"the {path} path is off, and the spec has no optional feature it could drop"
    return (f"the {path} path is off, and dropping no single feature ({', '.join(tried)}) "
            "explains it")


def _path_oracle(path: str, got: Tensor, golden: Tensor, yard: float, ex: Example,
                 reference: Callable[[AttentionSpec], Tensor], what: str) -> Outcome | None:
    """A hook path's outputs against the reference's own function for that path, on the
    subject's exported weights, by the rule; the failure names the path and the feature."""
    err, index = tol.max_abs_diff(got, golden)
    scale = float(golden.abs().max()) if golden.numel() else 1.0
    allowed = tol.allowed(yard, ex.dtype, scale)
    if not err > allowed:
        return None
    cause = _dropped_feature(ex.attention, got, allowed, path, reference)
    index = index if got.dim() == 3 else None  # a flat index (real tokens) names no (b, t, c)
    return _fail(f"{what} differs from the reference's {path} path on the subject's exported "
                 f"weights by {err:.3g} (allowed {allowed:.3g}, {tol.K:g} x the reference's own "
                 f"{ex.dtype} error there + floor){_at(index)}: {cause}.", err, allowed, index)


# Exported magnitudes beyond this are no trained or initialised weight: torch.empty's garbage.
_UNINITIALISED = 1e6


def missing_biases(weights: Collection[str], ex: Example) -> list[str]:
    """The projections' biases a spec with biases has and an export left out (Qwen2's o_proj
    has none): each counts as zero."""
    if not ex.attention.bias:
        return []
    return [f"{n}_bias" for n in "qkvo" if f"{n}_bias" not in weights]


def _checked_weights(result: Mapping[str, Any], ex: Example) -> dict[str, Tensor]:
    """The exported weights, checked against the spec: its keys (`weight_shapes`, the authority),
    their shapes, the declared bias, and values that an initialised parameter has."""
    weights: dict[str, Tensor] = result["weights"]
    spec = ex.attention
    shapes = spec.weight_shapes()
    unknown = [k for k in [*result.get("unknown", ()), *weights] if k not in shapes]
    if unknown:
        hints = "".join(f" ({k!r}: did you mean {g[0]!r}?)" for k in unknown
                        if (g := difflib.get_close_matches(k, list(shapes), n=1)))
        raise SubjectFault(f"export_weights returned {', '.join(map(repr, unknown))}, which "
                           f"{'is' if len(unknown) == 1 else 'are'} no weight of this spec"
                           f"{hints}; the keys are {', '.join(shapes)}.")
    missing = [key for key in spec.required_weights() if key not in weights]
    if missing:
        raise SubjectFault(f"export_weights gave no {', '.join(missing)} (keys: "
                           f"{', '.join(sorted(weights))}); the spec ({spec.describe()}) needs "
                           "them for the reference.")
    for key, value in weights.items():
        want = shapes.get(key)
        if tuple(value.shape) != want:
            what = (f"C = n_embd = {ex.C}" if ex.spec is None else
                    f"C={spec.n_embd}, H={spec.n_head}, G={spec.G}, D={spec.D}: q (H·D, C), "
                    "k and v (G·D, C), o (C, H·D)")
            raise SubjectFault(f"export_weights: {key} is {tuple(value.shape)}, but must be "
                               f"{want} ({what}, nn.Linear layout).")
    if spec.bias:  # a bias left out is none (zero), as it always was: a wrapper keeps its verdict
        for key in missing_biases(weights, ex):
            like = weights[f"{key[0]}_weight"]
            weights = {**weights, key: torch.zeros(shapes[key], dtype=like.dtype,
                                                   device=like.device)}
    for key, value in weights.items():
        value = value.detach()
        bad = ~torch.isfinite(value)
        big = float(value.abs().masked_fill(bad, 0).max()) if value.numel() else 0.0
        if bool(bad.any()) or big > _UNINITIALISED:
            index = tuple(int(i) for i in (bad if bool(bad.any()) else
                                           value.abs() > _UNINITIALISED).nonzero()[0])
            found = (f"{int(bad.sum())} non-finite values (first {float(value[index]):g} at "
                     f"index {index})" if bool(bad.any()) else
                     f"magnitudes up to {big:.3g} (at index {index}), beyond {_UNINITIALISED:g}")
            raise SubjectFault(f"export_weights: {key} has {found}: the parameter is probably "
                               "left uninitialised (torch.empty, or a module built on the meta "
                               "device), or a load failed; initialise it in build "
                               "(reset_parameters() or nn.init).")
    return weights
