"""The data of a failure's picture: the failing example replayed against the subject, measured
cell by cell (query x key reach for causality and window, position x channel error over
allowance for oracle). Plain lists of floats, so that the JSON report carries them."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import tolerance as tol
from .base import _BASE, Context, Example, SubjectFault, _finite, _inputs, _jitter, _outputs
from .kernel import KernelExample

__all__ = ["PICTURED", "picture"]

PICTURED = ("causality", "window", "oracle", "padding_invariance")
# Cells per axis beyond which neighbouring positions or channels are binned (by their max).
MAX_CELLS = 64


def _diff(a: Tensor, b: Tensor) -> Tensor:
    """|a - b| in float64, a NaN on one side only counted as inf (as tol.max_abs_diff)."""
    d = (a.double() - b.double()).abs()
    both = a.double().isnan() & b.double().isnan()
    return torch.nan_to_num(torch.where(both, torch.zeros_like(d), d), nan=float("inf"))


def _binned(grid: Tensor, axis: int) -> tuple[Tensor, list[str]]:
    """At most MAX_CELLS bins along `axis`, each the max of its members; and their labels."""
    n = grid.size(axis)
    step = -(-n // MAX_CELLS)
    if step == 1:
        return grid, [str(i) for i in range(n)]
    parts = [grid.narrow(axis, s, min(step, n - s)).amax(dim=axis, keepdim=True)
             for s in range(0, n, step)]
    return torch.cat(parts, dim=axis), [f"{s}-{min(s + step, n) - 1}" for s in range(0, n, step)]


def _reach(ctx: Context, ex: Example, prop: str) -> dict[str, Any]:
    """Query i x key j: how far the outputs at i moved when only the input at j changed; the
    same and changed inputs in two processes, as the property's, the allowance K x jitter."""
    T, B = ex.T, ex.B
    x = _inputs(ex, salt=_BASE["window"] if prop == "window" else 0)
    fresh = _inputs(ex, salt=7000)
    changed = []
    for j in range(T):
        xj = x.clone()
        xj[:, j] = fresh[:, j]
        changed.append(xj)
    same, moved = torch.cat([x] * T), torch.cat(changed)
    ctx.submit_apart(ex, [{"op": "forward", "x": same}] * 2, [{"op": "forward", "x": moved}] * 2)
    mine, theirs = ctx.collect_apart()
    (same1, same2), (moved1, moved2) = _outputs([same] * 2, mine), _outputs([moved] * 2, theirs)
    _finite(prop, "forward", same1, moved1)
    allowed = tol.K * _jitter((same1, same2), (moved1, moved2))
    # (T copies j, B, T queries i, C) -> [i, j]
    grid = _diff(moved1, same1).reshape(T, B, T, -1).amax(dim=(1, 3)).T
    W = ex.attention.window
    cells = []
    for i in range(T):
        row = ""
        for j in range(T):
            row += ("f" if j > i else "w" if W is not None and j <= i - W
                    else "e" if W is not None and j == i - W + 1 else "a")
        cells.append(row)
    judged = "f" if prop == "causality" else "we"
    failing = sum(1 for i in range(T) for j in range(T)
                  if (cells[i][j] in judged.replace("e", "") and grid[i, j] > allowed)
                  or (cells[i][j] == "e" and "e" in judged and not grid[i, j] > allowed))
    seen = ("future keys (key > query)" if prop == "causality" else
            f"keys outside the window of {W} (key <= query - {W}) and the window's inside edge "
            "(key = query - W + 1, which must move)")
    return {"kind": "reach", "property": prop, "rows": "query position i",
            "cols": "key position j (the one input changed)",
            "row_ticks": [str(i) for i in range(T)], "col_ticks": [str(j) for j in range(T)],
            "values": grid.tolist(), "cells": cells, "judged": judged, "allowed": allowed,
            "failing": failing,
            "caption": f"max over batch and channels of |output(i) moved - output(i)| when only "
                       f"the input at key j changed (B={B}, T={T}, {ex.dtype}); judged: {seen}; "
                       f"allowed {allowed:.3g} (the subject's own jitter x{tol.K:g}). Red: "
                       f"a judged cell beyond the allowance."}


