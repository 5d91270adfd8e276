"""The properties: one check per id, run on one example against a loaded subject.

These run inside the worker process. Each returns an `Outcome` dict: `{"kind": "pass"}`, or a
failure (`"fail"`: the property is violated; `"error"`: the subject raised or returned something
unusable) with a message, the measured and allowed error and where the worst element is.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from . import _tolerance as tol
from ._reference import BIAS_KEYS, WEIGHT_KEYS, reference_attention
from ._subject import Subject, dtype_from_name, fault_text

__all__ = ["CHECKS", "Example", "PROPERTY_IDS", "SubjectFault", "run_check"]

PROPERTY_IDS: tuple[str, ...] = (
    "width", "dtype", "divisibility", "causality", "prefix", "batch_independence",
    "determinism", "input_unchanged", "finite", "oracle", "oracle_grad", "grad_causality",
    "device_agreement",
)

Outcome = dict[str, Any]


def _subject_errors() -> tuple[type[BaseException], ...]:
    """What the subject's own code may raise and be blamed for: sys.exit() in a kernel is its
    fault. Where SIGINT is ignored (the worker), a KeyboardInterrupt is the subject's own too."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return (Exception, SystemExit, KeyboardInterrupt)
    return (Exception, SystemExit)


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

    @property
    def D(self) -> int:
        return self.C // self.H if self.H > 0 else 0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cuts"] = list(self.cuts)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Example:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["cuts"] = tuple(known.get("cuts", ()))
        return cls(**known)

    def describe(self) -> str:
        cuts = f", cuts={list(self.cuts)}" if self.cuts else ""
        return (f"B={self.B}, T={self.T}, C={self.C}, H={self.H}, D={self.D}, "
                f"dtype={self.dtype}, device={self.device}, seed={self.seed}{cuts}")


class SubjectFault(Exception):
    """The subject raised or returned something unusable; becomes an `error` outcome."""


@dataclass
class _Run:
    """Counts forward calls, so benchmarks can show how many one example costs."""

    forwards: int = 0
    notes: list[str] = field(default_factory=list)


def _inputs(ex: Example, salt: int = 0, shape: tuple[int, ...] | None = None) -> Tensor:
    gen = torch.Generator().manual_seed(ex.seed * 7919 + salt)
    x = torch.randn(shape or (ex.B, ex.T, ex.C), generator=gen, dtype=torch.float64) * ex.scale
    return x.to(device=ex.device, dtype=dtype_from_name(ex.dtype))


def _build(subject: Subject, ex: Example) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(ex.seed)  # the same example builds the same weights on replay
        try:
            module = subject.build(ex.C, ex.H)
        except _subject_errors() as error:
            raise SubjectFault(f"build({ex.C}, {ex.H}) raised for a valid configuration: "
                               f"{fault_text(error)}") from error
    if not isinstance(module, torch.nn.Module):
        raise SubjectFault(f"build({ex.C}, {ex.H}) returned {type(module).__name__}, "
                           "not a torch.nn.Module.")
    try:
        module.eval()
        module.to(device=ex.device, dtype=dtype_from_name(ex.dtype))
    except _subject_errors() as error:
        raise SubjectFault(f".eval().to({ex.device}, {ex.dtype}) raised: "
                           f"{fault_text(error)}") from error
    return module


def _forward(module: torch.nn.Module, x: Tensor, run: _Run, *, grad: bool = False,
             check_shape: bool = True) -> Tensor:
    run.forwards += 1
    try:
        with torch.set_grad_enabled(grad):
            out = module(x)
    except _subject_errors() as error:
        raise SubjectFault(f"forward raised on input of shape {tuple(x.shape)}: "
                           f"{fault_text(error)}") from error
    if not isinstance(out, Tensor):
        hint = ""
        if isinstance(out, tuple):
            hint = (" (a tuple, as nn.MultiheadAttention returns (output, weights): "
                    "return only the output tensor)")
        raise SubjectFault(f"forward returned {type(out).__name__}{hint}, not a Tensor.")
    if check_shape and (out.shape != x.shape or out.dtype != x.dtype
                        or out.device != x.device):
        raise SubjectFault(
            f"forward returned {tuple(out.shape)} {out.dtype} on {out.device.type} for input "
            f"{tuple(x.shape)} {x.dtype} on {x.device.type}, so this property cannot be "
            "checked (see width and dtype).")
    return out


def _where(index: tuple[int, ...] | None, cut: int | None = None) -> dict[str, Any] | None:
    if index is None:
        return None
    where = dict(zip(("b", "t", "c"), index, strict=False))
    if cut is not None:
        where["cut"] = cut
    return where


