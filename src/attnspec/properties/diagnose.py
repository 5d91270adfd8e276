"""Diagnosis of an oracle failure: which common mistake, if any, the subject's output is.

Run only after a failure. Each hypothesis is an alternative spec and/or exported weights (or,
with the default reference, an alternative normalisation of the scores) run through the float64
reference on the example's own input: one forward each, on small shapes, so a diagnosis costs
milliseconds (docs/design.md §4, `oracle`).

**The criterion.** A hypothesis explains the output when both hold:

1. it passes the oracle's own rule had the spec declared it: max|out - hypothesis in float64|
   <= K x (the hypothesis' reference in the subject's dtype against its float64) + floor, and
2. it is at least `GAIN` (10) times closer to the output than the declared spec is, so that a
   failure just past the allowance is not "explained" by a change that barely moves the output.

The hypotheses are tried in a fixed order, the commonest mistakes first, and the first that
explains the output is named (two that both explain it are alike on this input). When none
does, the sentence lists those tried, and a golden-section fit of the score scale is reported
as the nearest if it meets (2).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..common.dtypes import dtype_from_name
from ..reference import core
from ..reference.module import merge_heads
from ..reference.pieces import shifted_keys, spec_raw_scores, spec_window
from ..reference.spec import ALiBi, AttentionSpec, RoPE
from ..reference.variants import repeat_kv, spec_attention, spec_heads
from . import tolerance as tol

__all__ = ["GAIN", "Reference", "diagnose", "grouped_weights"]

Reference = Callable[[AttentionSpec, Mapping[str, Tensor]], Tensor]
"""reference(spec, weights): the output of the path checked, computed in the weights' dtype
(the function casts its own inputs, x and masks, to it)."""

GAIN = 10.0  # how many times closer than the declared spec a hypothesis must come

_THETAS = (10_000.0, 500_000.0, 1_000_000.0)
_CAPS = (20.0, 30.0, 50.0)
_FIT_STEPS = 12  # golden-section steps on log(scale): the bracket shrinks to 0.3% of 64x
_INV_PHI = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class _Hypothesis:
    label: str  # what it says, as the sentence's subject: "the score scale 0.125 = 1/D"
    short: str  # its name in the list of those tried: "scale 1/D"
    spec: AttentionSpec
    weights: Mapping[str, Tensor]
    normalise: str = "keys"  # "keys" (softmax over keys), or a wrong normalisation


def grouped_weights(weights: Mapping[str, Tensor], spec: AttentionSpec, k_reads: list[int],
                    v_reads: list[int]) -> tuple[dict[str, Tensor], AttentionSpec]:
    """Weights and an MHA spec in which query head h reads key head k_reads[h] and value head
    v_reads[h]: each query head gets its own copy of those k and v rows."""
    D = spec.D
    out = dict(weights)
    for name, reads in (("k", k_reads), ("v", v_reads)):
        rows = torch.cat([torch.arange(g * D, (g + 1) * D) for g in reads])
        for key in (f"{name}_weight", f"{name}_bias"):
            if key in weights:
                out[key] = weights[key][rows]
    return out, dataclasses.replace(spec, n_kv_head=None)


def _scale_forms(spec: AttentionSpec, T: int) -> dict[str, float]:
    """The scales a subject commonly uses by mistake, by name."""
    D, C = spec.D, spec.n_embd
    forms = {"1/sqrt(D)": 1 / math.sqrt(D), "1/D": 1 / D, "1/sqrt(C)": 1 / math.sqrt(C),
             "1": 1.0, "1/sqrt(H·D)": 1 / math.sqrt(spec.n_head * D),
             "1/sqrt(G·D)": 1 / math.sqrt(spec.G * D), "sqrt(D)": math.sqrt(D)}
    if T > 1:
        forms["1/sqrt(T)"] = 1 / math.sqrt(T)
    if spec.scale is not None:
        forms["the declared scale squared"] = spec.attn_scale ** 2
    return forms


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def _named(value: float, forms: Mapping[str, float]) -> str:
    """'0.125 = 1/D', or the number alone where no common form equals it."""
    shown = f"{value:.4g}"
    names = [name for name, v in forms.items() if _same(v, value) and name != shown]
    return shown + (f" = {names[0]}" if names else "")


def _swapped(weights: Mapping[str, Tensor], a: str, b: str) -> dict[str, Tensor]:
    out = dict(weights)
    for suffix in ("weight", "bias"):
        ka, kb = f"{a}_{suffix}", f"{b}_{suffix}"
        if ka in weights and kb in weights:
            out[ka], out[kb] = weights[kb], weights[ka]
    return out


def _hypotheses(spec: AttentionSpec, weights: Mapping[str, Tensor], T: int,
                plain: bool) -> Iterator[_Hypothesis]:
    """The discrete hypotheses for this spec (each one forward). `plain`: the default
    reference, which can also run the scores' other normalisations."""
    H, G = spec.n_head, spec.G

    def spec_with(label: str, short: str, **changes: object) -> _Hypothesis:
        changed = dataclasses.replace(spec, **changes)  # type: ignore[arg-type]
        return _Hypothesis(label, short, changed, weights)

    forms = _scale_forms(spec, T)
    declared = _named(spec.attn_scale, forms)
    seen = [spec.attn_scale]
    for name, value in forms.items():
        if not any(_same(value, s) for s in seen):
            seen.append(value)
            yield spec_with(f"the score scale {_named(value, forms)} (declared {declared})",
                            f"scale {name}", scale=value)
    rope = spec.positions
    if isinstance(rope, RoPE):
        style = ("interleaved RoPE, rotating channel pairs (0, 1), (2, 3), ... (GPT-J)",
                 "rotate-half RoPE, rotating channels i and i + rotary_dim / 2 (GPT-NeoX, Llama)")
        other, mine = style[::-1] if rope.interleaved else style
        yield spec_with(f"{other} (declared: {mine.split(',')[0]})",
                        f"interleaved={not rope.interleaved}",
                        positions=dataclasses.replace(rope, interleaved=not rope.interleaved))
        for theta in _THETAS:
            if not _same(theta, rope.theta):
                yield spec_with(f"RoPE theta={theta:g} (declared {rope.theta:g})",
                                f"theta={theta:g}",
                                positions=dataclasses.replace(rope, theta=theta))
        if rope.fraction != 1.0:
            yield spec_with(f"RoPE on all channels, fraction 1 (declared {rope.fraction:g})",
                            "fraction=1", positions=dataclasses.replace(rope, fraction=1.0))
        yield spec_with(f"no RoPE at all (declared {rope!r})", "no RoPE", positions=None)
    if isinstance(rope, ALiBi):
        yield spec_with("no ALiBi bias at all (declared ALiBi())", "no ALiBi", positions=None)
    W = spec.window
    if W is not None:
        if W > 1:
            yield spec_with(f"a window of W - 1 = {W - 1} keys (declared {W}: j > i - W)",
                            "window W-1", window=W - 1)
        yield spec_with(f"a window of W + 1 = {W + 1} keys (declared {W}: j > i - W, so the "
                        "edge j = i - W is out)", "window W+1", window=W + 1)
        yield spec_with(f"no window at all (declared {W})", "no window", window=None)
    if spec.softcap is not None:
        yield spec_with(f"no soft cap (declared softcap={spec.softcap:g})", "no softcap",
                        softcap=None)
    for cap in () if spec.softcap is not None else _CAPS:
        yield spec_with(f"a soft cap of {cap:g} (none declared)", f"softcap {cap:g}",
                        softcap=cap)
    if plain:
        for label, short, how in (
                ("softmax over the query axis (dim=-2) instead of the keys",
                 "softmax over queries", "queries"),
                ("softmax over every key, masked after it (rows sum to less than one)",
                 "masked after softmax", "after"),
                ("exp(scores - row max) never divided by the row's sum (rows do not sum to "
                 "one)", "unnormalised exp", "unnormalised"),
                ("the reference with the diagonal shifted by one: each query also sees the next "
                 "key (the mask is one position off: tril(diagonal=1))", "diagonal +1", "next"),
                ("the reference with the diagonal shifted by one: each query misses its own key "
                 "(the mask is one position off: tril(diagonal=-1))", "diagonal -1", "own")):
            yield _Hypothesis(label, short, spec, weights, how)
    if 1 < G < H:
        grouped = [h // (H // G) for h in range(H)]
        tiled = [h % G for h in range(H)]
        for label, short, k_reads, v_reads in (
                ("keys and values tiled: query head h reads kv head h % G (repeat, not "
                 "repeat_interleave)", "k/v tiled", tiled, tiled),
                ("values tiled (h % G) while keys are grouped (h // (H/G))", "v tiled",
                 grouped, tiled),
                ("keys tiled (h % G) while values are grouped (h // (H/G))", "k tiled",
                 tiled, grouped)):
            w, mha = grouped_weights(weights, spec, k_reads, v_reads)
            yield _Hypothesis(label, short, mha, w)
    yield _Hypothesis("keys and values swapped (k_weight used as v, v_weight as k)",
                      "k/v swapped", spec, _swapped(weights, "k", "v"))
    if G == H:
        yield _Hypothesis("queries and keys swapped (q_weight used as k and k_weight as q: the "
                          "transposed scores)", "q/k swapped", spec, _swapped(weights, "q", "k"))
    if any(bool(v.detach().any()) for k, v in weights.items() if k.endswith("_bias")):
        yield _Hypothesis("the projections' biases never added (exported, but unused in "
                          "forward)", "biases unused", spec,
                          {k: v for k, v in weights.items() if not k.endswith("_bias")})
    projections = [f"{n}_weight" for n in "qkvo"]
    if all(weights[k].dim() == 2 and weights[k].size(0) == weights[k].size(1)
           for k in projections):
        yield _Hypothesis("export_weights handing out weight.T (the x @ W layout, not "
                          "nn.Linear's (out, in))", "weights transposed", spec,
                          {k: v.T if k in projections else v for k, v in weights.items()})


def _normalised(x: Tensor, weights: Mapping[str, Tensor], spec: AttentionSpec, how: str,
                ) -> Tensor:
    """The reference with the scores normalised the wrong way `how` (queries, after, or
    unnormalised) or masked one position off (next, own), in x's dtype: every other step is
    the reference's own (projection, q/k norms, RoPE, scores, softmax over keys, attend)."""
    H = spec.n_head
    q, k, v = spec_heads(x, weights, spec, 0)
    k, v = repeat_kv(k, H), repeat_kv(v, H)
    raw = spec_raw_scores(q, k, spec, signed=True)  # as the mutants' subjects tilt
    T = x.size(1)
    index = torch.arange(T, device=x.device)
    seen = (shifted_keys(T, spec.window, how, x.device) if how in ("next", "own") else
            core.visible_keys(index, index, True, spec_window(spec.window), None))
    masked = core.masked(raw, seen)
    if how in ("next", "own"):
        attention = core.softmax_keys(masked, None).nan_to_num(0.0)  # a row with no key: 0
    elif how == "queries":
        attention = torch.softmax(masked, dim=-2)
    elif how == "after":
        attention = core.softmax_keys(raw, None) * seen[:, None]
    else:
        attention = (masked - masked.amax(dim=-1, keepdim=True)).exp()
    y = merge_heads(core.attend(attention, v))
    return F.linear(y, weights["o_weight"], weights.get("o_bias"))


def diagnose(out: Tensor, x: Tensor, weights: Mapping[str, Tensor], spec: AttentionSpec,
             dtype: str, scale: float, reference: Reference | None = None) -> str:
    """The sentence for an oracle failure: which hypothesis explains `out` (the subject's output
    on `x` with exported `weights`), or that none of those tried does.

    `dtype`: the subject's dtype name; `scale`: the magnitude the tolerance rule scales its floor
    by (max|golden|, as the oracle's). `reference(spec, weights)`: the path's reference, e.g.
    padded or decode (default: `spec_attention` on x); it computes in its weights' dtype."""
    got = out.detach().cpu().to(torch.float64)
    if not bool(got.isfinite().all()):
        return "The output is not finite, so no diagnosis was tried (see finite)."
    x64 = x.detach().cpu().to(torch.float64)
    w64 = {k: v.detach().cpu().to(torch.float64) for k, v in weights.items()}
    plain = reference is None
    run: Reference = reference or (lambda s, w: spec_attention(
        x64.to(next(iter(w.values())).dtype), w, s))
    low = dtype_from_name(dtype)

    def forward(h: _Hypothesis, dt: torch.dtype = torch.float64) -> Tensor:
        w = {k: v.to(dt) for k, v in h.weights.items()}
        with torch.no_grad():
            if h.normalise != "keys":
                return _normalised(x64.to(dt), w, h.spec, h.normalise).to(torch.float64)
            return run(h.spec, w).detach().cpu().to(torch.float64)

    def error(h: _Hypothesis) -> float:
        return tol.max_abs_diff(got, forward(h))[0]

    def explains(h: _Hypothesis, err: float) -> float | None:
        """The rule's allowance where h explains the output by both tests, else None."""
        if not err * GAIN <= declared_err:
            return None
        yard = tol.max_abs_diff(forward(h, low), forward(h))[0]
        allowed = tol.allowed(yard, dtype, scale)
        return allowed if err <= allowed else None

    declared = _Hypothesis("the declared spec", "declared", spec, w64)
    declared_err = error(declared)
    tried = []
    for h in _hypotheses(spec, w64, x.size(1), plain):  # the likeliest first: stop at a fit
        err = error(h)
        tried.append(h)
        allowed = explains(h, err)
        if allowed is not None and h.short == "k/v tiled":
            alone = next(v for v in _hypotheses(spec, w64, x.size(1), False)
                         if v.short == "v tiled")
            if explains(alone, error(alone)) is not None:  # the keys leave no trace here
                h = dataclasses.replace(h, label="values tiled (h % G), the kv head the keys "
                                        "come from not showing on this input (each query sees "
                                        "a single key)")
        if allowed is not None:
            return (f"Diagnosis: {h.label} explains the output (max|subject - that| = "
                    f"{err:.3g}, within {allowed:.3g}; the declared spec is {declared_err:.3g} "
                    "off).")
    fitted, fit_err = _fit_scale(spec, lambda s: error(dataclasses.replace(
        declared, spec=dataclasses.replace(spec, scale=s))))
    names = ", ".join(h.short for h in tried)
    closest = ""
    if fit_err * GAIN <= declared_err:
        closest = (f" The nearest is a score scale of about {fitted:.4g} (declared "
                   f"{spec.attn_scale:.4g}), {fit_err:.3g} off against the declared spec's "
                   f"{declared_err:.3g}: a scale no listed form gives, or a second mistake.")
    return f"Diagnosis: none of these explains the output: {names}.{closest}"


def _fit_scale(spec: AttentionSpec, err: Callable[[float], float]) -> tuple[float, float]:
    """Golden-section search on log(scale) within 64x of the declared: (scale, error)."""
    centre = math.log(spec.attn_scale)
    a, b = centre - math.log(64), centre + math.log(64)
    c, d = b - _INV_PHI * (b - a), a + _INV_PHI * (b - a)
    fc, fd = err(math.exp(c)), err(math.exp(d))
    for _ in range(_FIT_STEPS):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - _INV_PHI * (b - a)
            fc = err(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + _INV_PHI * (b - a)
            fd = err(math.exp(d))
    return (math.exp(c), fc) if fc <= fd else (math.exp(d), fd)