def _oracle(ctx: Context, ex: Example) -> dict[str, Any]:
    """Position x channel: |subject - reference in float64| over the rule's allowance."""
    from .oracle import oracle_parts

    x, out, golden, allowed = oracle_parts(ctx, ex)
    ratio = _diff(out, golden).amax(dim=0) / allowed  # (T, C)
    ratio, rows = _binned(ratio, 0)
    ratio, cols = _binned(ratio, 1)
    return {"kind": "error", "property": "oracle", "rows": "position t",
            "cols": "channel c", "row_ticks": rows, "col_ticks": cols,
            "values": ratio.tolist(), "cells": None, "judged": "a", "allowed": 1.0,
            "failing": int((ratio > 1).sum()),
            "caption": f"max over batch of |subject - reference (float64)| / allowance "
                       f"{allowed:.3g} (the rule: {tol.K:g} x the reference's own {ex.dtype} "
                       f"error + floor), B={ex.B}, T={ex.T}, C={ex.C}; > 1 (red) fails."}


def _padding(ctx: Context, ex: Example) -> dict[str, Any]:
    """Batch row x position: how far each output moved when only the padding's values
    changed, with the property's own side, lengths and fill; real tokens must not move."""
    from .base import _info, _rng
    from .inference import _FILLS, _fill, _layout, _padding, padded_batch

    if ex.T < 2:
        raise SubjectFault("T=1: no room for padding, so nothing to draw")
    rng = _rng(ex, 12)  # the same draws, in the same order, as check_padding_invariance
    lengths, side = _padding(ex, 13), rng.choice(("left", "right"))
    fills = _FILLS[:2] if _info(ctx, "padding_values", "any") == "finite" else _FILLS
    kind = rng.choice(fills)
    real = _inputs(ex, salt=_BASE["padding_invariance"])
    xa, mask, _ = padded_batch(ex, side)
    xb, _ = _layout(real, lengths, side, _fill(ex, kind, 6001))
    ctx.submit_apart(ex, [{"op": "forward", "x": xa, "mask": mask}],
                     [{"op": "forward", "x": xb, "mask": mask}])
    mine, theirs = ctx.collect_apart()
    (a,), (b,) = _outputs([xa], mine), _outputs([xb], theirs)
    grid = _diff(b, a).amax(dim=-1)  # (B, T)
    grid = torch.where(mask, grid, torch.zeros_like(grid))  # padding's own outputs are free
    cells = ["".join("r" if bool(mask[i, t]) else "p" for t in range(ex.T))
             for i in range(ex.B)]
    return {"kind": "reach", "property": "padding_invariance", "rows": "batch row b",
            "cols": "position t", "row_ticks": [str(i) for i in range(ex.B)],
            "col_ticks": [str(t) for t in range(ex.T)], "values": grid.tolist(),
            "cells": cells, "judged": "r", "allowed": 0.0,
            "hatched": "padding, or a real token that did not move",
            "failing": int((grid[mask] > 0).sum()),
            "caption": f"max over channels of |output moved| at each real token when only the "
                       f"padding's values changed ({side}-padded, real lengths {lengths}, fill "
                       f"{kind}, B={ex.B}, T={ex.T}, {ex.dtype}); hatched: padding; real tokens "
                       f"must not move at all (the property's exact comparison). Red: a real "
                       f"token the padding reaches."}


def picture(ctx: Context, prop: str, ex: Example | KernelExample) -> dict[str, Any]:
    """The picture's data for `prop` on `ex`, or {"error": why} where none could be drawn."""
    from . import _fitted_scale

    if prop not in PICTURED or not isinstance(ex, Example):
        return {"error": f"no picture for {prop} yet (pictures: {', '.join(PICTURED)})"}
    try:
        ex, _ = _fitted_scale(ctx, ex)  # the inputs the property itself ran on
        if prop == "padding_invariance":
            return _padding(ctx, ex)
        return _oracle(ctx, ex) if prop == "oracle" else _reach(ctx, ex, prop)
    except SubjectFault as fault:
        return {"error": f"the picture could not be drawn: {fault}"}