def _fail(message: str, measured: float | None = None, allowed: float | None = None,
          index: tuple[int, ...] | None = None, cut: int | None = None) -> Outcome:
    return {"kind": "fail", "message": message, "measured": measured, "allowed": allowed,
            "where": _where(index, cut)}


def _at(index: tuple[int, ...] | None) -> str:
    return "" if index is None else " at (B, T, C) index " + str(tuple(index))


def _cuts(ex: Example) -> list[int]:
    """Cut points t with something after them: 0 <= t < T - 1."""
    return sorted({t for t in ex.cuts if 0 <= t < ex.T - 1})


# ---- the checks ----------------------------------------------------------------------------


def check_width(subject: Subject, ex: Example, run: _Run) -> Outcome:
    module, x = _build(subject, ex), _inputs(ex)
    out = _forward(module, x, run, check_shape=False)
    if out.shape != x.shape:
        return _fail(f"out.shape={tuple(out.shape)}, but should be {tuple(x.shape)} "
                     f"[attn(x), x.shape={tuple(x.shape)}]: the residual width (B, T, C) "
                     "must come back.")
    return {"kind": "pass"}


def check_dtype(subject: Subject, ex: Example, run: _Run) -> Outcome:
    module, x = _build(subject, ex), _inputs(ex)
    out = _forward(module, x, run, check_shape=False)
    if out.dtype != x.dtype or out.device != x.device:
        return _fail(f"out is {out.dtype} on {out.device}, but should be {x.dtype} on "
                     f"{x.device} like its input [attn(x), x.shape={tuple(x.shape)}].")
    return {"kind": "pass"}


def check_divisibility(subject: Subject, ex: Example, run: _Run) -> Outcome:
    with torch.random.fork_rng(devices=[]):
        try:
            built = subject.build(ex.C, ex.H)
        except _subject_errors():
            return {"kind": "pass"}  # any exception: it refused the configuration
    why = (f"{ex.C} is not divisible by {ex.H}" if ex.C >= 1 and ex.H >= 1
           else "n_embd and n_head must both be >= 1")
    return _fail(f"build({ex.C}, {ex.H}) returned {type(built).__name__} instead of raising: "
                 f"{why}.")


def _jitter(module: torch.nn.Module, x: Tensor, out: Tensor, run: _Run) -> float:
    """The subject's own run-to-run difference on identical input."""
    again = _forward(module, x, run)
    return tol.max_abs_diff(out, again)[0]


def check_causality(subject: Subject, ex: Example, run: _Run) -> Outcome:
    module, x = _build(subject, ex), _inputs(ex)
    cuts = _cuts(ex)
    if not cuts:
        run.notes.append("T=1: nothing after any position")
        return {"kind": "pass"}
    # One forward for every cut: rows [x, x, x changed after t1, x changed after t2, ...].
    changed = []
    for i, t in enumerate(cuts):
        xt = x.clone()
        xt[:, t + 1:] = _inputs(ex, salt=1000 + i)[:, t + 1:]
        changed.append(xt)
    stacked = torch.cat([x, x, *changed], dim=0)
    out = _forward(module, stacked, run)
    in_call = tol.max_abs_diff(out[:ex.B], out[ex.B:2 * ex.B])[0]
    jitter = max(_jitter(module, stacked, out, run), in_call)
    base = out[:ex.B]
    allowed = tol.K * jitter
    worst: tuple[float, int, tuple[int, ...] | None] = (0.0, -1, None)
    for i, t in enumerate(cuts):
        rows = out[(i + 2) * ex.B:(i + 3) * ex.B]
        err, index = tol.max_abs_diff(rows[:, :t + 1], base[:, :t + 1])
        if err > worst[0]:
            worst = (err, t, index)
    err, t, index = worst
    if err > allowed:
        return _fail(f"changing inputs after position t={t} changed outputs at or before t by "
                     f"{err:.3g} (allowed {allowed:.3g}, the subject's own jitter x{tol.K:g})"
                     f"{_at(index)}: a future token leaks into the past.", err, allowed, index, t)
    return {"kind": "pass"}


