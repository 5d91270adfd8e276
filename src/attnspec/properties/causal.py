"""Causality and its neighbours: causality, prefix, batch_independence, grad_causality, window."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..reference.spec import ALiBi, AttentionSpec
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
    _inputs,
    _jitter,
    _only_float32_accurate,
    _outputs,
    _probe,
    _reference,
    _steady,
    weights_in,
)
from .yardsticks import _checked_weights, _has_export, _yardstick_weights


def _again(ctx: Context, ex: Example, prop: str, mine: tuple[Tensor, Tensor],
           theirs: tuple[Tensor, Tensor], salt: int) -> float:
    """The subject's jitter: each side's (input, first output) called again, and one fresh
    input on both sides, the largest difference over the three pairs of identical calls."""
    (x_mine, mine1), (x_theirs, theirs1) = mine, theirs
    probe = _probe(ex, x_mine, salt)
    ctx.submit_apart(ex, [{"op": "forward", "x": x_mine}, *probe],
                     [{"op": "forward", "x": x_theirs}, *probe])
    got_mine, got_theirs = ctx.collect_apart()
    (mine2, mine_z), (theirs2, their_z) = (_outputs([x_mine, x_mine], got_mine),
                                           _outputs([x_theirs, x_theirs], got_theirs))
    _finite(prop, "forward", mine2, theirs2, mine_z, their_z)
    return _jitter((mine1, mine2), (theirs1, theirs2), (mine_z, their_z))

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
    jitter = _again(ctx, ex, "causality", (same, same1), (moved, moved1), 4000)
    allowed = tol.K * jitter
    change = f"changing inputs after position t={t} changed outputs at or before t by {err:.3g}"
    if err > allowed:
        leaks = []  # per leaking block: whether only the output at its cut itself moved
        for i, cut in enumerate(cuts):
            rows = slice(i * ex.B, (i + 1) * ex.B)
            if tol.max_abs_diff(moved1[rows, :cut + 1], same1[rows, :cut + 1])[0] > allowed:
                earlier = tol.max_abs_diff(moved1[rows, :cut], same1[rows, :cut])[0] \
                    if cut else 0.0
                leaks.append((cut, earlier <= allowed))
        only = ""
        # Only query t moved, the one next to the changed positions, at a cut with earlier ones.
        if all(alone for _, alone in leaks) and any(cut >= 1 for cut, _ in leaks):
            only = (" (only the output at t itself moved, the position just before the changed "
                    "ones: the mask is likely one position off, each query seeing the next key, "
                    "as tril(diagonal=1) gives)")
        return _fail(f"{change} (allowed {allowed:.3g}, the subject's own jitter x{tol.K:g})"
                     f"{_at(index)}: a future token leaks into the past{only}.", err, allowed,
                     index, t)
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


# mixing: each earlier position is changed to fresh values x8 in two directions, of either
# sign, so that one of them makes its key score high (q_t . k_s flips with k_s) and the query t
# takes in its value visibly, however peaked or saturated the rows are at the subject's own
# weights (one direction can be nearly orthogonal to q_t's reading of it: a trained-size
# double, C = 5, went unmoved in one row that way).
_MIX_GAIN = 8.0
_MIX_WAYS = 4  # copies per source: two directions, two signs
_MIX_SOURCES = 4  # positions changed per example: the first within reach, the nearest, 2 cuts
# Where a change exceeds this many floors, it is dependence, not rounding (identical calls that
# jitter by half this much fail determinism): no second round of calls is needed.
_MIX_CLEAR = 16
# ALiBi: a key's penalty slope x distance beyond this leaves it a weight below e^-8 of the
# nearest's even when its score is the row's highest: without exports it is not judged there.
_ALIBI_REACH = 8.0


def _alibi_reach(spec: AttentionSpec, t: int) -> int:
    """The earliest position whose key reaches query t visibly under ALiBi (0 without it)."""
    from ..reference.spec import alibi_slopes

    if not isinstance(spec.positions, ALiBi):
        return 0
    slopes = spec.positions.slopes or tuple(alibi_slopes(spec.n_head))
    least = min(abs(s) for s in slopes)
    if least * t <= _ALIBI_REACH:  # every key in reach (a slope of 0, or nearly)
        return 0
    return max(0, t - int(_ALIBI_REACH / least))


def check_mixing(ctx: Context, ex: Example) -> Outcome:
    """The output at the last position t depends on earlier ones: changing x at position s < t
    (fresh values x8, two directions, either sign) must move the output at t, for the first
    position within the spec's reach (0 for full causal attention, t - window + 1 with a
    window), the one after it, the nearest (t - 1) and a drawn cut between. The identity, a
    per-position map (a Linear, an MLP), an undeclared window and a dropped first key fail it;
    no weights are needed."""
    spec = ex.attention
    t = ex.T - 1
    first = 0 if spec.window is None else max(0, t - spec.window + 1)
    if t < 1 or first >= t:
        return Outcome(PASS, notes=["T=1: no earlier position" if t < 1 else
                                    "window 1: each query sees only its own key"])
    has_export = _has_export(ctx)
    if not has_export:
        first = max(first, _alibi_reach(spec, t))
    # The first within reach and the one after it tell a dropped first key from a window.
    inner = sorted({c for c in ex.cuts if first + 1 < c < t - 1})[:_MIX_SOURCES - 3]
    sources = sorted({first, min(first + 1, t - 1), t - 1, *inner})
    x = _inputs(ex, salt=_BASE["mixing"])
    changed = _mixing_copies(ex, x, sources)

    def at_t(*outs: Tensor) -> float:  # the scale of the values compared, the outputs at t
        return float(torch.cat([o[:, t] for o in outs]).abs().max()) if x.numel() else 1.0

    # First the + copies in one process and the - copies in the other, each copy at the same
    # batch offset in both calls: outputs at t 16 floors apart (more than jitter between
    # identical calls, which determinism bounds) show that t depends on s; nothing more needed.
    plus, minus = (torch.cat(changed[k::2]) for k in (0, 1))
    ctx.submit_apart(ex, [{"op": "forward", "x": plus}], [{"op": "forward", "x": minus}])
    mine, theirs = ctx.collect_apart()
    (plus1,), (minus1,) = _outputs([plus], mine), _outputs([minus], theirs)
    _finite("mixing", "forward", plus1, minus1)
    ways = _MIX_WAYS // 2

    def apart(a: Tensor, b: Tensor) -> list[float]:  # per source, the most of its pairs
        return [max(_row_change(a[:, t], b[:, t], ex.B, ways * i + k) for k in range(ways))
                for i in range(len(sources))]

    quick = apart(plus1, minus1)
    floor = tol.floor(ex.dtype, at_t(plus1, minus1))
    if all(q > _MIX_CLEAR * floor for q in quick):
        return Outcome(PASS)
    # Or more than the jitter of identical calls (each again, one fresh input on both sides)
    # where that jitter is rounding: a 16-bit row seldom moves by 16 floors of its scale.
    jitter = _again(ctx, ex, "mixing", (plus, plus1), (minus, minus1), 4100)
    if jitter <= floor and all(q > tol.K * jitter for q in quick):
        return Outcome(PASS)
    # Not clear: every copy against x at the copies' own offsets, x in one process and the
    # copies in the other, with the reference's view of where a change must show.
    same, moved = torch.cat([x] * len(changed)), torch.cat(changed)
    weights = None
    if has_export:
        (exported,) = ctx.request(ex, [{"op": "export"}])
        weights = weights_in(_checked_weights(exported, ex), x.double())
    ctx.submit_apart(ex, [{"op": "forward", "x": same}], [{"op": "forward", "x": moved}])
    shows = None if weights is None else _reference_shows(  # while the subject runs
        ex, x, moved, weights, t, len(sources))
    mine, theirs = ctx.collect_apart()
    (same1,), (moved1,) = _outputs([same], mine), _outputs([moved], theirs)
    _finite("mixing", "forward", same1, moved1)

    def changes(a: Tensor, b: Tensor) -> list[float]:  # per source, the most of its copies
        return [max(_row_change(a[:, t], b[:, t], ex.B, _MIX_WAYS * i + k)
                    for k in range(_MIX_WAYS)) for i in range(len(sources))]

    found = changes(moved1, same1)
    judged = [i for i in range(len(sources)) if shows is None or shows[i]]
    scale = float(same1.abs().max()) if same1.numel() else 1.0
    notes = [] if len(judged) == len(sources) else [
        "mixing not judged where the reference's own change at t is below the dtype's "
        "resolution"]
    if all(found[i] > _MIX_CLEAR * tol.floor(ex.dtype, at_t(same1, moved1)) for i in judged):
        return Outcome(PASS, notes=notes)
    # Jitter from pairs of equal calls: each side again, and one fresh input on both sides.
    jitter = _again(ctx, ex, "mixing", (same, same1), (moved, moved1), 4000)
    allowed = tol.K * jitter
    still = [sources[i] for i in judged if not found[i] > allowed]
    if still and shows is None and ex.dtype in ("bfloat16", "float16"):
        # Without weights a 16-bit output may round a light key's change away (C = 1: the
        # value's share of 1/T, under a bias of 1): no evidence either way, as window's edge.
        why = (f"mixing not judged in {ex.dtype} without export_weights where a change did not "
               "show (a key of small weight may round away)")
        if len(still) == len(sources):
            return Outcome("skip", why, notes=[why])
        return Outcome(PASS, notes=[*notes, why])
    if not still:
        return Outcome(PASS, notes=notes)
    worst = max(found[sources.index(s)] for s in still)
    _steady("mixing", ex, f"changing the input at positions {still} moved the output at t={t} "
            f"by at most {worst:.3g}", jitter, scale)
    what = _unreached_why(ex, t, still, [s for s in sources if s not in still])
    moved_by = found[sources.index(still[0])]
    return _fail(f"changing the input at position {still[0]} (fresh values x{_MIX_GAIN:g}, two "
                 f"directions, either sign) moved the output at t={t} by {moved_by:.3g}"
                 f" (it must move by more than the subject's own jitter x{tol.K:g}, "
                 f"{allowed:.3g}): {what}.", None, allowed, None, still[0])


def _reference_shows(ex: Example, x: Tensor, moved: Tensor, weights: Any, t: int,
                     sources: int) -> list[bool]:
    """Per source, whether the reference's own output at t moves (past 4 floors of the dtype)
    when that source's copies change x: where it does not, the subject's is not judged."""
    spec = ex.attention
    with torch.no_grad():
        ref_same = spec_attention(x[:, :t + 1].double(), weights, spec)[:, t]
        ref_moved = spec_attention(moved[:, :t + 1].double(), weights, spec)[:, t]
    floor = 4 * tol.floor(ex.dtype, float(ref_same.abs().max()))
    ref_same = ref_same.repeat(moved.size(0) // x.size(0), 1)
    return [max(_row_change(ref_moved, ref_same, ex.B, _MIX_WAYS * i + k)
                for k in range(_MIX_WAYS)) > floor for i in range(sources)]


def _mixing_copies(ex: Example, x: Tensor, sources: list[int]) -> list[Tensor]:
    """Copies of x, each with fresh values x8 at one source position: _MIX_WAYS // 2 directions
    per source, each with either sign (+ then -)."""
    changed = []
    for i, s in enumerate(sources):
        for way in range(_MIX_WAYS // 2):
            fresh = _inputs(ex, salt=27_100 + 10 * i + way)[:, s] * _MIX_GAIN
            for sign in (1.0, -1.0):
                xt = x.clone()
                xt[:, s] = sign * fresh
                changed.append(xt)
    return changed


def _unreached_why(ex: Example, t: int, still: list[int], reached: list[int]) -> str:
    """What it means that the positions `still` do not reach t while `reached` do."""
    spec = ex.attention
    if not reached and len(still) == 1:
        what = ("the only earlier position does not reach it: the first key is dropped, or the "
                "output at each position depends on that position alone (the identity, a "
                "per-position map such as a Linear), which is not attention")
    elif not reached:
        what = (f"no earlier position ({', '.join(map(str, still))}) reaches it: the output at "
                "each position depends on that position alone (the identity, a per-position map "
                "such as a Linear or an MLP, or an output projection of zeros), which is not "
                "attention")
    elif still == [0] and spec.window is None and not isinstance(spec.positions, ALiBi):
        what = (f"position 0 does not reach it, though {', '.join(map(str, reached))} do: the "
                f"first key (a BOS token) is dropped, or the subject has a window of {t} "
                "keys or fewer that the spec does not declare")
    else:
        span = t - max(still)
        declared = "no window" if spec.window is None else f"a window of {spec.window}"
        what = (f"positions {still} do not reach it, though {reached} do: the subject attends "
                f"to at most the last {span} key{'s' * (span != 1)}, and the spec declares "
                f"{declared}")
    return what


def _row_change(a: Tensor, b: Tensor, B: int, block: int) -> float:
    """How far block `block` of a (block·B, C) pair moved, in the row that moved most (a row's
    q_t may read a change's direction as nearly nothing; another row's does not)."""
    rows = slice(block * B, (block + 1) * B)
    diff = (a[rows].double() - b[rows].double()).abs()
    diff = torch.nan_to_num(diff, nan=math.inf)
    return float(diff.max()) if diff.numel() else 0.0
