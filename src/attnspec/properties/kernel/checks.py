"""The kernel properties' checks, one function each (the catalogue is in __init__).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from ...reference import conventions as conv
from .. import tolerance as tol
from ..base import PASS, Outcome, Unsupported
from .example import (
    K_GRAD,
    KernelExample,
    _gen,
    _lengths,
    _normal,
    inputs,
    query_positions,
    real_rows,
    reference,
    visible_rows,
)
from .harness import (
    Kernel,
)
from .judging import (
    Yardstick,
    _at,
    _changed,
    _failed,
    _finite_max,
    _judge,
    _judgeable,
    _judged,
    _own_jitter,
    _where,
)

# ---- the checks ------------------------------------------------------------------------------


Check = Callable[[Kernel], Outcome]


def check_width(kern: Kernel) -> Outcome:
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    step = kern.step(q, k, v)
    (raw,) = kern.ctx.request(ex, [step], check_layout=False)
    out, want = raw["out"], tuple(step["out_shape"])
    if tuple(out.shape) != want:
        layout = conv.LAYOUTS[c.layout]
        return _failed(f"o has shape {tuple(out.shape)}; with LAYOUT = {c.layout!r} ({layout}) "
                     f"it must be {want}, q's shape")
    lse = raw.get("lse")
    if c.lse is not None and lse is not None and tuple(lse.shape) != tuple(step["lse_shape"]):
        return _failed(f"the LSE has shape {tuple(lse.shape)}; with LSE_LAYOUT = "
                     f"{c.lse_layout!r} ({conv.LSE_LAYOUTS[c.lse_layout]}) it must be "
                     f"{tuple(step['lse_shape'])}")
    return Outcome(PASS)


def check_dtype(kern: Kernel) -> Outcome:
    q, k, v = inputs(kern.ex)
    (raw,) = kern.ctx.request(kern.ex, [kern.step(q, k, v)], check_layout=False)
    if raw["out"].dtype != q.dtype:
        return _failed(f"o is {str(raw['out'].dtype).removeprefix('torch.')} for "
                     f"{kern.ex.dtype} inputs: it must be q's dtype")
    return Outcome(PASS)


def _perturbed(t: Tensor, where: Callable[[Tensor], Tensor], ex: KernelExample, salt: int,
               factor: float = 1.0) -> Tensor:
    """t with fresh values (x factor) where `where(t)` (a boolean of t's shape) is True, drawn
    for those positions only (in row-major order): a fifth of a run's time went on drawing
    whole tensors of which most was thrown away."""
    chosen = where(t)
    fresh = _normal(ex, salt, int(chosen.sum()))
    return t.masked_scatter(chosen, (fresh * ex.scale * factor).to(t.dtype))


def _positions(t: Tensor, axis: int, chosen: Callable[[Tensor], Tensor]) -> Tensor:
    shape = [1] * t.dim()
    shape[axis] = t.size(axis)
    return chosen(torch.arange(t.size(axis))).view(shape).expand(t.shape)


def _apart(kern: Kernel, mine: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]],
           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Steps on the worker and on its twin (no process sees both sides), unpacked."""
    kern.ctx.submit_apart(kern.ex, mine, theirs)
    a, b = kern.ctx.collect_apart()
    return ([kern.unpack(r, s) for r, s in zip(a, mine, strict=True)],
            [kern.unpack(r, s) for r, s in zip(b, theirs, strict=True)])


def _unmoved(name: str, base: Tensor | None, moved: Tensor | None, rows: Tensor, jitter: float,
             change: str, axes: str = "b h i d") -> Outcome | None:
    if base is None or moved is None:
        return None
    err, index = _changed(base, moved, rows, 2 * jitter)
    if err > 2 * jitter:
        return _failed(f"{change} moved {name} by {err:.3g} (2 x the kernel's own jitter: "
                     f"{2 * jitter:.3g}){_at(index, axes)}", err, 2 * jitter,
                     _where(index, axes))
    return None


def check_causality(kern: Kernel) -> Outcome:
    """Keys and values a query may not see (past its causal diagonal, at the declared corner)
    move nothing of its o or LSE: keys from a cut on are changed, rows before the cut judged."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    shift = ex.Tk - ex.Tq if c.causal == "bottom_right" else 0
    i = query_positions(ex, c.causal)  # (B, Tq)
    notes = []
    for cut in ex.cuts or (max(0, ex.Tk // 2),):
        later = lambda t, cut=cut: _positions(t, 2, lambda j: j >= cut)  # noqa: E731
        k2, v2 = _perturbed(k, later, ex, 11), _perturbed(v, later, ex, 12)
        base, again = (kern.step(q, k, v), kern.step(q, k, v))
        mine, theirs = _apart(kern, [base, again], [kern.step(q, k2, v2)])
        jitter = _own_jitter(kern, mine)
        blind = (i < cut)[:, None, :, None] & _judgeable(ex, c)
        if not bool(blind.any()):
            notes.append(f"cut {cut}: no query before it")
            continue
        change = (f"changing keys and values at positions >= {cut} (which queries i with "
                  f"i{' + Tk - Tq' if shift else ''} < {cut} may not see, CAUSAL = {c.causal!r})")
        for name in ("o", "lse"):
            failed = _unmoved(name, mine[0][name], theirs[0][name], blind, jitter, change,
                              "b h i d" if name == "o" else "b h i")
            if failed is not None:
                return failed
    outcome = Outcome(PASS)
    outcome.notes.extend(notes[:1])
    return outcome


def check_batch_independence(kern: Kernel) -> Outcome:
    """Changing one batch row moves no other row; changing one query head's q, or one kv head's
    k and v, moves no head that does not read it (the row and heads drawn from the seed)."""
    ex = kern.ex
    q, k, v = inputs(ex)
    r, h, g = ex.seed % ex.B, (ex.seed // 7) % ex.H, (ex.seed // 11) % ex.G
    row0 = lambda t: _positions(t, 0, lambda b: b == r)  # noqa: E731
    head0 = lambda t: _positions(t, 1, lambda n: n == h)  # noqa: E731
    group0 = lambda t: _positions(t, 1, lambda n: n == g)  # noqa: E731
    q_b, k_b, v_b = (_perturbed(t, row0, ex, 21 + n) for n, t in enumerate((q, k, v)))
    q_h = _perturbed(q, head0, ex, 24)
    k_h, v_h = _perturbed(k, group0, ex, 25), _perturbed(v, group0, ex, 26)
    mine, theirs = _apart(kern, [kern.step(q, k, v), kern.step(q, k, v)],
                          [kern.step(q_b, k_b, v_b), kern.step(q_h, k, v),
                           kern.step(q, k_h, v_h)])
    jitter = _own_jitter(kern, mine)
    judged = _judgeable(kern.ex, kern.c)
    per = ex.H // ex.G
    others = (torch.arange(ex.B) != r).view(-1, 1, 1, 1).expand(ex.B, 1, ex.Tq, 1) & judged
    heads = (torch.arange(ex.H) != h).view(1, -1, 1, 1).expand(ex.B, ex.H, ex.Tq, 1)
    groups = (torch.arange(ex.H) // per != g).view(1, -1, 1, 1).expand(ex.B, ex.H, ex.Tq, 1)
    for name in ("o", "lse"):
        axes = "b h i d" if name == "o" else "b h i"
        for moved, rows, change in (
                (theirs[0], others, f"changing batch row {r}"),
                (theirs[1], heads & judged, f"changing query head {h}'s q"),
                (theirs[2], groups & judged, f"changing kv head {g}'s k and v (read by query "
                                             f"heads {g * per}..{(g + 1) * per - 1} only)")):
            if rows.size(1) == 1 and mine[0][name] is not None:
                rows = rows.expand(ex.B, ex.H, ex.Tq, 1)
            failed = _unmoved(name, mine[0][name], moved[name], rows, jitter, change, axes)
            if failed is not None:
                return failed
    return Outcome(PASS)


def check_determinism(kern: Kernel) -> Outcome:
    """The same call twice gives the same o and LSE bit for bit (and the same gradients where
    the kernel declares DETERMINISTIC)."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    grad = None
    if c.backward and c.deterministic:
        do = inputs(dataclasses.replace(ex, scale=1.0), 31)[0]
        grad = {"do": do, "dlse": None}
    first, second = kern.run([kern.step(q, k, v, grad=grad), kern.step(q, k, v, grad=grad)])
    rows = _judgeable(ex, c)
    for name in ("o", "lse", "dq", "dk", "dv"):
        a, b = first.get(name), second.get(name)
        if a is None or b is None:
            continue
        if name in ("o", "lse", "dq"):  # rows left undefined are not compared
            mask = rows if a.dim() == 4 else rows[..., 0]
            a, b = a.masked_fill(~mask, 0.0), b.masked_fill(~mask, 0.0)
        err, index = tol.max_abs_diff(a, b)
        if err > 0 or not _same_nan(a, b):
            which = ("the backward (DETERMINISTIC = True)" if name.startswith("d")
                     else "the forward")
            return _failed(f"{which}: two identical calls gave {name} {err:.3g} apart"
                         f"{_at(index)}", err, 0.0, _where(index))
    return Outcome(PASS)


def _same_nan(a: Tensor, b: Tensor) -> bool:
    return bool((a.isnan() == b.isnan()).all())


def check_input_unchanged(kern: Kernel) -> Outcome:
    """q, k and v are as they were after the call, and were not written during it (their
    version counters did not move: a write undone before return shows there)."""
    ex = kern.ex
    q, k, v = inputs(ex)
    (got,) = kern.run([kern.step(q, k, v, inputs_after=True)])
    for name in "qkv":
        after, sent = got["inputs"][name], got["sent"][name]
        if after.shape != sent.shape or not (torch.equal(after, sent) or bool(
                ((after == sent) | (after.isnan() & sent.isnan())).all())):
            err = tol.max_abs_diff(after, sent)[0] if after.shape == sent.shape else math.inf
            return _failed(f"attention wrote into its input {name} (it changed by up to "
                         f"{err:.3g}): a kernel must leave q, k and v as it found them", err, 0.0)
    for name in got.get("written", []):
        return _failed(f"attention wrote into its input {name} during the call and put it back "
                       f"before returning ({name}._version moved: an in-place operation, "
                       f"undone): whatever reads {name} meanwhile (another stream, another "
                       "thread) sees it changed; a kernel must leave q, k and v as it found them")
    return Outcome(PASS)


def check_finite(kern: Kernel) -> Outcome:
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    (got,) = kern.run([kern.step(q, k, v)])
    seen = visible_rows(ex, c.causal)
    o = got["o"]
    bad = ~o.isfinite() & _judgeable(ex, c)
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        return _failed(f"o is {float(o[index]):g}{_at(index)} on finite inputs (x{ex.scale:g})")
    lse = got["lse"]
    if lse is not None:
        bad_lse = ~lse.isfinite() & seen[..., 0].expand_as(lse)
        if bool(bad_lse.any()):
            index = tuple(int(i) for i in bad_lse.nonzero()[0])
            return _failed(f"the LSE is {float(lse[index]):g}{_at(index, 'b h i')} for a query "
                         "that sees keys")
    return Outcome(PASS)


def _golden(ex: KernelExample, q: Tensor, k: Tensor, v: Tensor, corner: str,
            grad: Tensor | None = None, grad_lse: Tensor | None = None,
            ) -> tuple[Tensor, Tensor, Any]:
    return reference(ex, q, k, v, corner, torch.float64, grad=grad, grad_lse=grad_lse)


def _oracle_outcome(kern: Kernel, got: Mapping[str, Any], q: Tensor, k: Tensor, v: Tensor,
                    what: str = "", golden: tuple[Tensor, Tensor, Any] | None = None,
                    yard: Yardstick | None = None) -> Outcome | None:
    """o and the LSE against the golden; `golden` and `yard` where the caller has them (the
    same forward, computed with gradients)."""
    ex, c = kern.ex, kern.c
    golden = _golden(ex, q, k, v, c.causal) if golden is None else golden
    yard = Yardstick(ex, q, k, v, c.causal, golden) if yard is None else yard
    failed = _judge("o", _judged(ex, c.causal, c.masked_rows, got["o"].double()),
                    _judged(ex, c.causal, c.masked_rows, golden[0]), yard, ex, what=what)
    if failed is None and c.lse is not None:
        lse_yard, lse_dtype = yard, None
        returned = got["raw"].get("lse")
        low = ex.dtype in ("bfloat16", "float16")
        if low and returned is not None and returned.dtype in (torch.float32, torch.float64):
            # A float32 LSE (as FlashAttention and FlashInfer return it) is judged as float32:
            # the core from the same inputs with its scores in float32.
            lse_yard = Yardstick(ex, q, k, v, c.causal, golden, dtype=torch.float32)
            lse_dtype = "float32"
        failed = _judge("lse", _judged(ex, c.causal, c.masked_rows, got["lse"]),
                        _judged(ex, c.causal, c.masked_rows, golden[1]), lse_yard, ex,
                        what=what, floor_dtype=lse_dtype)
        if failed is not None and got["lse"] is not None:
            failed.message += _lse_hint(got["lse"], golden[1], ex)
    return failed


def _lse_hint(got: Tensor, want: Tensor, ex: KernelExample) -> str:
    both = got.isfinite() & want.isfinite()
    if not bool(both.any()):
        return ""
    ratio = float((got[both] / want[both].where(want[both].abs() > 1e-6,
                                                torch.ones_like(want[both]))).median())
    if abs(ratio * math.log(2) - 1) < 0.02:
        return "; the LSE is log2 of the reference's: is it base 2? (LSE = 'base2')"
    if abs(ratio / math.log(2) - 1) < 0.02:
        return "; the LSE is the reference's x ln 2: declared base 2, computed natural?"
    return ""


def check_oracle(kern: Kernel) -> Outcome:
    """o and the LSE agree with the float64 core within the rule."""
    q, k, v = inputs(kern.ex)
    (got,) = kern.run([kern.step(q, k, v)])
    failed = _oracle_outcome(kern, got, q, k, v)
    return failed or Outcome(PASS)


def check_oracle_grad(kern: Kernel) -> Outcome:
    """dq, dk, dv of sum(o * do) agree with the core's, within 3 x the dtype's own error."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    do = inputs(dataclasses.replace(ex, scale=1.0), 31)[0]
    do = do.masked_fill(~_judgeable(ex, c), 0.0)  # no gradient flows from undefined rows
    (got,) = kern.run([kern.step(q, k, v, grad={"do": do, "dlse": None})])
    # One golden and yardstick, with gradients: their o and LSE are the plain forward's.
    golden = _golden(ex, q, k, v, c.causal, grad=do.double())
    yard = Yardstick(ex, q, k, v, c.causal, golden, grad=do)
    failed = _oracle_outcome(kern, got, q, k, v, what="the call differentiated: ",
                             golden=golden, yard=yard)
    if failed is not None:  # the o a backward starts from is judged as oracle judges o
        return failed
    # A gradient that is 0 in exact arithmetic (dk with one key) is all rounding: its floor
    # scales with the largest of the three, as a module's parameter gradients do.
    largest = max(_finite_max(g) for g in golden[2])
    for name, want, t in zip(("dq", "dk", "dv"), golden[2], (q, k, v), strict=True):
        # No gradient (an input the output does not depend on, Tk = 0) is a zero gradient.
        gotten = torch.zeros(t.shape, dtype=torch.float64) if got[name] is None else \
            got[name].double()
        if name == "dq":
            gotten, want = _judged(ex, c.causal, "zero", gotten), _judged(ex, c.causal, "zero",
                                                                           want)
        failed = _judge(name, gotten, want, yard, ex, K=K_GRAD, magnitude=largest)
        if failed is not None:
            return failed
    return Outcome(PASS)


def check_window(kern: Kernel) -> Outcome:
    """At each spot j0, the rows whose window j0 is outside of are unchanged when key j0
    changes, and the rows whose window it is the edge of move."""
    ex, c = kern.ex, kern.c
    assert ex.window is not None
    left, right = ex.window
    q, k, v = inputs(ex)
    i = query_positions(ex, c.causal)  # (B, Tq)
    spots = [j for j in (ex.cuts or (ex.Tk // 2,)) if 0 <= j < ex.Tk]
    theirs_steps, spot_rows = [], []
    for n, j0 in enumerate(spots):
        at = lambda t, j0=j0: _positions(t, 2, lambda j: j == j0)  # noqa: E731
        theirs_steps.append(kern.step(q, _perturbed(k, at, ex, 41 + n),
                                      _perturbed(v, at, ex, 61 + n, factor=100.0)))
        inside = torch.ones(i.shape, dtype=torch.bool)
        if ex.causal:
            inside &= j0 <= i
        if left is not None:
            inside &= j0 >= i - left
        if right is not None:
            inside &= j0 <= i + right
        inside &= j0 < torch.tensor([lk for _, lk in _lengths(ex)])[:, None]  # a real key
        edge = torch.zeros(i.shape, dtype=torch.bool) if left is None else inside & (
            j0 == i - left)
        right_edge = torch.zeros(i.shape, dtype=torch.bool) if right is None or ex.causal \
            else inside & (j0 == i + right)
        spot_rows.append((j0, inside, edge, right_edge))
    mine, theirs = _apart(kern, [kern.step(q, k, v), kern.step(q, k, v)], theirs_steps)
    jitter = _own_jitter(kern, mine)
    real = _judgeable(ex, c)
    edges_seen = edges_moved = 0
    right_seen = right_moved = 0
    for (j0, inside, edge, right_edge), moved in zip(spot_rows, theirs, strict=True):
        outside = (~inside)[:, None, :, None] & real
        change = (f"changing key {j0}, outside the window {ex.window} of the queries judged "
                  f"(WINDOW = {c.window!r})")
        for name in ("o", "lse"):
            failed = _unmoved(name, mine[0][name], moved[name], outside, jitter, change,
                              "b h i d" if name == "o" else "b h i")
            if failed is not None:
                return failed
        rows = edge[:, None, :, None] & real
        if bool(rows.any()):
            edges_seen += 1
            err, _ = _changed(mine[0]["o"], moved["o"], rows, 2 * jitter)
            edges_moved += err > 2 * jitter
        rows = right_edge[:, None, :, None] & real
        if bool(rows.any()):
            right_seen += 1
            err, _ = _changed(mine[0]["o"], moved["o"], rows, 2 * jitter)
            right_moved += err > 2 * jitter
    if edges_seen and not edges_moved:
        return _failed(f"no query whose window's left edge is the changed key (left={left}, "
                     f"inclusive: query i' sees keys i' - {left} .. i') moved: the kernel's "
                     "window is one key narrower than declared")
    if right_seen and not right_moved:
        return _failed(f"no query whose window's right edge is the changed key (right={right}, "
                     "inclusive: query i' sees keys up to i' + right) moved: the kernel's window "
                     "is one key narrower on the right than declared")
    if not spots:
        return Outcome(PASS, notes=["no key to change in this example"])
    return Outcome(PASS)


def check_gqa_grouping(kern: Kernel) -> Outcome:
    """A change to kv head g moves only its query heads g*H/G .. (g+1)*H/G - 1, and those move."""
    ex = kern.ex
    q, k, v = inputs(ex)
    per = ex.H // ex.G
    g = ex.seed % ex.G
    head = lambda t: _positions(t, 1, lambda n: n == g)  # noqa: E731
    k2, v2 = _perturbed(k, head, ex, 71), _perturbed(v, head, ex, 72)
    mine, theirs = _apart(kern, [kern.step(q, k, v), kern.step(q, k, v)],
                          [kern.step(q, k2, v2)])
    jitter = _own_jitter(kern, mine)
    ours = (torch.arange(ex.H) // per == g).view(1, -1, 1, 1)
    real = real_rows(ex) & visible_rows(ex, kern.c.causal)
    others = (~ours).expand(ex.B, ex.H, ex.Tq, 1) & real
    change = f"changing kv head {g} (which serves query heads {g * per}..{(g + 1) * per - 1})"
    for name in ("o", "lse"):
        failed = _unmoved(name, mine[0][name], theirs[0][name], others, jitter, change,
                          "b h i d" if name == "o" else "b h i")
        if failed is not None:
            return failed
    for h in range(g * per, (g + 1) * per):
        rows = (torch.arange(ex.H) == h).view(1, -1, 1, 1).expand(ex.B, ex.H, ex.Tq, 1) & real
        if bool(rows.any()):
            err, _ = _changed(mine[0]["o"], theirs[0]["o"], rows, 2 * jitter)
            if err <= 2 * jitter:
                return _failed(f"{change} left query head {h}'s o unchanged: head h must read kv "
                             f"head h // (H / G) = {g}")
    return Outcome(PASS)


def check_masked_rows(kern: Kernel) -> Outcome:
    """A query that sees no key gives o = 0 and LSE = -inf, and zero dq, never NaN."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    blind = real_rows(ex) & ~visible_rows(ex, c.causal)
    if not bool(blind.any()):
        return Outcome(PASS, notes=["no query without keys in this example"])
    do = inputs(dataclasses.replace(ex, scale=1.0), 31)[0]
    grad = {"do": do, "dlse": None} if c.backward else None
    (got,) = kern.run([kern.step(q, k, v, grad=grad)])
    rows = blind.expand(ex.B, ex.H, ex.Tq, 1)
    o = got["o"]
    masked_o = o.masked_select(rows.expand_as(o))
    if not bool((masked_o == 0).all()):
        index = tuple(int(i) for i in ((o != 0) & rows).nonzero()[0])
        return _failed(f"a query that sees no key (MASKED_ROWS = 'zero') gave o = "
                     f"{float(o[index]):g}{_at(index)}, not 0")
    lse = got["lse"]
    if lse is not None:
        masked_lse = lse.masked_select(rows[..., 0])
        if not bool((masked_lse == -math.inf).all()):
            index = tuple(int(i) for i in ((lse != -math.inf) & rows[..., 0]).nonzero()[0])
            return _failed(f"a query that sees no key gave LSE = {float(lse[index]):g}"
                         f"{_at(index, 'b h i')}, not -inf")
    for name in ("dq", "dk", "dv"):
        g = got.get(name)
        if g is not None and not bool(g.isfinite().all()):
            return _failed(f"{name} holds NaN or inf when some queries see no key")
    dq = got.get("dq")
    if dq is not None and not bool((dq.masked_select(rows.expand_as(dq)) == 0).all()):
        return _failed("dq is not 0 for a query that sees no key")
    return Outcome(PASS)


def check_varlen(kern: Kernel) -> Outcome:
    """The packed call equals each sequence called alone, within the rule (zero-length
    sequences included)."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    alone = []
    for b, (lq, lk) in enumerate(_lengths(ex)):
        if lq == 0:
            continue
        one = dataclasses.replace(ex, B=1, Tq=max(lq, 1), Tk=max(lk, 1), lengths=((lq, lk),))
        alone.append((b, one, Kernel(kern.ctx, one, c).step(
            q[b:b + 1, :, :one.Tq], k[b:b + 1, :, :one.Tk], v[b:b + 1, :, :one.Tk])))
    kern.ctx.submit(ex, [kern.step(q, k, v)] + [s for _, _, s in alone])
    results = kern.ctx.collect()
    packed = kern.unpack(results[0], kern.ctx._steps[0])
    golden = _golden(ex, q, k, v, c.causal)
    yard = Yardstick(ex, q, k, v, c.causal, golden)
    for (b, one, step), raw in zip(alone, results[1:], strict=True):
        single = Kernel(kern.ctx, one, c).unpack(raw, step)
        lq = one.lengths[0][0] if one.lengths else one.Tq
        for name in ("o", "lse"):
            a = packed[name]
            if a is None:
                continue
            mine = a[b:b + 1, :, :lq]
            theirs = single[name][:, :, :lq]
            allowed_yard = 2 * yard[name]
            failed = _judge(name, _judged(one, c.causal, c.masked_rows, mine.double()),
                            _judged(one, c.causal, c.masked_rows, theirs.double()),
                            allowed_yard, one, what=f"sequence {b} packed vs alone: ")
            if failed is not None:
                return failed
    failed = _oracle_outcome(kern, packed, q, k, v, what="packed: ")
    return failed or Outcome(PASS)


def check_knobs(kern: Kernel) -> Outcome:
    """Every value of every scheduling knob gives o (and the LSE) within the rule."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    calls = [(name, value) for name, values in c.knobs for value in values]
    results = kern.run([kern.step(q, k, v, knob=knob) for knob in calls])
    for (name, value), got in zip(calls, results, strict=True):
        failed = _oracle_outcome(kern, got, q, k, v, what=f"with {name}={value!r}: ")
        if failed is not None:
            return failed
    return Outcome(PASS)


def check_lse_grad(kern: Kernel) -> Outcome:
    """A loss on the LSE alone gives dv exactly 0 (the LSE does not depend on v)."""
    ex = kern.ex
    q, k, v = inputs(ex)
    dlse = torch.randn(ex.B, ex.H, ex.Tq, generator=_gen(ex, 33), dtype=torch.float64).float()
    dlse = dlse.masked_fill(~_judgeable(ex, kern.c)[..., 0].expand_as(dlse), 0.0)
    (got,) = kern.run([kern.step(q, k, v, grad={"do": None, "dlse": dlse})])
    if not got["lse_grad"]:
        return _failed("the kernel declares LSE_GRAD = True, but its LSE does not require grad")
    dv = got["dv"]
    if dv is not None and not bool((dv == 0).all()):
        err, index = tol.max_abs_diff(dv, torch.zeros_like(dv))
        return _failed(f"a loss on the LSE alone gave dv up to {err:.3g}{_at(index, 'b g j d')}, "
                     "not 0: the LSE does not depend on v", err, 0.0)
    c = kern.c
    # The kernel's LSE is in its base: a base-2 LSE is the natural one / ln 2.
    natural = dlse.double() / math.log(2) if c.lse == "base2" else dlse.double()
    golden = _golden(ex, q, k, v, c.causal, grad_lse=natural)
    yard = Yardstick(ex, q, k, v, c.causal, golden, grad_lse=natural)
    largest = max(_finite_max(g) for g in golden[2])
    for name, want, t in zip(("dq", "dk"), golden[2], (q, k), strict=False):
        gotten = torch.zeros(t.shape, dtype=torch.float64) if got[name] is None else \
            got[name].double()
        failed = _judge(name, gotten, want, yard, ex, K=K_GRAD, magnitude=largest,
                        what="a loss on the LSE alone: ")
        if failed is not None:
            return failed
    return Outcome(PASS)


def check_sensitivity(kern: Kernel) -> Outcome:
    """Changing q (head 0) or k (kv head 0) moves o as the reference's o moves: a kernel that
    ignores q or k (the mean of v passes a near-uniform softmax) fails."""
    ex, c = kern.ex, kern.c
    q, k, v = inputs(ex)
    head0 = lambda t: _positions(t, 1, lambda h: h == 0)  # noqa: E731
    q2, k2 = _perturbed(q, head0, ex, 81), _perturbed(k, head0, ex, 82)
    base, moved_q, moved_k = kern.run([kern.step(q, k, v), kern.step(q2, k, v),
                                       kern.step(q, k2, v)])
    golden = _golden(ex, q, k, v, c.causal)
    yard = Yardstick(ex, q, k, v, c.causal, golden)
    allowed = tol.K * yard["o"] + tol.floor(ex.dtype, _finite_max(golden[0]))
    rows = real_rows(ex) & visible_rows(ex, c.causal)
    notes: list[str] = []
    for name, inputs_moved, got in (("q", (q2, k, v), moved_q), ("k", (q, k2, v), moved_k)):
        want = reference(ex, *inputs_moved, c.causal)[0]
        heads = (torch.arange(ex.H) < (1 if name == "q" else ex.H // ex.G)).view(1, -1, 1, 1)
        judged = heads & rows
        ref_move, _ = _changed(golden[0], want, judged, allowed)
        if ref_move <= 4 * allowed:  # the reference itself barely moves: nothing to judge
            notes.append(f"changing {name} barely moves the reference here")
            continue
        sub_move, _ = _changed(base["o"].double(), got["o"].double(), judged, allowed)
        if sub_move < ref_move / 2:
            # No measured/allowed: "moved too little" is no violation size to rank by.
            return _failed(f"changing {name} (head 0) moved o by {sub_move:.3g}, where the "
                         f"reference moves by {ref_move:.3g} (at least half of that is "
                         f"required): the kernel does not read {name} as attention does")
    return Outcome(PASS, notes=notes[:1])


# The hint where the call made from a second thread came back unlike the same inputs alone.
RACE = ("; the first call's inputs, called again from a second thread at the same time, gave "
        "another o than alone: calls made at once share memory (a scratch buffer, a global) "
        "and overwrite each other's")


def _raced(kern: Kernel, fourth: Mapping[str, Any], first: Mapping[str, Any]) -> bool:
    """The first inputs, called again alongside the fourth call, gave another o than alone: an
    exact comparison of identical calls, so only for a kernel that declares DETERMINISTIC."""
    return kern.c.deterministic and tol.max_abs_diff(fourth["alongside"], first["o"])[0] != 0


def check_fresh_results(kern: Kernel) -> Outcome:
    """Each call computes afresh: new values copied into the same tensors through `.data` (a
    cache keyed by address, or by `Tensor._version`, which such a write leaves as it was), then
    other values at new addresses (by shape), as views into wider storage (a kernel that reads
    its inputs' memory as if contiguous), each within the rule, with the output memory poisoned
    before every call (torch.empty returned unwritten)."""
    ex = kern.ex
    first = inputs(ex)
    second = inputs(ex, 101)
    third = inputs(ex, 202)
    last = lambda t: _positions(t, 2, lambda i: i == t.size(2) - 1) & _positions(  # noqa: E731
        t, 0, lambda b: b == t.size(0) - 1)
    # k one batch row for all (sent with stride 0 along B where the layout has a batch axis)
    k4 = third[1] if kern.c.layout == "varlen" else third[1][:1].expand_as(third[1]).clone()
    fourth = (_perturbed(third[0], last, ex, 303), k4, _perturbed(third[2], last, ex, 304))
    again = (first[0].clone(), first[1].clone(), first[2].clone())
    # Triton's interpreter patches triton.language for each call: two threads at once break it
    # whatever the kernel does, so an interpreted kernel is called from one thread only.
    threads = getattr(getattr(kern.ctx.executor, "info", None), "triton", None) != "interpreter"
    got = kern.run([kern.step(*first), kern.step(*second, in_place=True),
                    kern.step(*third, strided=True),
                    kern.step(*fourth, broadcast="" if kern.c.layout == "varlen" else "k",
                              alongside=again if threads else None)])
    for n, (xs, result, how) in enumerate(zip(
            (first, second, third, fourth), got,
            ("the first call", "new values copied into the same tensors",
             "new values in new tensors of the same shape, views into wider storage (not "
             "contiguous, the last dimension dense, as FlashAttention accepts)",
             "the same again but the last row's q and v, k one batch row broadcast to all "
             "(stride 0 along the batch, as expand gives)" + (
                 ", while a second thread calls it on the first call's inputs" if threads
                 else "")),
            strict=True)):
        failed = _oracle_outcome(kern, result, *xs, what=f"{how}: ")
        if failed is not None:
            if n == 3 and threads and _raced(kern, result, got[0]):
                failed.message += RACE
                failed.raced = True
            elif n and tol.max_abs_diff(result["o"], got[n - 1]["o"])[0] == 0:
                key = ("address or version", "shape", "a checksum")[min(n, 3) - 1]
                failed.message += (f"; it is exactly the previous call's o: the kernel "
                                   f"returned a cached answer (keyed by {key})")
            elif n == 2 and not bool(result["o"].isfinite().all()):
                failed.message += ("; o holds NaN, which attnspec put in the wider storage "
                                   "around the views and nowhere in them: the kernel reads its "
                                   "inputs' memory as if they were contiguous (honour the "
                                   "strides, or call .contiguous())")
            elif (not bool(result["o"].isfinite().all())
                  or _finite_max(result["o"]) > 1e6 * (
                      1 + _finite_max(_golden(ex, *xs, kern.c.causal)[0]))
                  # a softmax's o is a convex combination of v's rows (less, with sinks)
                  or _finite_max(result["o"]) > 1.01 * _finite_max(xs[2]) + 1e-3):
                failed.message += ("; o holds values no attention gives (NaN, magnitudes like "
                                   "1e30, or past every value of v) where attnspec poisoned "
                                   "the memory before the call: memory returned unwritten "
                                   "(torch.empty)?")
            return failed
    if not threads:
        checked = _fresh_at_one_key(kern, first)
        checked.notes.append("calls from two threads at once not made: Triton's interpreter "
                             "is not thread-safe (a GPU run makes them)")
        return checked
    c = kern.c
    golden = _golden(ex, *again, c.causal)
    failed = _judge("o", _judged(ex, c.causal, c.masked_rows, got[3]["alongside"].double()),
                    _judged(ex, c.causal, c.masked_rows, golden[0]),
                    Yardstick(ex, *again, c.causal, golden), ex,
                    what="the first call's inputs again, called from a second thread at the "
                    "same time as the fourth call: ")
    if failed is not None:
        if _raced(kern, got[3], got[0]):
            failed.message += RACE
            failed.raced = True
        return failed
    return _fresh_at_one_key(kern, first)


def _fresh_at_one_key(kern: Kernel, xs: tuple[Tensor, Tensor, Tensor]) -> Outcome:
    """One query on one key, plain (every head its own kv head, no window, cap, ALiBi or
    sinks), where the answer is v itself: a kernel that returns v (a view, the same memory)
    instead of a tensor of its own is caught by the harness here, whatever the example drew."""
    ex, c = kern.ex, kern.c
    lengths = None if ex.lengths is None else tuple((1, 1) for _ in ex.lengths)
    one = dataclasses.replace(ex, Tq=1, Tk=1, G=ex.H, lengths=lengths, cuts=(), window=None,
                              softcap=None, alibi=False, sinks=False)
    per = ex.H // ex.G
    q = xs[0][:, :, :1]
    k, v = (t[:, :, :1].repeat_interleave(per, dim=1) for t in xs[1:])
    small = Kernel(kern.ctx, one, c)
    try:
        (got,) = small.run([small.step(q, k, v)])
    except Unsupported:  # supports(case) declines it: the example's own calls stand
        return Outcome(PASS, notes=["supports(case) declined the one-key call"])
    return _oracle_outcome(small, got, q, k, v, what="one query on one key: ") or Outcome(PASS)