def check_prefix(subject: Subject, ex: Example, run: _Run) -> Outcome:
    module, x = _build(subject, ex), _inputs(ex)
    lengths = sorted({t + 1 for t in _cuts(ex)})[-4:] or []
    if not lengths:
        run.notes.append("T=1: no shorter prefix")
        return {"kind": "pass"}
    full = _forward(module, x, run)
    # The reference's own prefix discrepancy in this dtype is the yardstick.
    weights = _reference_weights(x, ex)
    ref_full = reference_attention(x, weights, ex.H)
    scale = float(full.detach().abs().max()) if full.numel() else 1.0
    for length in lengths:
        part = _forward(module, x[:, :length].contiguous(), run)
        err, index = tol.max_abs_diff(part, full[:, :length])
        ref_part = reference_attention(x[:, :length].contiguous(), weights, ex.H)
        yard = tol.max_abs_diff(ref_part, ref_full[:, :length])[0]
        allowed = tol.allowed(yard, ex.dtype, scale)
        if err > allowed:
            return _fail(f"the output on the first {length} positions differs from the first "
                         f"{length} positions of the full output (T={ex.T}) by {err:.3g} "
                         f"(allowed {allowed:.3g}){_at(index)}.", err, allowed, index, length - 1)
    return {"kind": "pass"}


def _reference_weights(x: Tensor, ex: Example) -> dict[str, Tensor]:
    gen = torch.Generator().manual_seed(ex.seed + 17)
    bound = 1.0 / math.sqrt(ex.C)
    return {key: ((torch.rand(ex.C, ex.C, generator=gen, dtype=torch.float64) * 2 - 1) * bound)
            .to(device=x.device, dtype=x.dtype) for key in WEIGHT_KEYS}


def check_batch_independence(subject: Subject, ex: Example, run: _Run) -> Outcome:
    module, x = _build(subject, ex), _inputs(ex)
    if ex.B < 2:
        run.notes.append("B=1: no other row")
        return {"kind": "pass"}
    out = _forward(module, x, run)
    jitter = _jitter(module, x, out, run)
    allowed = tol.K * jitter
    others = x.clone()
    others[1:] = _inputs(ex, salt=2000)[1:]
    first = x.clone()
    first[0] = _inputs(ex, salt=3000)[0]
    for changed, rows, what in ((others, slice(0, 1), "rows 1..B-1"),
                                (first, slice(1, None), "row 0")):
        moved = _forward(module, changed, run)
        err, index = tol.max_abs_diff(moved[rows], out[rows])
        if err > allowed:
            if index is not None and rows.start:
                index = (index[0] + rows.start, *index[1:])
            return _fail(f"changing batch {what} changed another row's output by {err:.3g} "
                         f"(allowed {allowed:.3g}){_at(index)}: batch rows must not interact.",
                         err, allowed, index)
    return {"kind": "pass"}


def check_determinism(subject: Subject, ex: Example, run: _Run) -> Outcome:
    module, x = _build(subject, ex), _inputs(ex)
    out = _forward(module, x, run)
    err, index = tol.max_abs_diff(_forward(module, x, run), out)
    if err > 0:
        return _fail(f"the same input twice in eval mode gave outputs {err:.3g} apart"
                     f"{_at(index)} (dropout or other randomness left on?).", err, 0.0, index)
    return {"kind": "pass"}


def check_input_unchanged(subject: Subject, ex: Example, run: _Run) -> Outcome:
    module, x = _build(subject, ex), _inputs(ex)
    before = x.clone()
    _forward(module, x, run, check_shape=False)
    err, index = tol.max_abs_diff(x, before)
    if err > 0 or x.shape != before.shape:
        return _fail(f"forward modified its input in place by up to {err:.3g}{_at(index)}.",
                     err, 0.0, index)
    return {"kind": "pass"}


def check_finite(subject: Subject, ex: Example, run: _Run) -> Outcome:
    module, x = _build(subject, ex), _inputs(ex)
    out = _forward(module, x, run)
    bad = ~torch.isfinite(out)
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        return _fail(f"{int(bad.sum())} of {out.numel()} outputs are not finite (first "
                     f"{float(out[index]):g}{_at(index)}) for finite input with "
                     f"max|x|={float(x.abs().max()):.3g}.", None, None, index)
    return {"kind": "pass"}


def _exported(subject: Subject, module: torch.nn.Module, ex: Example) -> dict[str, Tensor]:
    assert subject.export_weights is not None
    try:
        exported = subject.export_weights(module)
    except _subject_errors() as error:
        raise SubjectFault(f"export_weights raised: {fault_text(error)}") from error
    if not isinstance(exported, Mapping):
        raise SubjectFault(f"export_weights returned {type(exported).__name__}, not a mapping "
                           f"of {', '.join(WEIGHT_KEYS)} to tensors.")
    weights = dict(exported)
    missing = [k for k in WEIGHT_KEYS if k not in weights]
    if missing:
        raise SubjectFault(f"export_weights returned keys {sorted(weights)}; missing "
                           f"{', '.join(missing)}.")
    for key in (*WEIGHT_KEYS, *BIAS_KEYS):
        if key not in weights:
            continue
        want = (ex.C, ex.C) if key.endswith("weight") else (ex.C,)
        value = weights[key]
        if not isinstance(value, Tensor) or tuple(value.shape) != want:
            got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise SubjectFault(f"export_weights: {key} is {got}, but must be {want} "
                               f"(C = n_embd = {ex.C}, nn.Linear layout).")
    return {k: weights[k] for k in (*WEIGHT_KEYS, *BIAS_KEYS) if k in weights}


