"""Agreement with the reference: oracle, oracle_grad, device_agreement."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..common.grad import vjp
from ..reference.variants import spec_attention
from . import tolerance as tol
from .diagnose import diagnose
from .found import confirmed_here

if TYPE_CHECKING:
    pass



from .base import (
    PASS,
    Context,
    Example,
    Outcome,
    SubjectFault,
    _at,
    _cast,
    _fail,
    _inputs,
    _only_float32_accurate,
    _oracle,
    _reference,
)
from .yardsticks import _checked_weights, _yardstick_weights, missing_biases


def _oracle_run(ctx: Context, ex: Example,
                ) -> tuple[Tensor, dict[str, Tensor], Tensor, Tensor, float, float]:
    """oracle's measurement: x, the exported weights, the subject's output, the float64
    golden, the yardstick and the scale (pictures.py draws the same numbers)."""
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
    return x, weights, out, golden, yard, float(golden.abs().max())


def oracle_parts(ctx: Context, ex: Example) -> tuple[Tensor, Tensor, Tensor, float]:
    """x, the subject's output, the golden and the rule's allowance, as oracle judges them."""
    x, _, out, golden, yard, scale = _oracle_run(ctx, ex)
    return x, out, golden, tol.allowed(yard, ex.dtype, scale)


def _exported_keys(ctx: Context, ex: Example) -> set[str]:
    """The keys the subject's export gave for this example (before biases were filled in)."""
    (exported,) = ctx.request(None, [{"op": "export"}])
    return set(exported["weights"])


def _found_elsewhere(ctx: Context, ex: Example, weights: Mapping[str, Tensor],
                     x: Tensor) -> Outcome | None:
    """With weights found by name (not exported): where they do not reproduce this example's
    module even at T = 1 (its v and o), its layout is not the probe's, and nothing is judged."""
    found = getattr(getattr(ctx.executor, "info", None), "found", None)
    if found is None or confirmed_here(ctx, ex, weights, x):
        return None
    why = (f"the weights found by name ({found}) do not reproduce this example's module even at "
           "T = 1, where attention is v and o: its projections are laid out otherwise here, so "
           "it was not judged (export_weights says how)")
    return Outcome("skip", why, notes=[why])


def check_oracle(ctx: Context, ex: Example) -> Outcome:
    x, weights, out, golden, yard, scale = _oracle_run(ctx, ex)
    err, index = tol.max_abs_diff(out, golden)
    allowed = tol.allowed(yard, ex.dtype, scale)
    if err > allowed and (elsewhere := _found_elsewhere(ctx, ex, weights, x)) is not None:
        return elsewhere
    if err > allowed:
        precision = _only_float32_accurate(ex, err, lambda: tol.max_abs_diff(
            _reference(x, weights, ex, torch.float32), golden)[0], scale)
        # float64 rounded as float32 is cause enough; otherwise, which common mistake it is
        why = (f": {precision}" if precision else
               ". " + diagnose(out, x, weights, ex.attention, ex.dtype, scale))
        left_out = missing_biases(_exported_keys(ctx, ex), ex)
        if left_out:  # where a layer has a bias, leaving it out of the export shows here
            why += (f" ({', '.join(left_out)} not exported: taken as zero, as a layer without "
                    "one has; export the layer's own where it has one)")
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
    if err > allowed and (elsewhere := _found_elsewhere(ctx, ex, weights, x)) is not None:
        return elsewhere
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
