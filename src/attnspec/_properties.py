"""The properties, judged in the runner: one object per id, each with what it needs and its check.

A check makes the inputs, asks the executor (the worker, which runs the subject) for the
subject's outputs, and judges them here, with the reference, the float64 golden and the tolerance
rule (docs/design.md). It returns an `Outcome`.

Exact comparisons are made only between identical computations: both sides come from calls of
the same shape, with the compared rows at the same batch offset, because CPU and GPU matrix
multiplies round a row differently by where it sits in the batch. Jitter is estimated from more
than one pair of identical calls.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from . import _tolerance as tol
from ._answers import BadAnswer, check_kind, check_results
from ._diagnose import diagnose, grouped_weights
from ._execute import vjp
from ._inference import (
    attend_at,
    corner_shift,
    cross_attention,
    decode_attention,
    padded_attention,
    padded_decode_attention,
)
from ._reference import WEIGHT_KEYS, reference_attention
from ._spec import AttentionSpec, RoPE
from ._subject import dtype_from_name
from ._variants import _pipeline, extra_weights, normed, spec_attention
from ._worker import Executor

if TYPE_CHECKING:
    from ._gang import Gang

__all__ = ["Context", "Example", "Outcome", "PROPERTIES", "PROPERTY_IDS", "Property",
           "SubjectFault", "run_check"]


@dataclass(frozen=True)
class Example:
    """One generated example: the shape, dtype, device, input seed and cut points."""

    B: int
    T: int
    C: int
    H: int
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    cuts: tuple[int, ...] = ()
    scale: float = 1.0
    spec: AttentionSpec | None = None  # protocol v2: the attention drawn (C and H are its own)
    world: int = 0  # tp/cp_equivalence: the ranks the module is sharded over (0: not sharded)

    @property
    def D(self) -> int:
        if self.spec is not None:
            return self.spec.D
        return self.C // self.H if self.H > 0 else 0

    @property
    def attention(self) -> AttentionSpec:
        """The spec this example checks: its own, or plain attention of (C, H)."""
        return self.spec if self.spec is not None else AttentionSpec(self.C, self.H)

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k != "spec"}
        data["cuts"] = list(self.cuts)
        if not self.world:  # unsharded examples replay as they always have
            del data["world"]
        if self.spec is not None:
            data["spec"] = self.spec.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Example:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["cuts"] = tuple(known.get("cuts", ()))
        if known.get("spec") is not None:
            known["spec"] = AttentionSpec.from_json(known["spec"])
        return cls(**known)

    def describe(self) -> str:
        cuts = f", cuts={list(self.cuts)}" if self.cuts else ""
        shape = (self.spec.describe() + f", D={self.D}" if self.spec is not None
                 else f"C={self.C}, H={self.H}, D={self.D}")
        world = f", world={self.world}" if self.world else ""
        return (f"B={self.B}, T={self.T}, {shape}, "
                f"dtype={self.dtype}, device={self.device}, seed={self.seed}{cuts}{world}")

    def build(self) -> dict[str, Any]:
        """The worker's build request for this example."""
        request = {"n_embd": self.C, "n_head": self.H, "seed": self.seed, "dtype": self.dtype,
                   "device": self.device}
        if self.spec is not None:
            request["spec"] = self.spec.to_json()
        return request


@dataclass
class Outcome:
    """One example's verdict: pass, fail (the property is violated), error (the subject raised
    or returned something unusable) or skip; with the measured and allowed error and where."""

    kind: str
    message: str = ""
    measured: float | None = None
    allowed: float | None = None
    where: dict[str, int] | None = None
    notes: list[str] = field(default_factory=list)
    forwards: int = 0

    @property
    def failed(self) -> bool:
        return self.kind in ("fail", "error")


PASS = "pass"


class SubjectFault(Exception):
    """The subject raised or returned something unusable; becomes an `error` outcome."""


class Unsupported(Exception):
    """A protocol v2 subject's supports(spec) declined the example's spec: no example at all."""


class Context:
    """What a check uses to run the subject: one executor, with the forward calls counted."""

    def __init__(self, executor: Executor, gangs: Callable[[int], Gang] | None = None,
                 twin: Callable[[], Executor | None] | None = None) -> None:
        self.executor = executor
        self.gangs = gangs  # world -> the ranks that run sharded examples
        self.forwards = 0
        self.notes: list[str] = []
        self._steps: list[dict[str, Any]] = []  # the steps awaiting collect()
        self._layout = True  # whether collect() holds outputs to their inputs' layout
        self._device: str | None = None  # where the module last built runs
        self._twin_of = twin  # a second process that never sees this one's inputs
        self._twin: Context | None = None
        self._apart: tuple[Example, list[dict[str, Any]]] | None = None
        self.exports: dict[str, dict[str, Tensor]] = {}  # by build: one export per example

    def request(self, ex: Example | None, steps: Sequence[dict[str, Any]], *,
                check_layout: bool = True) -> list[Any]:
        """Build for `ex` (None: keep the module built last) and run `steps`; the results.
        Outputs must have their inputs' shape, dtype and device unless not `check_layout`
        (a property that judges the layout itself)."""
        self.submit(ex, steps, check_layout=check_layout)
        return self.collect()

    def submit(self, ex: Example | None, steps: Sequence[dict[str, Any]], *,
               check_layout: bool = True) -> None:
        """`request`'s first half: the worker starts while the runner computes its side."""
        self.forwards += sum(1 for s in steps if s["op"] in ("forward", "grad"))
        self._steps, self._layout = list(steps), check_layout
        if ex is not None:
            self._device = ex.device
        self.executor.submit({"build": None if ex is None else ex.build(), "steps": list(steps)})

    def collect(self) -> list[Any]:
        """The results of the steps last submitted, each checked against its step."""
        answer = self.executor.collect()
        try:
            kind, message = check_kind(answer)
            if kind == "unsupported":
                raise Unsupported(message)
            if kind != "ok":
                raise SubjectFault(message or "the worker gave no answer")
            return check_results(answer, self._steps, device=self._device,
                                 layout=self._layout)
        except BadAnswer as bad:
            # The worker's process is the subject's: after a forged answer its next one cannot
            # be matched to a request, so the next request gets a fresh worker.
            restart = getattr(self.executor, "restart_later", None)
            if callable(restart):
                restart()
            raise SubjectFault(str(bad)) from None

    def submit_apart(self, ex: Example, mine: Sequence[dict[str, Any]],
                     theirs: Sequence[dict[str, Any]]) -> None:
        """`mine` to this worker and `theirs` to its twin, each on a module built for `ex`, so
        that no process sees both: a subject that remembers what it saw (a cache keyed by a
        prefix or a row, in its module or its process) cannot make the two sides agree. Without
        a twin (in process) both go to this executor, in two requests."""
        if self._twin_of is not None:  # asked once: every call of one example alike
            twin, self._twin_of = self._twin_of(), None
            self._twin = None if twin is None else Context(twin)
        self.submit(ex, mine)
        self._apart = (ex, list(theirs))
        if self._twin is not None:
            self._twin.submit(ex, theirs)
            self.forwards += self._twin.forwards
            self._twin.forwards = 0

    def collect_apart(self) -> tuple[list[Any], list[Any]]:
        """`submit_apart`'s results: this worker's, then the twin's."""
        assert self._apart is not None
        (ex, theirs), self._apart = self._apart, None
        mine = self.collect()
        if self._twin is None:
            return mine, self.request(ex, theirs)
        return mine, self._twin.collect()

    def forwards_of(self, ex: Example, xs: Sequence[Tensor], *,
                    check_shape: bool = True) -> list[Tensor]:
        """The subject's outputs on each input, from one module built for `ex`."""
        self.submit(ex, [{"op": "forward", "x": x} for x in xs], check_layout=check_shape)
        return self.collect_forwards(ex, xs, check_shape=check_shape)

    def collect_forwards(self, ex: Example, xs: Sequence[Tensor], *,
                         check_shape: bool = True) -> list[Tensor]:
        """`forwards_of`'s second half, after `submit` of one forward per input (their layout
        was checked in `collect` unless the submit said not to)."""
        return [result["out"] for _, result in zip(xs, self.collect(), strict=True)]


# ---- inputs, reference weights, messages ----------------------------------------------------


def _inputs(ex: Example, salt: int = 0, shape: tuple[int, ...] | None = None) -> Tensor:
    gen = torch.Generator().manual_seed(ex.seed * 7919 + salt)
    x = torch.randn(shape or (ex.B, ex.T, ex.C), generator=gen, dtype=torch.float64) * ex.scale
    return x.to(dtype=dtype_from_name(ex.dtype))


def _reference_weights(ex: Example) -> dict[str, Tensor]:
    """Weights for the reference where the subject exports none (prefix's yardstick)."""
    gen = torch.Generator().manual_seed(ex.seed + 17)
    shapes = ex.attention.weight_shapes()
    return {key: (torch.rand(shapes[key], generator=gen, dtype=torch.float64) * 2 - 1)
            / math.sqrt(shapes[key][1]) for key in WEIGHT_KEYS} | extra_weights(ex.attention, gen)


def _reference(x: Tensor, weights: Mapping[str, Tensor], ex: Example,
               dtype: torch.dtype | None = None, device: str | None = None) -> Tensor:
    """The reference on `x`, computed in `dtype` on `device` (the example's by default)."""
    dtype = dtype or x.dtype
    device = device or ex.device
    with torch.no_grad():
        out = _oracle(x.to(device=device, dtype=dtype), _cast(weights, dtype, device), ex)
    return out.cpu()


def _oracle(x: Tensor, weights: Mapping[str, Tensor], ex: Example) -> Tensor:
    """The reference's math for the example's attention (v1: plain MHA of (C, H))."""
    if ex.spec is None:
        return reference_attention(x, weights, ex.H)
    return spec_attention(x, weights, ex.spec)


def _cast(weights: Mapping[str, Tensor], dtype: torch.dtype, device: str) -> dict[str, Tensor]:
    return {k: v.detach().to(device=device, dtype=dtype) for k, v in weights.items()}


def _where(index: tuple[int, ...] | None, cut: int | None = None) -> dict[str, int] | None:
    if index is None:
        return None
    where = dict(zip(("b", "t", "c"), index, strict=False))
    if cut is not None:
        where["cut"] = cut
    return where


def _fail(message: str, measured: float | None = None, allowed: float | None = None,
          index: tuple[int, ...] | None = None, cut: int | None = None) -> Outcome:
    return Outcome("fail", message, measured, allowed, _where(index, cut))


def _at(index: tuple[int, ...] | None) -> str:
    return "" if index is None else " at (B, T, C) index " + str(tuple(index))


def _cuts(ex: Example) -> list[int]:
    """Cut points t with something after them: 0 <= t < T - 1."""
    return sorted({t for t in ex.cuts if 0 <= t < ex.T - 1})


def _jitter(*pairs: tuple[Tensor, Tensor]) -> float:
    """The subject's run-to-run difference: the largest over pairs of identical calls."""
    return max(tol.max_abs_diff(a, b)[0] for a, b in pairs)


def _outputs(xs: Sequence[Tensor], results: Sequence[Mapping[str, Any]]) -> list[Tensor]:
    """The outputs of one forward (or `call`) per input (`Context.collect` checked that each
    has its input's layout)."""
    return [result["out"] for _, result in zip(xs, results, strict=True)]


def _finite(prop: str, call: str, *outs: Tensor) -> None:
    """Non-finite outputs prove nothing in a self-comparison (NaN equals NaN there): the
    subject's fault, named, pointing at `finite`."""
    for out in outs:
        bad = ~torch.isfinite(out)
        if bool(bad.any()):
            index = tuple(int(i) for i in bad.nonzero()[0])
            raise SubjectFault(f"{call} gave {int(bad.sum())} non-finite values in an output "
                               f"of shape {tuple(out.shape)} (first {float(out[index]):g}"
                               f"{_at(index)}) for finite input, so {prop} cannot compare its "
                               "outputs (see finite).")


def _steady(prop: str, ex: Example, change: str, jitter: float, scale: float) -> None:
    """A change within the jitter of identical calls that differ by more than rounding (weights
    that drift between calls, say) is no evidence either way: the subject's fault, pointing at
    `determinism`, never a leak."""
    floor = tol.floor(ex.dtype, scale)
    if jitter > floor:
        raise SubjectFault(f"{change}, but the same input gave outputs {jitter:.3g} apart in "
                           f"two calls, more than rounding ({floor:.3g}): the outputs differ "
                           f"between identical calls, so {prop} cannot tell a leak from that "
                           "(see determinism).")


# Each property's twin-side inputs have their own base salt: one whose rows the twin sees in
# one property are never another's main-side rows, even for the same seed and shape.
_BASE = {"batch_independence": 20_000, "decode": 21_000, "padding_invariance": 22_000,
         "masked_rows": 23_000, "causal_corner": 24_000, "relative_position": 25_000,
         "window": 26_000}


