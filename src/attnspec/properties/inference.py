"""The inference paths: decode, padding_invariance, masked_rows, causal_corner and
relative_position."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..reference.inference import (
    attend_at,
    corner_shift,
    cross_attention,
    decode_attention,
    padded_attention,
    padded_decode_attention,
)
from ..reference.spec import AttentionSpec
from ..reference.variants import spec_attention
from . import tolerance as tol

if TYPE_CHECKING:
    pass



from .base import (
    _BASE,
    PASS,
    Context,
    Example,
    Outcome,
    SubjectFault,
    _at,
    _cuts,
    _fail,
    _finite,
    _info,
    _inputs,
    _jitter,
    _outputs,
    _rng,
    _steady,
    weights_in,
)
from .yardsticks import _checked_weights, _dropped_feature, _path_oracle, _yardstick_weights


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


def _padding(ex: Example, salt: int, *, need_padded: bool = True) -> list[int]:
    """Real lengths per row, 1..T, at least one row padded where T > 1."""
    rng = _rng(ex, salt)
    lengths = [rng.randint(1, ex.T) for _ in range(ex.B)]
    if need_padded and ex.T > 1 and all(n == ex.T for n in lengths):
        lengths[rng.randrange(ex.B)] = rng.randint(1, ex.T - 1)
    return lengths


def padded_batch(ex: Example, side: str) -> tuple[Tensor, Tensor, list[int]]:
    """padding_invariance's first batch: x (B, T, C) whose rows hold the real tokens on one
    `side` and random values elsewhere, the key mask (B, T) (True at real tokens), and the
    real lengths; attnspec.strategies.padded_batches draws these."""
    lengths = _padding(ex, 13)
    x, mask = _layout(_inputs(ex, salt=_BASE["padding_invariance"]), lengths, side,
                      _fill(ex, "random", 6000))
    return x, mask, lengths


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
    xa, mask, _ = padded_batch(ex, side)
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