def _cast(weights: Mapping[str, Tensor], dtype: torch.dtype, device: str) -> dict[str, Tensor]:
    return {k: v.detach().to(device=device, dtype=dtype) for k, v in weights.items()}


def check_oracle(subject: Subject, ex: Example, run: _Run) -> Outcome:
    if subject.export_weights is None:
        return {"kind": "skip", "message": "the subject has no export_weights"}
    module, x = _build(subject, ex), _inputs(ex)
    weights = _exported(subject, module, ex)
    out = _forward(module, x, run)
    golden = reference_attention(x.to(torch.float64), _cast(weights, torch.float64, ex.device),
                                 ex.H)
    in_dtype = reference_attention(x, _cast(weights, x.dtype, ex.device), ex.H)
    err, index = tol.max_abs_diff(out, golden)
    yard = tol.max_abs_diff(in_dtype, golden)[0]
    allowed = tol.allowed(yard, ex.dtype, float(golden.abs().max()))
    if err > allowed:
        return _fail(f"max|subject - reference| = {err:.3g}, allowed {allowed:.3g} "
                     f"({tol.K:g} x the reference's own {ex.dtype} error {yard:.3g} + floor)"
                     f"{_at(index)}.", err, allowed, index)
    return {"kind": "pass"}


def _grads(fn: Callable[[Tensor, dict[str, Tensor]], Tensor], x: Tensor,
           weights: dict[str, Tensor], cotangent: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    x = x.detach().requires_grad_(True)
    leaves = {k: v.detach().requires_grad_(True) for k, v in weights.items()}
    out = fn(x, leaves)
    grads = torch.autograd.grad(out, [x, *leaves.values()], cotangent.to(out.dtype))
    return grads[0], dict(zip(leaves, grads[1:], strict=True))


def check_oracle_grad(subject: Subject, ex: Example, run: _Run) -> Outcome:
    if subject.export_weights is None:
        return {"kind": "skip", "message": "the subject has no export_weights"}
    module, x = _build(subject, ex), _inputs(ex)
    x = x.detach().requires_grad_(True)
    cotangent = _inputs(ex, salt=4000)
    params = [p for p in module.parameters() if p.requires_grad]
    out = _forward(module, x, run, grad=True)
    try:
        got = torch.autograd.grad(out, [x, *params], cotangent, allow_unused=True)
    except _subject_errors() as error:
        raise SubjectFault(f"backward raised: {fault_text(error)}") from error
    gx = got[0]
    if gx is None:
        return _fail("the output does not depend on the input through autograd.")
    weights = _exported(subject, module, ex)

    def ref(x_: Tensor, w: dict[str, Tensor]) -> Tensor:
        return reference_attention(x_, w, ex.H)

    gold_x, gold_w = _grads(ref, x.to(torch.float64), _cast(weights, torch.float64, ex.device),
                            cotangent.to(torch.float64))
    dt_x, dt_w = _grads(ref, x, _cast(weights, x.dtype, ex.device), cotangent)
    err, index = tol.max_abs_diff(gx, gold_x)
    yard = tol.max_abs_diff(dt_x, gold_x)[0]
    allowed = tol.allowed(yard, ex.dtype, float(gold_x.abs().max()))
    if err > allowed:
        return _fail(f"d(output)/d(input): max|subject - reference| = {err:.3g}, allowed "
                     f"{allowed:.3g}{_at(index)}.", err, allowed, index)
    connected = {k: v for k, v in weights.items() if v.requires_grad}
    if not connected:
        run.notes.append("export_weights is detached: weight gradients skipped")
        return {"kind": "pass"}
    # Map the reference's gradients (protocol layout) onto the subject's parameters.
    keys = list(connected)
    mapped = []
    for grads in (gold_w, dt_w):
        weights_now = _exported(subject, module, ex)
        outs = [weights_now[k] for k in keys]
        mapped.append(torch.autograd.grad(
            outs, params, [grads[k].to(outs[i].dtype) for i, k in enumerate(keys)],
            allow_unused=True))
    for i, p in enumerate(params):
        if mapped[0][i] is None:
            continue
        mine = got[i + 1] if got[i + 1] is not None else torch.zeros_like(p)
        err, index = tol.max_abs_diff(mine, mapped[0][i])
        yard = tol.max_abs_diff(mapped[1][i], mapped[0][i])[0]
        allowed = tol.allowed(yard, ex.dtype, float(mapped[0][i].abs().max()))
        if err > allowed:
            shape = tuple(p.shape)
            return _fail(f"d(output)/d(parameter of shape {shape}): max|subject - reference| = "
                         f"{err:.3g}, allowed {allowed:.3g} at index {index}.", err, allowed)
    return {"kind": "pass"}


def check_grad_causality(subject: Subject, ex: Example, run: _Run) -> Outcome:
    module = _build(subject, ex)
    cuts = _cuts(ex)
    if not cuts:
        run.notes.append("T=1: nothing after any position")
        return {"kind": "pass"}
    x = _inputs(ex)
    # One backward for every cut: copy i of x carries a cotangent on positions <= t_i only.
    stacked = torch.cat([x] * len(cuts), dim=0).detach().requires_grad_(True)
    cotangent = torch.zeros_like(stacked)
    noise = _inputs(ex, salt=5000, shape=tuple(stacked.shape))
    for i, t in enumerate(cuts):
        rows = slice(i * ex.B, (i + 1) * ex.B)
        cotangent[rows, :t + 1] = noise[rows, :t + 1]
    out = _forward(module, stacked, run, grad=True)
    try:
        (grad,) = torch.autograd.grad(out, [stacked], cotangent)
    except _subject_errors() as error:
        raise SubjectFault(f"backward raised: {fault_text(error)}") from error
    for i, t in enumerate(cuts):
        future = grad[i * ex.B:(i + 1) * ex.B, t + 1:]
        err, index = tol.max_abs_diff(future, torch.zeros_like(future))
        if err > 0:
            assert index is not None
            index = (index[0], index[1] + t + 1, index[2])
            return _fail(f"the gradient of outputs at or before t={t} w.r.t. inputs after t is "
                         f"{err:.3g}, but must be 0{_at(index)}.", err, 0.0, index, t)
    return {"kind": "pass"}


def check_device_agreement(subject: Subject, ex: Example, run: _Run) -> Outcome:
    if not torch.cuda.is_available():
        return {"kind": "skip", "message": "no CUDA device"}
    cpu = Example(**{**ex.to_json(), "device": "cpu", "cuts": ()})
    gpu = Example(**{**ex.to_json(), "device": "cuda", "cuts": ()})
    out_cpu = _forward(_build(subject, cpu), _inputs(cpu), run)
    out_gpu = _forward(_build(subject, gpu), _inputs(gpu), run)
    weights = _reference_weights(_inputs(cpu), cpu)
    ref_cpu = reference_attention(_inputs(cpu), weights, ex.H)
    ref_gpu = reference_attention(_inputs(gpu), _cast(weights, ref_cpu.dtype, "cuda"), ex.H)
    yard = tol.max_abs_diff(ref_cpu, ref_gpu.cpu())[0]
    err, index = tol.max_abs_diff(out_cpu, out_gpu.cpu())
    allowed = tol.allowed(yard, ex.dtype, float(out_cpu.abs().max()))
    if err > allowed:
        return _fail(f"CPU and CUDA outputs differ by {err:.3g} (allowed {allowed:.3g})"
                     f"{_at(index)}.", err, allowed, index)
    return {"kind": "pass"}


CHECKS: dict[str, Callable[[Subject, Example, _Run], Outcome]] = {
    "width": check_width,
    "dtype": check_dtype,
    "divisibility": check_divisibility,
    "causality": check_causality,
    "prefix": check_prefix,
    "batch_independence": check_batch_independence,
    "determinism": check_determinism,
    "input_unchanged": check_input_unchanged,
    "finite": check_finite,
    "oracle": check_oracle,
    "oracle_grad": check_oracle_grad,
    "grad_causality": check_grad_causality,
    "device_agreement": check_device_agreement,
}
assert tuple(CHECKS) == PROPERTY_IDS


def run_check(subject: Subject, prop: str, ex: Example) -> Outcome:
    """Run one property on one example; subject faults become `error` outcomes."""
    run = _Run()
    try:
        outcome = CHECKS[prop](subject, ex, run)
    except SubjectFault as fault:
        outcome = {"kind": "error", "message": str(fault)}
    outcome["forwards"] = run.forwards
    if run.notes:
        outcome["notes"] = run.notes
    return outcome