def _probe(ex: Example, like: Tensor, salt: int) -> list[dict[str, Any]]:
    """A forward of fresh input shaped like `like`, made in both processes: their outputs
    differ only if identical calls do (drift, or a process that counts its calls)."""
    return [{"op": "forward", "x": _inputs(ex, salt=salt, shape=tuple(like.shape))}]


def _only_float32_accurate(ex: Example, err: float, yard32: Callable[[], float],
                           scale: float) -> str | None:
    """For float64: the message when an error float64 cannot explain is one float32 makes."""
    if ex.dtype != "float64":
        return None
    measured32 = yard32()
    if err > tol.allowed(measured32, "float32", scale):
        return None
    return (f"the subject's float64 results are only float32-accurate: the error {err:.3g} is "
            f"what float32 arithmetic gives (the reference computed in float32 is off by "
            f"{measured32:.3g} here) but far beyond float64's. It computes in float32 somewhere "
            "(scores or softmax, say): declare DTYPES without float64, or compute in float64.")


# ---- yardsticks that fit the subject ---------------------------------------------------------

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
    x64 = x.detach().double().cpu()
    B, T, _ = x64.shape

    def heads(name: str, n: int) -> Tensor:
        bias = weights.get(name + "_bias")
        out = torch.nn.functional.linear(x64, weights[name + "_weight"].double().cpu(),
                                         None if bias is None else bias.double().cpu())
        if spec.qk_norm is not None:  # normalised q and k: their norms' weights set the size
            norm_bias = weights.get(name + "_norm_bias")
            out = normed(out, weights[name + "_norm_weight"].double().cpu(),
                         None if norm_bias is None else norm_bias.double().cpu(), spec.qk_norm,
                         spec.D)
        return out.view(B, T, n, spec.D).transpose(1, 2)

    q = heads("q", spec.n_head)
    k = heads("k", spec.G).repeat_interleave(spec.n_head // spec.G, dim=1)
    scores = (q @ k.transpose(-2, -1)) * spec.attn_scale
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


# ---- the checks ------------------------------------------------------------------------------


def check_width(ctx: Context, ex: Example) -> Outcome:
    x = _inputs(ex)
    (out,) = ctx.forwards_of(ex, [x], check_shape=False)
    if out.shape != x.shape:
        return _fail(f"out.shape={tuple(out.shape)}, but should be {tuple(x.shape)} "
                     f"[attn(x), x.shape={tuple(x.shape)}]: the residual width (B, T, C) "
                     "must come back.")
    return Outcome(PASS)


def check_dtype(ctx: Context, ex: Example) -> Outcome:
    x = _inputs(ex)
    (result,) = ctx.request(ex, [{"op": "forward", "x": x}], check_layout=False)
    out, device = result["out"], result["device"]
    if out.dtype != x.dtype or device != ex.device:
        return _fail(f"out is {out.dtype} on {device}, but should be {x.dtype} on "
                     f"{ex.device} like its input [attn(x), x.shape={tuple(x.shape)}].")
    return Outcome(PASS)


def check_divisibility(ctx: Context, ex: Example) -> Outcome:
    (result,) = ctx.request(None, [{"op": "refuses", "n_embd": ex.C, "n_head": ex.H}])
    if result["raised"]:
        return Outcome(PASS)  # any exception: it refused the configuration
    why = (f"{ex.C} is not divisible by {ex.H}" if ex.C >= 1 and ex.H >= 1
           else "n_embd and n_head must both be >= 1")
    return _fail(f"build({ex.C}, {ex.H}) returned {result['type']} instead of raising: {why}.")


def check_causality(ctx: Context, ex: Example) -> Outcome:
    cuts = _cuts(ex)
    if not cuts:
        return Outcome(PASS, notes=["T=1: nothing after any position"])
    x = _inputs(ex)
    # Block i of `moved` is x changed after cut t_i; block i of `same` is x itself, at the
    # same batch offset in a call of the same shape, so the two round identically.
    changed = []
    for i, t in enumerate(cuts):
        xt = x.clone()
        xt[:, t + 1:] = _inputs(ex, salt=1000 + i)[:, t + 1:]
        changed.append(xt)
    same, moved = torch.cat([x] * len(cuts)), torch.cat(changed)

    def worst_change(same1: Tensor, moved1: Tensor) -> tuple[float, int, tuple[int, ...] | None]:
        worst: tuple[float, int, tuple[int, ...] | None] = (0.0, -1, None)
        for i, t in enumerate(cuts):
            rows = slice(i * ex.B, (i + 1) * ex.B)
            err, index = tol.max_abs_diff(moved1[rows, :t + 1], same1[rows, :t + 1])
            if err > worst[0]:
                worst = (err, t, index)
        return worst

    # Same and moved go to two processes, so that neither sees both: a subject that replays
    # what it computed for a prefix it has seen cannot make them agree.
    ctx.submit_apart(ex, [{"op": "forward", "x": same}], [{"op": "forward", "x": moved}])
    mine, theirs = ctx.collect_apart()
    (same1,), (moved1,) = _outputs([same], mine), _outputs([moved], theirs)
    _finite("causality", "forward", same1, moved1)
    err, t, index = worst_change(same1, moved1)
    if err == 0:  # nothing changed: no jitter estimate could make it a leak
        return Outcome(PASS)
    # Jitter from pairs of equal calls: each side again, and one fresh input on both sides.
    probe = _probe(ex, same, 4000)
    ctx.submit_apart(ex, [{"op": "forward", "x": same}, *probe],
                     [{"op": "forward", "x": moved}, *probe])
    mine, theirs = ctx.collect_apart()
    (same2, mine_z), (moved2, their_z) = (_outputs([same, same], mine),
                                          _outputs([moved, moved], theirs))
    jitter = _jitter((same1, same2), (moved1, moved2), (mine_z, their_z))
    allowed = tol.K * jitter
    change = f"changing inputs after position t={t} changed outputs at or before t by {err:.3g}"
    if err > allowed:
        return _fail(f"{change} (allowed {allowed:.3g}, the subject's own jitter x{tol.K:g})"
                     f"{_at(index)}: a future token leaks into the past.", err, allowed, index, t)
    _steady("causality", ex, change + _at(index), jitter, float(same1.abs().max()))
    return Outcome(PASS)


def check_prefix(ctx: Context, ex: Example) -> Outcome:
    lengths = sorted({t + 1 for t in _cuts(ex)})[-4:]
    if not lengths:
        return Outcome(PASS, notes=["T=1: no shorter prefix"])
    x = _inputs(ex)
    xs = [x, *(x[:, :n].contiguous() for n in lengths)]
    sets, _ = _yardstick_weights(ctx, ex, x)
    ctx.submit(ex, [{"op": "forward", "x": one} for one in xs])
    # The reference's own prefix discrepancy in this dtype is the yardstick.
    wholes: dict[tuple[torch.dtype, int], Tensor] = {}

    def discrepancy(dtype: torch.dtype, n: int) -> float:
        worst = 0.0
        for i, weights in enumerate(sets):
            if (dtype, i) not in wholes:
                wholes[dtype, i] = _reference(x, weights, ex, dtype)
            worst = max(worst, tol.max_abs_diff(_reference(x[:, :n], weights, ex, dtype),
                                                wholes[dtype, i][:, :n])[0])
        return worst

    yardsticks = {n: discrepancy(x.dtype, n) for n in lengths}  # while the subject runs
    full, *parts = ctx.collect_forwards(ex, xs)
    scale = float(full.abs().max()) if full.numel() else 1.0
    for n, part in zip(lengths, parts, strict=True):
        err, index = tol.max_abs_diff(part, full[:, :n])
        allowed = tol.allowed(yardsticks[n], ex.dtype, scale)
        if err > allowed:
            precision = _only_float32_accurate(
                ex, err, lambda n=n: discrepancy(torch.float32, n), scale)  # type: ignore[misc]
            what = precision or "a prefix of the sequence must give the same outputs"
            return _fail(f"the output on the first {n} positions differs from the first {n} "
                         f"positions of the full output (T={ex.T}) by {err:.3g} (allowed "
                         f"{allowed:.3g}){_at(index)}: {what}.", err, allowed, index, n - 1)
    return Outcome(PASS)


def check_batch_independence(ctx: Context, ex: Example) -> Outcome:
    if ex.B < 2:
        return Outcome(PASS, notes=["B=1: no other row"])
    x = _inputs(ex, salt=_BASE["batch_independence"])
    others = x.clone()
    others[1:] = _inputs(ex, salt=2000)[1:]
    first = x.clone()
    first[0] = _inputs(ex, salt=3000)[0]
    # Every call has the shape of x and a row keeps its offset, so unchanged rows round alike.
    checks = ((slice(0, 1), "rows 1..B-1"), (slice(1, None), "row 0"))
    # x in one process, the changed batches in another (they share no row): a subject that
    # replays what it computed for a row it has seen cannot make a row agree with itself.
    forward = [{"op": "forward", "x": x}]
    changed = [{"op": "forward", "x": others}, {"op": "forward", "x": first}]
    ctx.submit_apart(ex, forward, changed)
    mine, theirs = ctx.collect_apart()
    (out1,), (others1, first1) = _outputs([x], mine), _outputs([others, first], theirs)
    _finite("batch_independence", "forward", out1, others1, first1)
    found = [(tol.max_abs_diff(moved[rows], out1[rows]), rows, what)
             for moved, (rows, what) in zip((others1, first1), checks, strict=True)]
    if all(err == 0 for (err, _), _, _ in found):  # nothing changed: no jitter makes a leak
        return Outcome(PASS)
    # Jitter from pairs of equal calls: each batch again, and one fresh input on both sides.
    probe = _probe(ex, x, 4000)
    ctx.submit_apart(ex, forward + probe, changed + probe)
    mine, theirs = ctx.collect_apart()
    out2, mine_z = _outputs([x, x], mine)
    others2, first2, their_z = _outputs([others, first, x], theirs)
    jitter = _jitter((out1, out2), (others1, others2), (first1, first2), (mine_z, their_z))
    allowed = tol.K * jitter
    for (err, index), rows, what in found:
        if err > allowed:
            if index is not None and rows.start:
                index = (index[0] + rows.start, *index[1:])
            return _fail(f"changing batch {what} changed another row's output by {err:.3g} "
                         f"(allowed {allowed:.3g}, the subject's own jitter x{tol.K:g})"
                         f"{_at(index)}: batch rows must not interact.", err, allowed, index)
    (err, index), _, what = max(found, key=lambda f: f[0][0])
    _steady("batch_independence", ex, f"changing batch {what} changed another row's output by "
            f"{err:.3g}", jitter, float(out1.abs().max()))
    return Outcome(PASS)


def check_determinism(ctx: Context, ex: Example) -> Outcome:
    x = _inputs(ex)
    out, again = ctx.forwards_of(ex, [x, x])
    err, index = tol.max_abs_diff(again, out)
    if err > 0:
        return _fail(f"the same input twice in eval mode gave outputs {err:.3g} apart"
                     f"{_at(index)} (dropout or other randomness left on?).", err, 0.0, index)
    return Outcome(PASS)


def check_input_unchanged(ctx: Context, ex: Example) -> Outcome:
    x = _inputs(ex)
    (result,) = ctx.request(ex, [{"op": "forward", "x": x, "keep_input": True}],
                            check_layout=False)  # the output is not what it judges
    after: Tensor = result["input"]
    err, index = (tol.max_abs_diff(after, x) if after.shape == x.shape
                  else (math.inf, None))
    if err > 0:
        return _fail(f"forward modified its input in place by up to {err:.3g}{_at(index)}.",
                     err, 0.0, index)
    return Outcome(PASS)


def check_finite(ctx: Context, ex: Example) -> Outcome:
    x = _inputs(ex)
    (out,) = ctx.forwards_of(ex, [x])
    bad = ~torch.isfinite(out)
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        return _fail(f"{int(bad.sum())} of {out.numel()} outputs are not finite (first "
                     f"{float(out[index]):g}{_at(index)}) for finite input with "
                     f"max|x|={float(x.abs().max()):.3g}.", None, None, index)
    return Outcome(PASS)


# Exported magnitudes beyond this are no trained or initialised weight: torch.empty's garbage.
_UNINITIALISED = 1e6


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
    if ex.spec is not None:  # protocol v2 declares its biases; v1's are optional
        biases = [f"{n}_bias" for n in "qkvo"]  # the projections' (a LayerNorm's are its own)
        missing = [k for k in biases if k not in weights]
        present = [k for k in biases if k in weights]
        if spec.bias and missing:
            raise SubjectFault(
                f"export_weights has no {', '.join(missing)}, but the spec declares bias=True "
                f"(q, k, v and o each have a bias): export {'it' if len(missing) == 1 else 'them'}"
                " (a zero tensor where the layer has none, as Qwen2's o_proj), or declare "
                "bias=False (VARIANTS {'bias': [False]}) if the module has no biases.")
        if not spec.bias and present:
            raise SubjectFault(
                f"export_weights has {', '.join(present)}, but the spec declares bias=False: "
                "build the module without biases when spec.bias is False (nn.Linear(..., "
                "bias=spec.bias)), or let VARIANTS say which biases it supports.")
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


def check_oracle(ctx: Context, ex: Example) -> Outcome:
    x = _inputs(ex)
    (exported,) = ctx.request(ex, [{"op": "export"}])
    weights = _checked_weights(exported, ex)
    ctx.submit(None, [{"op": "forward", "x": x}])
    golden = _reference(x, weights, ex, torch.float64)  # while the subject runs
    with torch.no_grad():  # two fair computations in the dtype: the reference and reordered
        reordered = _reordered(x.to(ex.device), _cast(weights, x.dtype, ex.device), ex).cpu()
    yard = max(tol.max_abs_diff(_reference(x, weights, ex), golden)[0],
               tol.max_abs_diff(reordered, golden)[0])
    (out,) = ctx.collect_forwards(ex, [x])
    err, index = tol.max_abs_diff(out, golden)
    scale = float(golden.abs().max())
    allowed = tol.allowed(yard, ex.dtype, scale)
    if err > allowed:
        precision = _only_float32_accurate(ex, err, lambda: tol.max_abs_diff(
            _reference(x, weights, ex, torch.float32), golden)[0], scale)
        # float64 rounded as float32 is cause enough; otherwise, which common mistake it is
        why = (f": {precision}" if precision else
               ". " + diagnose(out, x, weights, ex.attention, ex.dtype, scale))
        return _fail(f"max|subject - reference| = {err:.3g}, allowed {allowed:.3g} "
                     f"({tol.K:g} x the reference's own {ex.dtype} error {yard:.3g} + floor)"
                     f"{_at(index)}{why}", err, allowed, index)
    return Outcome(PASS)


def _reordered(x: Tensor, weights: Mapping[str, Tensor], ex: Example) -> Tensor:
    """The reference with the score scale folded into q's projection (or q's norm) before the
    product, as FlashAttention's tests' `reorder_ops`: the same math, other rounding, so that
    two fair low-precision computations measure the dtype's error, not one."""
    spec = ex.attention
    names = ("q_norm_weight", "q_norm_bias") if spec.qk_norm is not None else (
        "q_weight", "q_bias")
    s = spec.attn_scale
    folded = {**weights, **{k: weights[k] * s for k in names if k in weights}}
    return spec_attention(x, folded, dataclasses.replace(spec, scale=1.0))


def _reference_grads(x: Tensor, weights: Mapping[str, Tensor], cotangent: Tensor, ex: Example,
                     dtype: torch.dtype, *, reorder: bool = False,
                     ) -> tuple[Tensor, dict[str, Tensor]]:
    """d(reference)/d(x) and d(reference)/d(weights) in `dtype`, against `cotangent` (with
    `reorder`, of `_reordered`)."""
    with torch.enable_grad():
        xs = x.to(device=ex.device, dtype=dtype).requires_grad_(True)
        leaves = {k: v.requires_grad_(True) for k, v in _cast(weights, dtype, ex.device).items()}
        out = _reordered(xs, leaves, ex) if reorder else _oracle(xs, leaves, ex)
        grads = vjp([out], [xs, *leaves.values()], [cotangent.to(device=ex.device, dtype=dtype)])
    x_grad, *weight_grads = (torch.zeros_like(v) if g is None else g  # unused: zero gradient
                             for v, g in zip([xs, *leaves.values()], grads, strict=True))
    return x_grad.cpu(), {k: g.cpu() for k, g in zip(leaves, weight_grads, strict=True)}


def check_oracle_grad(ctx: Context, ex: Example) -> Outcome:
    x, cotangent = _inputs(ex), _inputs(ex, salt=4000)
    (exported,) = ctx.request(ex, [{"op": "export"}])
    weights = _checked_weights(exported, ex)
    ctx.submit(None, [{"op": "grad", "x": x, "cotangent": cotangent, "params": True}])
    gold_x, gold_w = _reference_grads(x, weights, cotangent, ex, torch.float64)  # meanwhile
    dt_x, dt_w = _reference_grads(x, weights, cotangent, ex, x.dtype)
    re_x, re_w = _reference_grads(x, weights, cotangent, ex, x.dtype, reorder=True)
    (result,) = ctx.collect()
    gx: Tensor | None = result["grad_x"]
    if gx is None:
        return _fail("the output does not depend on the input through autograd.")
    err, index = tol.max_abs_diff(gx, gold_x)
    yard = max(tol.max_abs_diff(dt_x, gold_x)[0], tol.max_abs_diff(re_x, gold_x)[0])
    allowed = tol.allowed(yard, ex.dtype, float(gold_x.abs().max()))
    if err > allowed:
        return _fail(f"d(output)/d(input): max|subject - reference| = {err:.3g}, allowed "
                     f"{allowed:.3g}{_at(index)}.", err, allowed, index)
    connected = set(exported["connected"])
    if not connected:
        return Outcome(PASS, notes=["export_weights is detached: weight gradients skipped"])
    # The reference's weight gradients (protocol layout), mapped onto the subject's parameters.
    gold_p, dt_p, re_p = ctx.request(None, [
        {"op": "pullback", "grads": {k: v for k, v in grads.items() if k in connected}}
        for grads in (gold_w, dt_w, re_w)])
    mine: dict[str, Tensor | None] = result["params"]
    # A gradient zero in exact arithmetic (a key bias's: softmax ignores a per-row shift) is
    # the rounding of terms as large as the module's gradients: its floor is set by them.
    largest = max((float(g.abs().max()) for g in gold_p["params"].values()
                   if g is not None and g.numel()), default=0.0)
    for name, gold in gold_p["params"].items():
        if gold is None:
            continue
        got, dt, re = mine.get(name), dt_p["params"].get(name), re_p["params"].get(name)
        got = torch.zeros_like(gold) if got is None else got
        if got.shape != gold.shape or any(r is None or r.shape != gold.shape for r in (dt, re)):
            raise SubjectFault(f"d(output)/d({name}) has shape {tuple(got.shape)}, the mapped "
                               f"reference gradients {tuple(gold.shape)} and "
                               f"{None if dt is None else tuple(dt.shape)}: they must agree.")
        err, where = tol.max_abs_diff(got, gold)
        yard = max(tol.max_abs_diff(dt, gold)[0], tol.max_abs_diff(re, gold)[0])
        allowed = tol.allowed(yard, ex.dtype, max(float(gold.abs().max()), largest))
        if err > allowed:
            return _fail(f"d(output)/d({name}, shape {tuple(gold.shape)}): max|subject - "
                         f"reference| = {err:.3g}, allowed {allowed:.3g} at index {where}.",
                         err, allowed)
    return Outcome(PASS)


def check_grad_causality(ctx: Context, ex: Example) -> Outcome:
    cuts = _cuts(ex)
    if not cuts:
        return Outcome(PASS, notes=["T=1: nothing after any position"])
    x = _inputs(ex)
    # One backward for every cut: copy i of x carries a cotangent on positions <= t_i only.
    stacked = torch.cat([x] * len(cuts))
    cotangent = torch.zeros_like(stacked)
    noise = _inputs(ex, salt=5000, shape=tuple(stacked.shape))
    for i, t in enumerate(cuts):
        rows = slice(i * ex.B, (i + 1) * ex.B)
        cotangent[rows, :t + 1] = noise[rows, :t + 1]
    (result,) = ctx.request(ex, [{"op": "grad", "x": stacked, "cotangent": cotangent}])
    grad: Tensor | None = result["grad_x"]
    if grad is None:
        raise SubjectFault("the output does not depend on the input through autograd, so "
                           "its gradients cannot be checked.")
    for i, t in enumerate(cuts):
        future = grad[i * ex.B:(i + 1) * ex.B, t + 1:]
        err, index = tol.max_abs_diff(future, torch.zeros_like(future))
        if err > 0:
            assert index is not None
            index = (index[0], index[1] + t + 1, index[2])
            return _fail(f"the gradient of outputs at or before t={t} w.r.t. inputs after t is "
                         f"{err:.3g}, but must be 0{_at(index)}.", err, 0.0, index, t)
    return Outcome(PASS)


def check_device_agreement(ctx: Context, ex: Example) -> Outcome:
    if not torch.cuda.is_available():
        return Outcome("skip", "no CUDA device")
    cpu = Example(**{**ex.to_json(), "device": "cpu", "cuts": ()})
    gpu = Example(**{**ex.to_json(), "device": "cuda", "cuts": ()})
    x = _inputs(cpu)
    sets, _ = _yardstick_weights(ctx, cpu, x)
    (out_cpu,) = ctx.forwards_of(cpu, [x])
    (out_gpu,) = ctx.forwards_of(gpu, [x.to("cuda")])
    yard = max(tol.max_abs_diff(_reference(x, w, cpu), _reference(x, w, gpu))[0] for w in sets)
    err, index = tol.max_abs_diff(out_cpu, out_gpu)
    allowed = tol.allowed(yard, ex.dtype, float(out_cpu.abs().max()))
    if err > allowed:
        return _fail(f"CPU and CUDA outputs differ by {err:.3g} (allowed {allowed:.3g})"
                     f"{_at(index)}.", err, allowed, index)
    return Outcome(PASS)


# ---- inference paths: decode, padding, masked rows, the causal corner ---------------------


def _rng(ex: Example, salt: int) -> random.Random:
    """The example's own draws beyond its shape (replays repeat them: they follow the seed)."""
    return random.Random(ex.seed * 7919 + salt)


def _info(ctx: Context, name: str, default: str) -> str:
    info = getattr(ctx.executor, "info", None)
    return str(getattr(info, name, default))


def _decode_plans(ex: Example) -> list[list[int]]:
    """A prefill then up to 8 tokens one at a time, and chunks cut at up to 5 of the example's
    cut points (more calls would cost time, not find more)."""
    rng = _rng(ex, 11)
    prefill = rng.randint(max(1, ex.T - 8), ex.T - 1)
    plans = [[prefill] + [1] * (ex.T - prefill)]
    cuts = _cuts(ex)
    ends = sorted({t + 1 for t in rng.sample(cuts, min(5, len(cuts)))} | {ex.T})
    chunks = [b - a for a, b in zip([0, *ends], ends, strict=False)]
    if chunks not in plans:
        plans.append(chunks)
    return plans


def _plan_text(plan: list[int]) -> str:
    if len(plan) > 1 and all(n == 1 for n in plan[1:]):
        n = len(plan) - 1
        return f"a prefill of {plan[0]} then {n} token{'s' * (n != 1)} one at a time"
    return f"chunks of {plan}"


def _first_off(out: Tensor, want: Tensor, allowed: float) -> int:
    """The first position (T axis) where `out` is farther than `allowed` from `want`."""
    per_position = (out.double() - want.double()).abs().nan_to_num(nan=float("inf"))
    bad = (per_position.amax(dim=(0, 2)) > allowed).nonzero()
    return int(bad[0]) if bad.numel() else -1


def _blame(plan: list[int], first: int) -> str:
    """Where a decode goes wrong: a position inside the first chunk was computed before any
    cache existed, so the fault is the prefill's (its mask or positions), not the cache's."""
    if 0 <= first < plan[0]:
        return (f"the first position off is {first}, inside the first chunk of {plan[0]} (no "
                "cache yet): the prefill itself differs from the full forward (its mask, its "
                "positions, or a path of its own), not the cache")
    return (f"the first position off is {first}, after the first chunk of {plan[0]}: the cache "
            "or the position offset is wrong there")


def _decode_from_zero(x: Tensor, weights: Mapping[str, Tensor], spec: AttentionSpec,
                      chunks: list[int]) -> Tensor:
    """Decoding by `chunks` where each chunk's positions restart at 0 (the cache's offset
    forgotten): keys keep the positions of the chunk they came in."""
    B, outs, start = x.size(0), [], 0
    pos = torch.cat([torch.arange(n) for n in chunks])
    for n in chunks:
        end = start + n
        outs.append(attend_at(x[:, start:end], x[:, :end], weights, spec,
                              q_index=torch.arange(start, end), k_index=torch.arange(end),
                              q_pos=pos[start:end][None].expand(B, -1),
                              k_pos=pos[:end][None].expand(B, -1)))
        start = end
    return torch.cat(outs, dim=1)


def check_decode(ctx: Context, ex: Example) -> Outcome:
    """Decoding against the subject's own cache gives the full forward's outputs, and (with
    exports) the reference's decode on the subject's weights."""
    if ex.T < 2:
        return Outcome(PASS, notes=["T=1: nothing to decode after a prefill"])
    x = _inputs(ex, salt=_BASE["decode"])
    plans = _decode_plans(ex)
    sets, own = _yardstick_weights(ctx, ex, x)
    # The full forward in one process, the decoding in the other: neither can replay the other.
    ctx.submit_apart(ex, [{"op": "forward", "x": x}],
                     [{"op": "decode", "x": x, "chunks": plan} for plan in plans])
    spec = ex.attention
    yards = [0.0] * len(plans)  # the reference's own decode discrepancy is the yardstick
    with torch.no_grad():
        for weights in sets:
            ours = weights_in(weights, x)
            whole = spec_attention(x, ours, spec)
            yards = [max(y, tol.max_abs_diff(decode_attention(x, ours, spec, plan), whole)[0])
                     for y, plan in zip(yards, plans, strict=True)]
        if own is not None:  # the decode path's oracle: the reference's own decode in float64
            own64 = weights_in(own, x.double())
            golden = spec_attention(x.double(), own64, spec)
            # As for shifted: the forward's own error and the decode discrepancy at once.
            forward_yard = tol.max_abs_diff(spec_attention(x, weights_in(own, x), spec),
                                            golden)[0]
            path_yards = [max(tol.max_abs_diff(decode_attention(x, weights_in(own, x), spec,
                                                                plan), golden)[0],
                              forward_yard + y) for plan, y in zip(plans, yards, strict=True)]
    mine, theirs = ctx.collect_apart()
    (full,), decoded = _outputs([x], mine), [r["out"] for r in theirs]
    _finite("decode", "forward", full)
    scale = float(full.abs().max()) if full.numel() else 1.0
    for plan, out, yard in zip(plans, decoded, yards, strict=True):
        if out.shape != full.shape:
            raise SubjectFault(f"decode gave outputs of shape {tuple(out.shape)} in all, the "
                               f"full forward {tuple(full.shape)}.")
        err, index = tol.max_abs_diff(out, full)
        allowed = tol.allowed(yard, ex.dtype, scale)
        if err > allowed:
            cause = _blame(plan, _first_off(out, full, allowed))
            if own is not None:  # a forgotten offset or a dropped feature says more
                fits = tol.allowed(path_yards[plans.index(plan)], ex.dtype, scale)
                if spec.positions is not None and tol.max_abs_diff(
                        out, _decode_from_zero(x.double(), own64, spec, plan))[0] <= fits:
                    cause = ("its outputs are the reference's with every chunk's positions "
                             "starting at 0: the decode path does not pass the cache's offset "
                             f"to {type(spec.positions).__name__} ({cause})")
                else:
                    dropped = _dropped_feature(
                        spec, out, fits, "decode",
                        lambda alt, plan=plan: decode_attention(  # type: ignore[misc]
                            x.double(), own64, alt, plan))
                    if " drops " in dropped:
                        cause = f"{dropped} ({cause})"
            return _fail(f"decoding with {_plan_text(plan)} differs from the full forward by "
                         f"{err:.3g} (allowed {allowed:.3g}, {tol.K:g} x the reference's own "
                         f"decode discrepancy + floor){_at(index)}; {cause}.",
                         err, allowed, index)
    if own is not None:
        for plan, out, yard in zip(plans, decoded, path_yards, strict=True):
            wrong = _path_oracle(
                "decode", out, golden, yard, ex,
                lambda alt, plan=plan: decode_attention(x.double(), own64, alt, plan),  # type: ignore[misc]
                f"decoding with {_plan_text(plan)} (agreeing with the subject's full forward)")
            if wrong is not None:
                return wrong
    hooks = getattr(getattr(ctx.executor, "info", None), "hooks", ())
    if "decode_padded" in hooks and "padded" in hooks and ex.T >= 3:
        return _check_padded_decode(ctx, ex)
    return Outcome(PASS)


def _check_padded_decode(ctx: Context, ex: Example) -> Outcome:
    """A left-padded batch (as generate() prepares one) decoded after a prefill that holds all
    the padding gives the subject's own padded forward on every real token."""
    rng = _rng(ex, 15)
    lengths = [rng.randint(2, ex.T) for _ in range(ex.B)]
    if all(n == ex.T for n in lengths):
        lengths[rng.randrange(ex.B)] = rng.randint(2, ex.T - 1)
    x, mask = _layout(_inputs(ex, salt=_BASE["decode"]), lengths, "left",
                      _fill(ex, "random", 6200))
    prefill = rng.randint(ex.T - min(lengths), ex.T - 1)
    plan = [prefill] + [1] * (ex.T - prefill)
    sets, own = _yardstick_weights(ctx, ex, x)
    ctx.submit_apart(ex, [{"op": "forward", "x": x, "mask": mask}],
                     [{"op": "decode", "x": x, "chunks": plan, "mask": mask}])
    yard = 0.0
    with torch.no_grad():
        for weights in sets:
            ours = weights_in(weights, x)
            whole = padded_attention(x, ours, ex.attention, mask)
            chunked = padded_decode_attention(x, ours, ex.attention, plan, mask)
            yard = max(yard, _worst(_real_rows(chunked, lengths, "left"),
                                    _real_rows(whole, lengths, "left"))[0])
        if own is not None:  # the padded decode's oracle: the reference's, in float64
            own64 = weights_in(own, x.double())
            golden = _real_rows(padded_attention(x.double(), own64, ex.attention, mask),
                                lengths, "left")
            ours = weights_in(own, x)
            path_yard = max(_worst(_real_rows(padded_decode_attention(
                x, ours, ex.attention, plan, mask), lengths, "left"), golden)[0], _worst(
                _real_rows(padded_attention(x, ours, ex.attention, mask), lengths, "left"),
                golden)[0])
    mine, theirs = ctx.collect_apart()
    (full,), decoded = _outputs([x], mine), theirs[0]["out"]
    _finite("decode", "padded(module, x, key_mask)", _real_only(full, mask))
    if decoded.shape != full.shape:
        raise SubjectFault(f"decode_padded gave outputs of shape {tuple(decoded.shape)} in all, "
                           f"padded {tuple(full.shape)}.")
    real_full = _real_rows(full, lengths, "left")
    err, index = _worst(_real_rows(decoded, lengths, "left"), real_full)
    scale = max((float(t.abs().max()) for t in real_full if t.numel()), default=1.0)
    allowed = tol.allowed(yard, ex.dtype, scale)
    where = f"real lengths {lengths} of T={ex.T}"
    if err > allowed:
        if index is not None:  # (row, position among the row's real tokens, channel)
            index = (index[0], index[1] + ex.T - lengths[index[0]], *index[2:])
        return _fail(f"decoding a left-padded batch ({where}) with "
                     f"{_plan_text(plan)} differs from padded(module, x, key_mask) on the real "
                     f"tokens by {err:.3g} (allowed {allowed:.3g}, {tol.K:g} x the reference's "
                     f"own discrepancy + floor){_at(index)}: each row's positions must count its "
                     "own real tokens while decoding too (position ids shared across the batch, "
                     "or the mask dropped after the prefill?).", err, allowed, index)
    if own is not None:
        for what, rows in (("decode_padded", _real_rows(decoded, lengths, "left")),
                           ("padded", real_full)):
            wrong = _path_oracle(
                what, _flat(rows), _flat(golden), path_yard, ex,
                lambda alt: _flat(_real_rows(padded_attention(x.double(), own64, alt, mask),
                                             lengths, "left")),
                f"{what} on a left-padded batch ({where}, {_plan_text(plan)}), on the real "
                "tokens,")
            if wrong is not None:
                return wrong
    return Outcome(PASS)


def weights_in(weights: Mapping[str, Tensor], x: Tensor) -> dict[str, Tensor]:
    return {k: v.to(device=x.device, dtype=x.dtype) for k, v in weights.items()}


def _padding(ex: Example, salt: int, *, need_padded: bool = True) -> list[int]:
    """Real lengths per row, 1..T, at least one row padded where T > 1."""
    rng = _rng(ex, salt)
    lengths = [rng.randint(1, ex.T) for _ in range(ex.B)]
    if need_padded and ex.T > 1 and all(n == ex.T for n in lengths):
        lengths[rng.randrange(ex.B)] = rng.randint(1, ex.T - 1)
    return lengths


def _layout(real: Tensor, lengths: list[int], side: str, fill: Tensor,
            ) -> tuple[Tensor, Tensor]:
    """Rows of `real`'s first L tokens, padded on `side` with `fill`'s values; and the mask."""
    B, T = real.shape[:2]
    x, mask = fill.clone(), torch.zeros(B, T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        where = slice(T - n, T) if side == "left" else slice(0, n)
        x[b, where] = real[b, :n]
        mask[b, where] = True
    return x, mask


_FILLS = ("random", "large", "nan", "inf")


def _fill(ex: Example, kind: str, salt: int) -> Tensor:
    base = _inputs(ex, salt=salt)
    if kind == "large":
        return base * 1e4
    if kind == "nan":
        return torch.full_like(base, float("nan"))
    if kind == "inf":
        return torch.where(base > 0, float("inf"), float("-inf")).to(base.dtype)
    return base


def _real_only(out: Tensor, mask: Tensor) -> Tensor:
    """`out` with the padded positions' outputs zeroed: what must be finite."""
    return torch.where(mask[..., None].to(out.device), out, torch.zeros((), dtype=out.dtype))


def _real_rows(out: Tensor, lengths: list[int], side: str) -> list[Tensor]:
    T = out.size(1)
    return [out[b, T - n:] if side == "left" else out[b, :n] for b, n in enumerate(lengths)]


def _worst(a: list[Tensor], b: list[Tensor]) -> tuple[float, tuple[int, ...] | None]:
    worst: tuple[float, tuple[int, ...] | None] = (0.0, None)
    for row, (x, y) in enumerate(zip(a, b, strict=True)):
        err, index = tol.max_abs_diff(x, y)
        if err > worst[0]:
            worst = (err, None if index is None else (row, *index))
    return worst


def check_padding_invariance(ctx: Context, ex: Example) -> Outcome:
    """Real tokens' outputs ignore what padding holds, and which side it is on."""
    if ex.T < 2:
        return Outcome(PASS, notes=["T=1: no room for padding"])
    rng = _rng(ex, 12)
    lengths, side = _padding(ex, 13), rng.choice(("left", "right"))
    finite_only = _info(ctx, "padding_values", "any") == "finite"
    fills = _FILLS[:2] if finite_only else _FILLS
    other_side, kind = ("right" if side == "left" else "left"), rng.choice(fills)
    notes = ["padding held finite values only (PADDING_VALUES = 'finite')"] if finite_only \
        else []
    real = _inputs(ex, salt=_BASE["padding_invariance"])
    xa, mask = _layout(real, lengths, side, _fill(ex, "random", 6000))
    xb, _ = _layout(real, lengths, side, _fill(ex, kind, 6001))
    xo, mask_o = _layout(real, lengths, other_side, _fill(ex, "random", 6002))
    steps = [{"op": "forward", "x": xa, "mask": mask}, {"op": "forward", "x": xb, "mask": mask},
             {"op": "forward", "x": xo, "mask": mask_o}]
    sets, own = _yardstick_weights(ctx, ex, real)
    ctx.submit_apart(ex, steps[:1], steps[1:])  # no process sees the real tokens twice
    yard = 0.0
    with torch.no_grad():  # the reference's own discrepancy between the two sides
        for weights in sets:
            ref = padded_attention(xa, weights_in(weights, xa), ex.attention, mask)
            ref_o = padded_attention(xo, weights_in(weights, xo), ex.attention, mask_o)
            yard = max(yard, _worst(_real_rows(ref, lengths, side),
                                    _real_rows(ref_o, lengths, other_side))[0])
        if own is not None:  # the padded path's oracle: the reference's, in float64
            own64 = weights_in(own, xa.double())
            golden = _real_rows(padded_attention(xa.double(), own64, ex.attention, mask),
                                lengths, side)
            path_yard = _worst(_real_rows(padded_attention(xa, weights_in(own, xa),
                                                           ex.attention, mask), lengths, side),
                               golden)[0]
    call = "padded(module, x, key_mask)"
    mine, theirs = ctx.collect_apart()
    outs = _outputs([xa], mine) + _outputs([xb, xo], theirs)
    _finite("padding_invariance", call, _real_only(outs[0], mask))
    a, b = _real_rows(outs[0], lengths, side), _real_rows(outs[1], lengths, side)
    where = f"{side}-padded, real lengths {lengths} of T={ex.T}"
    err, index = _worst(b, a)
    if err > 0:  # jitter: the same two calls again, and one fresh padded input on both sides
        xz, _ = _layout(_inputs(ex, salt=6003), lengths, side, _fill(ex, "random", 6004))
        probe = [{"op": "forward", "x": xz, "mask": mask}]
        ctx.submit_apart(ex, steps[:1] + probe, steps[1:2] + probe)
        mine, theirs = ctx.collect_apart()
        a2, mine_z = (_real_rows(r["out"], lengths, side) for r in mine)
        b2, their_z = (_real_rows(r["out"], lengths, side) for r in theirs)
        jitter = max(_worst(a2, a)[0], _worst(b2, b)[0], _worst(mine_z, their_z)[0])
        allowed = tol.K * jitter
        if err > allowed:
            return _fail(f"the real tokens' outputs changed by {err:.3g} (allowed {allowed:.3g},"
                         f" the subject's own jitter x{tol.K:g}) when the padding held {kind} "
                         f"values instead of other random ones ({where}){_at(index)}: padding "
                         "must never reach a real token.", err, allowed, index)
        _steady("padding_invariance", ex, f"the real tokens' outputs changed by {err:.3g} when "
                f"the padding held {kind} values ({where})", jitter,
                max((float(t.abs().max()) for t in a if t.numel()), default=1.0))
    o = _real_rows(outs[2], lengths, other_side)
    err, index = _worst(o, a)
    scale = max((float(t.abs().max()) for t in a if t.numel()), default=1.0)
    allowed = tol.allowed(yard, ex.dtype, scale)
    if err > allowed:
        return _fail(f"the real tokens' outputs {side}-padded and {other_side}-padded differ by "
                     f"{err:.3g} (allowed {allowed:.3g}, {tol.K:g} x the reference's own "
                     f"discrepancy + floor; real lengths {lengths} of T={ex.T}){_at(index)}: "
                     "positions must count real tokens, whichever side the padding is on.",
                     err, allowed, index)
    if own is not None:
        wrong = _path_oracle(
            "padded", _flat(a), _flat(golden), path_yard, ex,
            lambda alt: _flat(_real_rows(padded_attention(xa.double(), own64, alt, mask),
                                         lengths, side)),
            f"padded(module, x, key_mask) on the real tokens ({where})")
        if wrong is not None:
            return wrong
    return Outcome(PASS, notes=notes)


def _flat(rows: list[Tensor]) -> Tensor:
    """Rows of different lengths as one flat tensor (the real tokens of a padded batch)."""
    return torch.cat([r.reshape(-1) for r in rows]) if rows else torch.zeros(0)


def check_masked_rows(ctx: Context, ex: Example) -> Outcome:
    """A query that sees no key (left padding's padded queries) gives finite outputs and
    finite gradients; by default (MASKED_ROWS = "zero") outputs that no input moves and zero
    gradients from those rows."""
    if ex.T < 2:
        return Outcome(PASS, notes=["T=1: no room for padding"])
    zero = _info(ctx, "masked_rows", "zero") == "zero"
    lengths = _padding(ex, 14)
    x1, mask = _layout(_inputs(ex, salt=_BASE["masked_rows"]), lengths, "left",
                       _fill(ex, "random", 6100))
    x2, _ = _layout(_inputs(ex, salt=6101), lengths, "left", _fill(ex, "random", 6102))
    masked = ~mask  # left padding: a padded query sees only padded keys
    only_masked = _inputs(ex, salt=6103) * masked[..., None].to(x1.dtype)
    everywhere = _inputs(ex, salt=6104)
    # x1 and x2 in two processes: a cache keyed by the mask cannot replay x1's masked rows.
    ctx.submit_apart(ex, [
        {"op": "forward", "x": x1, "mask": mask},
        {"op": "grad", "x": x1, "mask": mask, "cotangent": only_masked, "params": True},
        {"op": "grad", "x": x1, "mask": mask, "cotangent": everywhere, "params": True}],
        [{"op": "forward", "x": x2, "mask": mask}])
    (out1, masked_grad, all_grad), (out2,) = ctx.collect_apart()
    where = f"left-padded, real lengths {lengths} of T={ex.T}: queries 0..T-L-1 see no key"
    for out in (out1["out"], out2["out"]):
        rows = out[masked]
        if not bool(rows.isfinite().all()):
            bad = int((~rows.isfinite()).sum())
            return _fail(f"{bad} of the output values of queries that see no key are not finite "
                         f"({where}): a fully masked row must not give NaN.")
    for name, result in (("from the rows that see no key", masked_grad),
                         ("from every row", all_grad)):
        grads = [("d/d(input)", result["grad_x"]), *(
            (f"d/d({n})", g) for n, g in result["params"].items())]
        for what, g in grads:
            if g is not None and not bool(g.isfinite().all()):
                return _fail(f"the gradient {what} {name} is not finite ({where}): a fully "
                             "masked row's backward must not give NaN.")
    if not zero:
        return Outcome(PASS)
    err, index = tol.max_abs_diff(out2["out"][masked], out1["out"][masked])
    if err > 0:
        again = ctx.request(ex, [{"op": "forward", "x": x1, "mask": mask}])[0]["out"]
        allowed = tol.K * tol.max_abs_diff(again, out1["out"])[0]
        if err > allowed:
            return _fail(f"outputs of queries that see no key moved by {err:.3g} (allowed "
                         f"{allowed:.3g}) when the real tokens changed ({where}): with "
                         "MASKED_ROWS = 'zero' their attention output is zero, whatever the "
                         "input (declare MASKED_ROWS = 'finite' if they attend elsewhere).",
                         err, allowed)
    grad_x = masked_grad["grad_x"]
    if grad_x is not None:
        err, index = tol.max_abs_diff(grad_x, torch.zeros_like(grad_x))
        if err > 0:
            return _fail(f"the outputs of queries that see no key have a gradient of up to "
                         f"{err:.3g} with respect to the input{_at(index)} ({where}): with "
                         "MASKED_ROWS = 'zero' it must be exactly zero.", err, 0.0, index)
    return Outcome(PASS)


def _corner_lengths(ex: Example) -> int:
    """Tq for the causal corner: 1..T + 8, never T (Tk = T)."""
    options = [n for n in range(1, ex.T + 9) if n != ex.T]
    return _rng(ex, 15).choice(options)


def check_causal_corner(ctx: Context, ex: Example) -> Outcome:
    """With Tq != Tk, query i sees key j iff j <= i + shift (shift = Tk - Tq at the bottom
    right, 0 at the top left): keys past that must not move row i, and the key on it must.

    "Must move" is judged only where the reference, with the subject's exported weights in
    float64, moves clearly more than the dtype's floor: a key can carry too little weight to
    show in bfloat16 (or at all), and that is no evidence of the other corner."""
    corner = _info(ctx, "corner", "bottom_right")
    Tk, Tq = ex.T, _corner_lengths(ex)
    shift = corner_shift(corner, Tq, Tk)
    x_q = _inputs(ex, salt=7000, shape=(ex.B, Tq, ex.C))
    x_kv = _inputs(ex, salt=_BASE["causal_corner"])
    rng = _rng(ex, 16)
    # Rows with a key past their diagonal, and rows whose diagonal key exists.
    hidden_rows = [i for i in range(Tq) if -1 <= i + shift < Tk - 1]
    seen_rows = [i for i in range(Tq) if 0 <= i + shift < Tk]
    hidden = sorted({*rng.sample(hidden_rows, min(2, len(hidden_rows))),
                     *(hidden_rows[-1:] if hidden_rows else [])})
    seen = sorted({*rng.sample(seen_rows, min(2, len(seen_rows))), *seen_rows[-1:]})
    changed, plan = [], []
    for n, i in enumerate(hidden):
        xt = x_kv.clone()
        xt[:, i + shift + 1:] = _inputs(ex, salt=7100 + n)[:, i + shift + 1:] * 4
        changed.append(xt)
        plan.append(("hidden", i))
    for n, i in enumerate(seen):
        xt = x_kv.clone()
        xt[:, i + shift] = _inputs(ex, salt=7200 + n)[:, i + shift] * 4
        changed.append(xt)
        plan.append(("seen", i))
    if not plan:
        return Outcome(PASS, notes=["no query row has a key on or past its diagonal"])
    k = len(plan)
    queries, same, moved = torch.cat([x_q] * k), torch.cat([x_kv] * k), torch.cat(changed)
    # Unmoved keys in one process, moved ones in the other, each twice (jitter).
    base_steps = [{"op": "forward", "x": queries, "x_kv": same}] * 2
    moved_steps = [{"op": "forward", "x": queries, "x_kv": moved}] * 2
    info = getattr(ctx.executor, "info", None)
    expected: Tensor | None = None  # the reference's own change, row by row (float64)
    if getattr(info, "has_export", False):
        (exported,) = ctx.request(ex, [{"op": "export"}])
        weights = weights_in(_checked_weights(exported, ex), queries.double())
        ctx.submit_apart(ex, base_steps, moved_steps)  # the reference runs meanwhile
        with torch.no_grad():
            ref_base = cross_attention(queries.double(), same.double(), weights, ex.attention,
                                       corner)
            ref_moved = cross_attention(queries.double(), moved.double(), weights,
                                        ex.attention, corner)
            path_yard = tol.max_abs_diff(cross_attention(
                queries, same, weights_in(weights, queries), ex.attention, corner), ref_base)[0]
        expected = (ref_moved - ref_base).abs().amax(dim=-1)  # (kB, Tq)
        visible_floor = 4 * tol.floor(ex.dtype, float(ref_base.abs().max()))
    else:
        ctx.submit_apart(ex, base_steps, moved_steps)
    mine, theirs = ctx.collect_apart()
    (base1, base2), (moved1, moved2) = ([r["out"] for r in mine], [r["out"] for r in theirs])
    if not bool(base1.isfinite().all()):
        broken = sorted({int(t) for t in (~base1.isfinite()).nonzero()[:, 1]})
        blind = f" (queries 0..{-shift - 1} see no key)" if shift < 0 else ""
        return _fail(f"with Tq={Tq} queries on Tk={Tk} keys at the {corner.replace('_', '-')} "
                     f"corner{blind}, the outputs of queries {broken[:8]} are not finite: a "
                     "query that sees no key must give a finite output (flash-attention#1778).")
    allowed = tol.K * _jitter((base1, base2), (moved1, moved2))
    name = corner.replace("_", "-")
    for n, (kind, i) in enumerate(plan):
        rows = slice(n * ex.B, (n + 1) * ex.B)
        diagonal = i + shift
        if kind == "hidden":
            err, index = tol.max_abs_diff(moved1[rows, :i + 1], base1[rows, :i + 1])
            if err > allowed:
                return _fail(f"with Tq={Tq} queries on Tk={Tk} keys ({name} corner: query i "
                             f"sees keys j <= i{shift:+d}), changing keys {diagonal + 1}.."
                             f"{Tk - 1} moved query {i}'s output or an earlier one by {err:.3g} "
                             f"(allowed "
                             f"{allowed:.3g}){_at(index)}: those keys are past its diagonal.",
                             err, allowed, index)
        else:
            window = ex.attention.window
            last = Tq if window is None else min(Tq, i + window)
            if expected is None or not float(expected[rows, i:last].max()) > visible_floor:
                continue  # no reference to say the change must show in this dtype
            err, index = tol.max_abs_diff(moved1[rows, i:last], base1[rows, i:last])
            if not err > allowed:
                return _fail(f"with Tq={Tq} queries on Tk={Tk} keys ({name} corner: query i "
                             f"sees keys j <= i{shift:+d}), changing key {diagonal} moved "
                             f"queries {i}..{last - 1} by only {err:.3g} (allowed jitter "
                             f"{allowed:.3g}), yet query {i} must see it: is the other corner "
                             "implemented?")
    if expected is not None:  # the cross path's oracle: the reference's, in float64
        wrong = _path_oracle(
            "cross", base1, ref_base, path_yard, ex,
            lambda alt: cross_attention(queries.double(), same.double(), weights, alt, corner),
            f"cross(module, x_q, x_kv) with Tq={Tq} queries on Tk={Tk} keys ({name} corner)")
        if wrong is not None:
            return wrong
    return Outcome(PASS)


def _grouped(weights: Mapping[str, Tensor], spec: AttentionSpec, reads: Sequence[int],
             ) -> tuple[dict[str, Tensor], AttentionSpec]:
    """Weights and spec in which query head h reads kv head reads[h]: every query head gets its
    own copy of that kv head's k and v rows (an MHA spec, so positions and slopes stay put)."""
    D = spec.D
    rows = torch.cat([torch.arange(g * D, (g + 1) * D) for g in reads])
    out = dict(weights)
    for key in ("k_weight", "v_weight", "k_bias", "v_bias"):
        if key in weights:
            out[key] = weights[key][rows]
    return out, dataclasses.replace(spec, n_kv_head=None)


def _head_contributions(x: Tensor, weights: Mapping[str, Tensor], spec: AttentionSpec,
                        ) -> Tensor:
    """c[h, g] (H, G, B, T, C): query head h's share of the output (o bias left out) if it read
    kv head g, in float64."""
    H, G, D = spec.n_head, spec.G, spec.D
    w64 = _cast(weights, torch.float64, "cpu")
    x64 = x.to(torch.float64).cpu()
    o_heads = w64["o_weight"].reshape(spec.n_embd, H, D)
    shares = []
    for g in range(G):
        grouped, mha = _grouped(w64, spec, [g] * H)
        kept: list[Tensor] = []
        with torch.no_grad():
            _pipeline(x64, grouped, mha, 0, kept)
            v = torch.nn.functional.linear(x64, w64["v_weight"][g * D:(g + 1) * D],
                                           w64["v_bias"][g * D:(g + 1) * D]
                                           if "v_bias" in w64 else None)
            heads = kept[0] @ v[:, None]  # (B, H, T, D): every query head reading kv head g
            shares.append(torch.einsum("bhtd,chd->hbtc", heads, o_heads))
    return torch.stack(shares, dim=1)


def check_gqa_grouping(ctx: Context, ex: Example) -> Outcome:
    """Query head h reads kv head h // (H / G). Which kv head each query head really reads is
    found by fitting the subject's output with every (query head, kv head) share of the
    reference on its exported weights; a different assignment that fits is a failure.

    Black-box it cannot be told: reading h % G is h // (H / G) with the query heads permuted,
    which random weights cannot reveal; hence the exported weights."""
    spec = ex.attention
    H, G = spec.n_head, spec.G
    # Enough rows that the H * G shares are told apart: twice as many outputs as unknowns.
    rows = max(ex.B, math.ceil(2 * H * G / (ex.T * ex.C)))
    x = _inputs(ex, shape=(rows, ex.T, ex.C))
    (exported,) = ctx.request(ex, [{"op": "export"}])
    weights = _checked_weights(exported, ex)
    ctx.submit(None, [{"op": "forward", "x": x}])
    declared = [h // (H // G) for h in range(H)]
    golden = _reference(x, weights, ex, torch.float64)  # while the subject runs
    yard = tol.max_abs_diff(_reference(x, weights, ex), golden)[0]
    (out,) = ctx.collect_forwards(ex, [x])
    allowed = tol.allowed(yard, ex.dtype, float(golden.abs().max()))
    if tol.max_abs_diff(out, golden)[0] <= allowed:
        return Outcome(PASS)
    tiled = [h % G for h in range(H)]
    x64, w64 = x.to(torch.float64), _cast(weights, torch.float64, "cpu")
    matches = []
    for k_reads, v_reads in ((tiled, tiled), (declared, tiled), (tiled, declared)):
        # The common mistakes first, keys and values apart: one of them may be tiled alone.
        grouped, mha = grouped_weights(w64, spec, k_reads, v_reads)
        err, index = tol.max_abs_diff(out, _oracle(x64, grouped, dataclasses.replace(
            ex, spec=mha)))
        if err <= allowed:
            matches.append((k_reads, v_reads, err, index))
    if matches:
        k_reads, v_reads, err, index = matches[0]
        which = ("keys and values" if k_reads == v_reads else
                 "values" if v_reads == tiled else "keys")
        rest = ("" if k_reads == v_reads else
                f", while the {'keys' if which == 'values' else 'values'} are grouped as "
                "declared (h // (H / G))")
        if len(matches) > 1:  # values tiled, keys either way: the keys leave no trace here
            which, rest = "values", (", and which kv head the keys come from does not show on "
                                     "this input (each query sees a single key)")
        return _fail(f"with H={H} query heads on G={G} kv heads, query head h must read kv "
                     f"head h // (H / G) = h // {H // G} (repeat_interleave), but the "
                     f"subject's output is the reference's with query heads reading the "
                     f"{which} of kv heads {tiled} (matched to {err:.3g}, allowed "
                     f"{allowed:.3g}): that is h % G, the {which} tiled (repeat) instead of "
                     f"repeated in place{rest}.", err, allowed, index)
    shares = _head_contributions(x, weights, spec)  # (H, G, B, T, C)
    target = out.to(torch.float64)
    if "o_bias" in weights:
        target = target - weights["o_bias"].detach().to(torch.float64).cpu()
    if not bool(target.isfinite().all()):
        return Outcome(PASS, notes=["non-finite output: no grouping to identify (see finite)"])
    fit = torch.linalg.lstsq(shares.reshape(H * G, -1).T, target.reshape(-1, 1)).solution
    reads = [int(i) for i in fit.reshape(H, G).argmax(dim=1)]
    if reads == declared:
        return Outcome(PASS, notes=["the output differs from the reference, but not by its "
                                    "grouping (see oracle)"])
    grouped, mha = _grouped(weights, spec, reads)
    theirs = _oracle(x.to(torch.float64), _cast(grouped, torch.float64, "cpu"),
                     dataclasses.replace(ex, spec=mha))
    err, index = tol.max_abs_diff(out, theirs)
    if err > allowed:
        return Outcome(PASS, notes=["the output fits no assignment of query heads to kv heads "
                                    "(see oracle)"])
    wrong = [h for h in range(H) if reads[h] != declared[h]]
    shown = ", ".join(f"{h} -> {reads[h]} (not {declared[h]})" for h in wrong[:6])
    return _fail(f"with H={H} query heads on G={G} kv heads, query head h must read kv head "
                 f"h // (H / G) = h // {H // G} (repeat_interleave), but the subject's output "
                 f"is the reference's with query heads reading kv heads {reads} (matched to "
                 f"{err:.3g}, allowed {allowed:.3g}): {shown}.", err, allowed, index)


# Offsets the shifted hook is asked for: small ones, and ones past the lengths drawn.
_SMALL_OFFSETS = (1, 2, 3, 7, 16)
_LARGE_OFFSETS = (100, 1000, 4000)


def check_relative_position(ctx: Context, ex: Example) -> Outcome:
    """RoPE sees only distances: x with its positions starting at an offset gives forward's
    outputs. Different angles round differently, so the reference's own shift discrepancy in
    this dtype is the yardstick (as for prefix)."""
    rng = _rng(ex, 11)
    offsets = [rng.choice(_SMALL_OFFSETS), rng.choice(_LARGE_OFFSETS)]
    x = _inputs(ex, salt=_BASE["relative_position"])
    # forward in one process, shifted in the other: a cache keyed by x cannot replay forward.
    sets, own = _yardstick_weights(ctx, ex, x)
    ctx.submit_apart(ex, [{"op": "forward", "x": x}],
                     [{"op": "forward", "x": x, "offset": k} for k in offsets])
    spec = ex.attention
    yards = [0.0] * len(offsets)
    with torch.no_grad():
        for weights in sets:
            ours = weights_in(weights, x)
            whole = spec_attention(x, ours, spec)
            yards = [max(y, tol.max_abs_diff(spec_attention(x, ours, spec, k), whole)[0])
                     for y, k in zip(yards, offsets, strict=True)]
        if own is not None:  # the shifted path's oracle: the reference at that offset
            own64 = weights_in(own, x.double())
            goldens = [spec_attention(x.double(), own64, spec, k) for k in offsets]
            # The subject reaches the path through its forward (checked by oracle) and the
            # shift (checked against it): the path may be off by both errors at once.
            forward_yard = tol.max_abs_diff(spec_attention(x, weights_in(own, x), spec),
                                            spec_attention(x.double(), own64, spec))[0]
            path_yards = [max(tol.max_abs_diff(spec_attention(x, weights_in(own, x), spec, k),
                                               g)[0], forward_yard + y)
                          for k, g, y in zip(offsets, goldens, yards, strict=True)]
    mine, theirs = ctx.collect_apart()
    (full,), shifted = _outputs([x], mine), _outputs([x] * len(offsets), theirs)
    _finite("relative_position", "forward", full)
    scale = float(full.abs().max()) if full.numel() else 1.0
    for k, out, yard in zip(offsets, shifted, yards, strict=True):
        err, index = tol.max_abs_diff(out, full)
        allowed = tol.allowed(yard, ex.dtype, scale)
        if err > allowed:
            return _fail(f"shifted(module, x, offset={k}) differs from forward(x) by {err:.3g} "
                         f"(allowed {allowed:.3g}, {tol.K:g} x the reference's own "
                         f"{ex.dtype} discrepancy at that offset + floor){_at(index)}: "
                         "RoPE sees only distances between positions, so moving "
                         "every position by the same offset must change nothing. Are queries "
                         "and keys turned by the same positions, and the angles computed in "
                         "float32 or wider?", err, allowed, index)
    if own is not None:
        for k, out, golden, yard in zip(offsets, shifted, goldens, path_yards, strict=True):
            wrong = _path_oracle(
                "shifted", out, golden, yard, ex,
                lambda alt, k=k: spec_attention(x.double(), own64, alt, k),  # type: ignore[misc]
                f"shifted(module, x, offset={k}) (agreeing with forward(x))")
            if wrong is not None:
                return wrong
    return Outcome(PASS)


# ---- the table -------------------------------------------------------------------------------


def check_window(ctx: Context, ex: Example) -> Outcome:
    """Key j reaches query i iff i - window < j <= i: a change at position p must reach the
    output at p + W - 1 (just inside) and must not reach p + W or later (just outside)."""
    assert ex.spec is not None and ex.spec.window is not None
    W = ex.spec.window
    spots = sorted({p for p in ex.cuts if p + W - 1 <= ex.T - 1})
    if not spots:
        return Outcome(PASS, notes=["T <= window: no position has a key just inside it"])
    x = _inputs(ex, salt=_BASE["window"])
    changed = []
    for i, p in enumerate(spots):  # one position changed per block, at the same batch offset
        xt = x.clone()
        xt[:, p] = _inputs(ex, salt=5000 + i)[:, p]
        changed.append(xt)
    same, moved = torch.cat([x] * len(spots)), torch.cat(changed)
    # "Must move" needs a change big enough to show in the dtype (bfloat16 rounds away a key
    # of small weight): the reference with the exported weights says how big it is, in float64.
    shows: Tensor | None = None
    if getattr(getattr(ctx.executor, "info", None), "has_export", False):
        (exported,) = ctx.request(ex, [{"op": "export"}])
        weights = weights_in(_checked_weights(exported, ex), same.double())
        ctx.submit_apart(ex, [{"op": "forward", "x": same}] * 2,
                         [{"op": "forward", "x": moved}] * 2)
        with torch.no_grad():  # while the subject runs
            ref_same = spec_attention(same.double(), weights, ex.spec)
            ref_moved = spec_attention(moved.double(), weights, ex.spec)
        floor = 4 * tol.floor(ex.dtype, float(ref_same.abs().max()))
        shows = (ref_moved - ref_same).abs().amax(dim=-1) > floor  # (len(spots)·B, T)
    else:  # same and moved apart, so that no process can replay one for the other
        ctx.submit_apart(ex, [{"op": "forward", "x": same}] * 2,
                         [{"op": "forward", "x": moved}] * 2)
    mine, theirs = ctx.collect_apart()
    (same1, same2), (moved1, moved2) = (_outputs([same] * 2, mine),
                                        _outputs([moved] * 2, theirs))
    _finite("window", "forward", same1, moved1)
    allowed = tol.K * _jitter((same1, same2), (moved1, moved2))
    notes = []
    still: list[tuple[int, float]] = []  # without exports: spots whose inside edge did not move
    for i, p in enumerate(spots):
        rows = slice(i * ex.B, (i + 1) * ex.B)
        inside, _ = tol.max_abs_diff(moved1[rows, p + W - 1], same1[rows, p + W - 1])
        if shows is not None and not bool(shows[rows, p + W - 1].any()):
            notes.append("window's inside edge not judged where the reference's own change is "
                         f"below {ex.dtype}'s resolution")
        elif shows is None and not inside > allowed:
            still.append((p, inside))
        elif not inside > allowed:
            return _fail(f"changing the input at position {p} moved the output at {p + W - 1} "
                         f"by only {inside:.3g} (it must move by more than the subject's own "
                         f"jitter x{tol.K:g}, {allowed:.3g}), yet a window of {W} "
                         f"key{'s' * (W != 1)} (i - {W} < j <= i) includes position {p} there: "
                         f"the subject's window is shorter than {W}.", cut=p)
        if p + W <= ex.T - 1:
            err, index = tol.max_abs_diff(moved1[rows, p + W:], same1[rows, p + W:])
            if err > allowed:
                if index is not None:
                    index = (index[0], index[1] + p + W, *index[2:])
                return _fail(f"changing the input at position {p} changed the output at or "
                             f"after {p + W} by {err:.3g} (allowed {allowed:.3g}){_at(index)}, "
                             f"which a window of {W} key{'s' * (W != 1)} (i - {W} < j <= i) "
                             "excludes: the "
                             f"subject's window is longer than {W}.", err, allowed, index, p)
    if still and len(still) == len(spots) and ex.dtype not in ("bfloat16", "float16"):
        # Without exports a trained subject's softmax may give the edge key no visible weight
        # at one spot (a saturated row); a window of W - 1 moves it at none.
        p, inside = still[0]
        return _fail(f"changing the input at any of positions {[q for q, _ in still]} moved the "
                     f"output W - 1 = {W - 1} later by at most "
                     f"{max(v for _, v in still):.3g} (it must move by more than the subject's "
                     f"own jitter x{tol.K:g}, {allowed:.3g}, at one of them at least), yet a "
                     f"window of {W} key{'s' * (W != 1)} (i - {W} < j <= i) includes each "
                     f"there: the subject's window is shorter than {W}.", cut=p)
    if still:
        notes.append("window's inside edge not judged at every spot without export_weights (a "
                     "saturated softmax row may give the edge key no visible weight): it moved "
                     "at another" if len(still) < len(spots) else
                     f"window's inside edge not judged in {ex.dtype} without export_weights (a "
                     "key of small weight may not show)")
    return Outcome(PASS, notes=sorted(set(notes)))


# ---- sharded: tp_equivalence, cp_equivalence ------------------------------------------------


def _rank_fault(answers: Sequence[Mapping[str, Any]]) -> str | None:
    """The message of the rank to blame when some rank answered with an error: the first whose
    error is its own, not gloo's word that a peer failed it."""
    from ._gang import consequence

    faults = [(r, str(a.get("message", a))) for r, a in enumerate(answers)
              if a.get("kind") not in ("ok", "unsupported")]
    if not faults:
        return None
    world = len(answers)
    own = [(r, m) for r, m in faults if not consequence(m)]
    if own:
        rank, message = own[0]
        return f"rank {rank} of {world}: {message}"
    failed = "; ".join(f"rank {r}: {m}" for r, m in faults)
    if len(faults) == world:
        return (f"every rank failed in a collective ({failed}): the ranks deadlocked, most "
                "likely in mismatched collectives.")
    return f"ranks failed in a collective that others left ({failed})."


def _blamed(key: str, first: int, outs: Sequence[Tensor], want: Tensor,
            weights: Mapping[str, Tensor] | None, ex: Example, err: float) -> tuple[int, str]:
    """The rank to name for a sharded result off by `err`, and why: under tensor parallelism
    the ranks all-reduce, so where all return the same result the first one off says nothing.
    The output's error is then mapped back through o's columns onto the heads (rank r holds
    heads r·H/W ..), given the exported weights; d/dx's cannot be, so no rank is named."""
    if first < 0 or len(outs) < 2:
        return first, ""  # positions (CP) name their owner already
    spread = max(tol.max_abs_diff(o, outs[0])[0] for o in outs[1:])
    if spread * 10 > err:
        return first, ""  # the ranks differ by as much: the first one off is the one to name
    W, spec = len(outs), ex.attention
    same = " Every rank returns this same result (the ranks' outputs are all-reduced)"
    if key != "out" or weights is None:
        return -1, (f"{same}; which rank's heads are wrong cannot be told from "
                    + ("d/dx." if key != "out" else "it without export_weights."))
    o = weights["o_weight"].detach().to(torch.float64).cpu()  # (C, H·D)
    delta = (outs[0].to(torch.float64) - want.to(torch.float64)).reshape(-1, o.size(0))
    heads = torch.linalg.lstsq(o, delta.T).solution  # (H·D, N): each head's share, merged
    energy = heads.reshape(W, -1).pow(2).sum(dim=1)
    rank = int(energy.argmax())
    part = float(energy[rank] / energy.sum().clamp_min(1e-300))
    per = spec.n_head // W
    held = f"head {rank}" if per == 1 else f"heads {rank * per}..{(rank + 1) * per - 1}"
    return rank, (f"{same}, so the rank named is the one whose heads are wrong: mapped back "
                  f"through o's columns, {part:.0%} of the error lies in query {held}, rank "
                  f"{rank}'s.")


def _sharded_yardsticks(ex: Example, x: Tensor, cotangent: Tensor, kind: str, layout: str,
                        weights: Mapping[str, Tensor] | None = None,
                        ) -> tuple[float, float, float, tuple[Tensor, Tensor]]:
    """How far a correctly sharded computation in the example's dtype lands from float64, for
    the output, the input gradient and the weight gradients: the larger of the reference's and
    the simulated sharded reference's errors, on `weights` (attnspec's own by default); and the
    float64 reference's output and input gradient there."""
    from ._sharding import cp_reference, tp_reference

    spec = ex.attention
    weights = _reference_weights(ex) if weights is None else _cast(weights, torch.float64, "cpu")
    dtype = x.dtype

    def run(fn: Callable[..., Tensor], dt: torch.dtype) -> tuple[Tensor, Tensor, list[Tensor]]:
        with torch.enable_grad():
            xs = x.to(dt).requires_grad_(True)
            leaves = {k: v.to(dt).requires_grad_(True) for k, v in weights.items()}
            out = fn(xs, leaves)
            grads = vjp([out], [xs, *leaves.values()], [cotangent.to(dt)])
        gx = torch.zeros_like(xs) if grads[0] is None else grads[0]
        return out.detach(), gx, [g for g in grads[1:] if g is not None]

    def sharded(xs: Tensor, w: Mapping[str, Tensor]) -> Tensor:
        if kind == "heads":
            return tp_reference(xs, w, spec, ex.world)
        return cp_reference(xs, w, spec, ex.world, layout)

    gold = run(lambda xs, w: spec_attention(xs, w, spec), torch.float64)
    out_yard = grad_yard = weight_yard = 0.0
    for fn in (lambda xs, w: spec_attention(xs, w, spec), sharded):
        out, gx, gw = run(fn, dtype)
        out_yard = max(out_yard, tol.max_abs_diff(out, gold[0])[0])
        grad_yard = max(grad_yard, tol.max_abs_diff(gx, gold[1])[0])
        weight_yard = max([weight_yard, *(tol.max_abs_diff(a, b)[0]
                                          for a, b in zip(gw, gold[2], strict=True))])
    return out_yard, grad_yard, weight_yard, (gold[0], gold[1])


def _estimated_sharded_yardsticks(ex: Example, x: Tensor, cotangent: Tensor, kind: str,
                                  layout: str) -> tuple[float, float, float, tuple[Tensor, Tensor]]:
    """Without exports: the larger yardsticks of attnspec's random weights and of the same
    at trained logits (`_yardstick_weights`)."""
    base = _reference_weights(ex)
    trained = _trained(base, x, ex.attention)
    runs = [_sharded_yardsticks(ex, x, cotangent, kind, layout, w)
            for w in (base, *([trained] if trained is not None else []))]
    return (max(r[0] for r in runs), max(r[1] for r in runs), max(r[2] for r in runs),
            runs[0][3])


def _close(what: str, got: Tensor, want: Tensor, own: float, yard: float, ex: Example,
           ) -> tuple[float, float, tuple[int, ...] | None] | None:
    """(error, allowed, index) when `got` (sharded) is farther from `want` (unsharded) than two
    computations each as accurate as the reference in this dtype can be; None when close.
    `own`: the unsharded subject's own distance from its float64 run."""
    if got.shape != want.shape:
        raise SubjectFault(f"{what}: the sharded module gave shape {tuple(got.shape)}, the "
                           f"unsharded one {tuple(want.shape)}.")
    err, index = tol.max_abs_diff(got, want)
    allowed = tol.allowed(2 * max(own, yard), ex.dtype, float(want.abs().max()))
    return (err, allowed, index) if err > allowed else None


def _check_sharded(ctx: Context, ex: Example, kind: str) -> Outcome:
    from ._sharding import shard_positions_of

    if ctx.gangs is None or not ex.world:
        raise SubjectFault("a sharded example needs ranks; this executor has none.")
    W, hook = ex.world, "shard_heads" if kind == "heads" else "shard_positions"
    layout = _info(ctx, "cp_layout", "head_tail")
    x, cotangent = _inputs(ex, salt=9100), _inputs(ex, salt=9200)
    held = ([list(range(ex.T))] * W if kind == "heads"
            else [shard_positions_of(ex.T, r, W, layout) for r in range(W)])
    build = {**ex.build(), "shard": kind}
    gang = ctx.gangs(W)
    gang.submit([{"build": build, "steps": [{"op": "sharded_grad", "x": x[:, idx],
                                              "cotangent": cotangent[:, idx]}]}
                 for idx in held])
    # With exports, the golden on the exported weights too: the unsharded run made beside the
    # ranks is the subject's, and its process can see the ranks and copy their error.
    export = bool(getattr(getattr(ctx.executor, "info", None), "has_export", False))
    ctx.submit(ex, [*([{"op": "export"}] if export else []),
                    {"op": "grad", "x": x, "cotangent": cotangent, "params": True}])
    claimed = getattr(getattr(ctx.executor, "info", None), "dtypes", None)
    golden: tuple[float, float, float, tuple[Tensor, Tensor]] | None = None
    try:
        *exported, mine = ctx.collect()
        shared = _checked_weights(exported[0], ex) if exported else None
        if shared is not None:
            golden = _sharded_yardsticks(ex, x, cotangent, kind, layout, shared)
        own64 = None  # the subject's own float64 run: how far this dtype's rounding takes it
        if ex.dtype != "float64" and (claimed is None or "float64" in claimed):
            (own64,) = ctx.request(dataclasses.replace(ex, dtype="float64"), [
                {"op": "grad", "x": x.double(), "cotangent": cotangent.double(),
                 "params": True}])
        yards = golden if golden is not None else _estimated_sharded_yardsticks(
            ex, x, cotangent, kind, layout)  # while the ranks run
    except Exception:
        gang.collect()  # the ranks' answers, so that the next example starts clean
        raise
    except BaseException:  # Ctrl-C: do not wait for ranks that may hang
        gang.restart_later()
        raise
    answers = gang.collect()
    declined = [r for r, a in enumerate(answers) if a.get("kind") == "unsupported"]
    if declined and len(declined) == W:
        raise Unsupported(str(answers[0].get("message")))
    if declined:
        raise SubjectFault(f"supports(spec) declined on rank{'s' * (len(declined) > 1)} "
                           f"{', '.join(map(str, declined))} of {W} only: every rank must "
                           "answer alike for the same spec.")
    blame = _rank_fault(answers)
    if blame is not None:
        raise SubjectFault(f"{hook}(module, mesh) over {W} ranks: {blame}")
    for r, (a, idx) in enumerate(zip(answers, held, strict=True)):  # a rank is the subject's
        try:
            check_results(a, [{"op": "sharded_grad", "x": x[:, idx]}], device=ex.device,
                          who=f"rank {r} of {W}")
        except BadAnswer as bad:
            gang.restart_later()  # its next answer cannot be matched to a request
            raise SubjectFault(str(bad)) from None
    results = [a["results"][0] for a in answers]
    if mine["grad_x"] is None:
        raise SubjectFault("the unsharded module's output does not depend on its input through "
                           "autograd, so gradients cannot be compared.")
    shape = tuple(x.shape)

    def assembled(key: str) -> list[tuple[int, Tensor]]:
        """(rank, the full tensor by that rank): TP ranks each give it all; CP ranks their
        positions, put back in place."""
        for r, res in enumerate(results):
            if res[key] is None:
                raise SubjectFault(f"rank {r} of {W}: d(output)/d(input) is missing (the "
                                   "sharded output does not depend on the input).")
            want = (ex.B, len(held[r]), ex.C)
            if tuple(res[key].shape) != want:
                raise SubjectFault(f"rank {r} of {W}: {hook}'s module returned "
                                   f"{'output' if key == 'out' else 'input gradient'} of shape "
                                   f"{tuple(res[key].shape)} for input {want}.")
        if kind == "heads":
            return [(r, res[key]) for r, res in enumerate(results)]
        whole = torch.empty(shape, dtype=results[0][key].dtype)
        for idx, res in zip(held, results, strict=True):
            whole[:, idx] = res[key]
        return [(-1, whole)]

    def owner(index: tuple[int, ...] | None) -> int:
        if index is None or kind == "heads":
            return -1
        return next(r for r, idx in enumerate(held) if index[1] in idx)

    def failure(what: str, r: int, found: tuple[float, float, tuple[int, ...] | None],
                ) -> Outcome:
        err, allowed, index = found
        r = owner(index) if r < 0 else r
        who = f"rank {r} of {W}" if r >= 0 else f"{W} ranks"  # r < 0: no position to blame
        where = _where(index) or {}
        if r >= 0:
            where["rank"] = r
        layout_note = f", {layout} layout" if kind == "positions" else ""
        return Outcome("fail", f"{what} on {who} ({hook}{layout_note}) differs from "
                       f"the unsharded module's by {err:.3g}, allowed {allowed:.3g}"
                       f"{_at(index)}.", err, allowed, where or None)

    def own_error(value: Tensor, value64: Tensor | None) -> float:
        if value64 is not None and value64.shape != value.shape:
            raise SubjectFault(f"the unsharded module's float64 run gave shape "
                               f"{tuple(value64.shape)} where its own run gave "
                               f"{tuple(value.shape)}.")
        return 0.0 if value64 is None else tol.max_abs_diff(value, value64)[0]

    for key, what, yard in (("out", "the output", yards[0]),
                            ("grad_x", "d(output)/d(input)", yards[1])):
        own = own_error(mine[key], None if own64 is None else own64[key])
        ranks = assembled(key)
        for r, got in ranks:
            found = _close(what, got, mine[key], own, yard, ex)
            if found is not None:
                r, why = _blamed(key, r, [t for _, t in ranks], mine[key], shared, ex, found[0])
                wrong = failure(what.capitalize() if key == "out" else what, r, found)
                wrong.message += why
                return wrong
    if golden is not None:
        for key, what, yard, want in (("out", "the output", golden[0], golden[3][0]),
                                      ("grad_x", "d(output)/d(input)", golden[1], golden[3][1])):
            ranks = assembled(key)
            for r, got in ranks:
                err, index = tol.max_abs_diff(got, want)
                allowed = tol.allowed(yard, ex.dtype, float(want.abs().max()))
                if err > allowed:
                    beside = tol.max_abs_diff(mine[key], want)[0]
                    r, why = _blamed(key, r, [t for _, t in ranks], want, shared, ex, err)
                    wrong = failure(what.capitalize() if key == "out" else what, r,
                                    (err, allowed, index))
                    wrong.message = (
                        wrong.message.split(" differs from ")[0] + " differs from the reference "
                        f"on the subject's exported weights by {err:.3g}, allowed {allowed:.3g} "
                        f"({tol.K:g} x the reference's and the simulated sharded reference's "
                        f"own error in {ex.dtype} + floor){_at(index)}, though it matches the "
                        "unsharded module's run made beside the ranks"
                        + (f" (itself {beside:.3g} off)" if beside > allowed else "")
                        + ": a sharded result must be attention's, whatever the unsharded "
                        "module gives while the ranks run." + why)
                    return wrong
    notes: list[str] = []
    for name, want in mine["params"].items():
        if want is None:
            continue
        own = own_error(want, None if own64 is None else own64["params"].get(name))
        grads: list[Tensor | None] = []
        dtensor = False
        for res in results:  # a wrapper (nn.Sequential, torch.compile) prefixes the names
            named = [n for n in res["params"] if n == name or n.endswith("." + name)]
            if len(named) != 1:
                grads.append(None)
                continue
            grads.append(res["params"][named[0]])
            dtensor |= res.get("param_layout", {}).get(named[0]) == "dtensor"
        shaped = [g for g in grads if g is not None]
        if not shaped:
            return Outcome("fail", f"d(output)/d({name}) is missing on every rank under {hook} "
                           f"(no parameter named {name}, or with that suffix, has a gradient), "
                           "though the unsharded module has it.")
        if any(tuple(g.shape) != tuple(want.shape) for g in shaped):
            notes.append(f"{name} is sharded without DTensor: its gradient is not compared")
            continue
        full = [torch.zeros_like(want) if g is None else g for g in grads]

        def off(got: Tensor, label: str, r: int = -1, name: str = name, want: Tensor = want,
                own: float = own) -> Outcome | None:
            found = _close(f"d(output)/d({name})", got, want, own, yards[2], ex)
            if found is None:
                return None
            err, allowed, _ = found
            return Outcome("fail", f"d(output)/d({name}, shape {tuple(want.shape)}) {label} "
                           f"under {hook} differs from the unsharded module's by {err:.3g}, "
                           f"allowed {allowed:.3g}.", err, allowed, {"rank": r} if r >= 0 else None)

        each = [off(g, f"on rank {r} of {W}", r) for r, g in enumerate(full)]
        if all(o is None for o in each):
            continue  # every rank holds the whole gradient (DTensor, or reduced already)
        if dtensor:  # a DTensor gradient is the whole gradient, on every rank
            return next(o for o in each if o is not None)
        # Local gradients of a replicated weight: each rank's share, summed over the ranks.
        total = off(sum((g.double() for g in full), torch.zeros((), dtype=torch.float64)),
                    f"summed over the {W} ranks")
        if total is not None:
            total.message += (" (Nor does every rank's own gradient equal it: "
                              + next(o for o in each if o is not None).message.split(" under ")[0]
                              + " differs.)")
            return total
    return Outcome(PASS, notes=notes)


def _check_refusal(ctx: Context, ex: Example) -> Outcome:
    """shard_heads must refuse a spec whose n_head the world does not divide: n_head = W + 1,
    the example's D. Cheap where it refuses (one build and a raise per rank); a hook that
    accepts leaves the ranks to be restarted."""
    W = ex.world
    H = W + 1
    probe = dataclasses.replace(ex, C=H * ex.D, H=H, spec=AttentionSpec(H * ex.D, H), world=W)
    gang = ctx.gangs(W) if ctx.gangs is not None else None
    if gang is None or gang.probe_futile:
        return Outcome(PASS)
    answers = gang.run([{"build": probe.build(), "steps": [{"op": "shard_refuses",
                                                            "hook": "shard_heads"}]}] * W)
    if any(a.get("kind") != "ok" for a in answers):  # the build itself declined or failed
        gang.probe_futile = True  # each try would cost a restart of the ranks
        r, a = next((r, a) for r, a in enumerate(answers) if a.get("kind") != "ok")
        return Outcome(PASS, notes=[f"shard_heads' refusal of n_head={H} over world={W} not "
                                    f"asked: the build on rank {r} gave {a.get('kind')}"])
    for r, a in enumerate(answers):  # a rank is the subject's: check what it sent
        try:
            check_results(a, [{"op": "shard_refuses"}], device=None, who=f"rank {r} of {W}")
        except BadAnswer as bad:
            gang.restart_later()
            raise SubjectFault(str(bad)) from None
    accepted = [r for r, a in enumerate(answers) if not a["results"][0]["raised"]]
    if accepted:
        if len(accepted) < W:  # ranks that parted ways: one may wait in a collective forever
            gang.restart_later()
        return Outcome("fail", f"shard_heads(module, mesh) accepted n_head={H} over world={W} "
                       f"on rank{'s' * (len(accepted) > 1)} {', '.join(map(str, accepted))} "
                       f"(built for {probe.attention.describe()}): n_head % world != 0 leaves "
                       "some rank a fraction of a head. Raise instead, as "
                       "attnspec.check_shardable(spec, world, 'heads') does.",
                       where={"rank": accepted[0]})
    return Outcome(PASS)


def check_tp_equivalence(ctx: Context, ex: Example) -> Outcome:
    """shard_heads' module, on every rank, gives the unsharded module's output, input gradient
    and weight gradients, within what sharded rounding explains; and the hook refuses a world
    that does not divide n_head."""
    outcome = _check_sharded(ctx, ex, "heads")
    if outcome.kind == PASS:
        refusal = _check_refusal(ctx, ex)
        refusal.notes += outcome.notes
        return refusal
    return outcome


def check_cp_equivalence(ctx: Context, ex: Example) -> Outcome:
    """shard_positions' module, each rank given its positions of the layout, gives the
    unsharded module's outputs and gradients there; weight gradients sum over the ranks."""
    return _check_sharded(ctx, ex, "positions")


@dataclass(frozen=True)
class Property:
    """One property: its stable id, what it needs from the subject and the draw, its check."""

    id: str
    check: Callable[[Context, Example], Outcome]
    needs_export: bool = False
    uses_cuts: bool = False
    min_batch: int = 1
    needs_cuda: bool = False
    invalid_configs: bool = False  # draws configurations that build must refuse
    # The factors inputs are drawn at: 1, and x3 and x5 (peaked softmax rows, trained logits)
    # for the checks judged by the rule or by "must move", where the logits' size matters.
    input_scales: tuple[float, ...] = (1.0,)
    needs_window: bool = False  # draws only specs with a window (protocol v2 subjects)
    needs_hook: str | None = None  # a protocol v2 inference hook: decode, padded or cross
    needs_groups: bool = False  # draws only specs with 1 < n_kv_head < n_head (protocol v2)
    needs_rope: bool = False  # draws only specs with rotary positions (protocol v2)
    shards: str | None = None  # heads or positions: draws a world, runs on that many ranks


# Inputs x1, x3 and x5: attnspec's own weights then give logits of std about 0.3 (a nearly
# uniform softmax), 3 and 8 (peaked rows, where a kernel that returns the mean of v fails).
TRAINED = (1.0, 3.0, 5.0)

PROPERTIES: tuple[Property, ...] = (
    Property("width", check_width),
    Property("dtype", check_dtype),
    Property("divisibility", check_divisibility, invalid_configs=True),
    Property("causality", check_causality, uses_cuts=True),
    Property("prefix", check_prefix, uses_cuts=True, input_scales=TRAINED),
    Property("batch_independence", check_batch_independence, min_batch=2),
    Property("determinism", check_determinism),
    Property("input_unchanged", check_input_unchanged),
    Property("finite", check_finite, input_scales=(1.0, 4.0)),
    Property("oracle", check_oracle, needs_export=True, input_scales=TRAINED),
    Property("oracle_grad", check_oracle_grad, needs_export=True, input_scales=TRAINED),
    Property("grad_causality", check_grad_causality, uses_cuts=True),
    Property("device_agreement", check_device_agreement, needs_cuda=True,
             input_scales=TRAINED),
    Property("window", check_window, uses_cuts=True, needs_window=True, input_scales=TRAINED),
    Property("gqa_grouping", check_gqa_grouping, needs_export=True, needs_groups=True,
             input_scales=TRAINED),
    Property("decode", check_decode, uses_cuts=True, needs_hook="decode",
             input_scales=TRAINED),
    Property("padding_invariance", check_padding_invariance, needs_hook="padded",
             input_scales=TRAINED),
    Property("masked_rows", check_masked_rows, needs_hook="padded"),
    Property("causal_corner", check_causal_corner, needs_hook="cross", input_scales=TRAINED),
    Property("relative_position", check_relative_position, needs_hook="shifted",
             needs_rope=True, input_scales=TRAINED),
    Property("tp_equivalence", check_tp_equivalence, needs_hook="shard_heads", shards="heads",
             input_scales=TRAINED),
    Property("cp_equivalence", check_cp_equivalence, needs_hook="shard_positions",
             shards="positions", input_scales=TRAINED),
)
PROPERTY_IDS: tuple[str, ...] = tuple(p.id for p in PROPERTIES)
BY_ID: dict[str, Property] = {p.id: p for p in PROPERTIES}


# The properties whose self-comparisons are split between a worker and its twin.
TWINNED = frozenset({"causality", "batch_independence", "decode", "padding_invariance",
                     "masked_rows", "causal_corner", "relative_position"})


def _fitted_scale(ctx: Context, ex: Example) -> tuple[Example, str | None]:
    """Inputs scaled up to trained logits, no further: where the subject's own weights (its
    export) already make logits spread wider than TRAINED_LOGIT_STD at the drawn scale, the
    scale comes down to where they spread that much (at least 1). A trained model's inputs
    are normalised; x5 on its weights is a softmax no trained model sees."""
    if ex.scale <= 1 or not _has_export(ctx):
        return ex, None
    own = _exported(ctx, ex)
    assert own is not None
    spread = logit_std(_inputs(ex), own, ex.attention)
    if not spread > TRAINED_LOGIT_STD:
        return ex, None
    fitted = max(1.0, ex.scale * math.sqrt(TRAINED_LOGIT_STD / spread))
    return dataclasses.replace(ex, scale=fitted), (
        f"inputs x{fitted:.3g} instead of x{ex.scale:g} where the subject's logits would spread "
        f"beyond std {TRAINED_LOGIT_STD:g} (trained size)")


def run_check(executor: Executor, prop: str, ex: Example,
              gangs: Callable[[int], Gang] | None = None,
              twin: Callable[[], Executor | None] | None = None) -> Outcome:
    """Run one property on one example; the subject's faults become `error` outcomes. `twin`
    gives the second process the self-comparisons use (None: in process, no second one)."""
    ctx = Context(executor, gangs, twin)
    try:
        ex, note = _fitted_scale(ctx, ex)
        outcome = BY_ID[prop].check(ctx, ex)
        if note:
            outcome.notes.append(note)
    except SubjectFault as fault:
        outcome = Outcome("error", str(fault))
    except Unsupported as declined:
        outcome = Outcome("unsupported", str(declined))
    outcome.forwards = ctx.forwards
    return outcome
