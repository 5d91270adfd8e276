"""Judging a kernel's outputs: the rule of docs/design.md section 5 against the float64
golden, the yardstick the larger error of two fair computations in the dtype.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from ...common.dtypes import dtype_from_name
from ...reference import conventions as conv
from .. import tolerance as tol
from ..base import Outcome
from .example import (
    KernelExample,
    real_rows,
    reference,
    visible_rows,
)
from .harness import (
    Kernel,
)

# ---- judging ---------------------------------------------------------------------------------


def _failed(message: str, measured: float | None = None, allowed: float | None = None,
            where: dict[str, int] | None = None) -> Outcome:
    return Outcome("fail", message, measured, allowed, where)


def _where(index: tuple[int, ...] | None, axes: str = "b h i d") -> dict[str, int] | None:
    if index is None:
        return None
    return dict(zip(axes.split(), index, strict=False))


def _at(index: tuple[int, ...] | None, axes: str = "b h i d") -> str:
    if index is None:
        return ""
    names = axes.split()
    shown = ", ".join(f"{n}={i}" for n, i in zip(names, index, strict=False))
    return f" at ({shown})"


def _judgeable(ex: KernelExample, c: conv.KernelConventions) -> Tensor:
    """(B, 1, Tq, 1): real queries, less those without keys where MASKED_ROWS is undefined."""
    keep = real_rows(ex)
    return keep & visible_rows(ex, c.causal) if c.masked_rows == "undefined" else keep


def _judged(ex: KernelExample, corner: str, masked: str, t: Tensor) -> Tensor:
    """Rows the rule judges: every real query, except rows that see no key when the kernel
    leaves those undefined (their values are then set to 0)."""
    keep = real_rows(ex)
    if masked == "undefined":
        keep = keep & visible_rows(ex, corner)
    if bool(keep.all()):  # every row judged (most examples): t itself, not a copy of it
        return t
    mask = keep if t.dim() == 4 else keep[..., 0]
    return t.masked_fill(~mask, 0.0)


_OUTPUTS = ("o", "lse", "dq", "dk", "dv")


class Yardstick:
    """The larger error of two fair computations in the dtype (or `dtype`), per output (o, lse,
    dq, dk, dv), computed only as far as a verdict needs: an error within K x the errors so far
    + floor is within K x all of them + floor, so a computation is made only for an error past
    that (most calls of a correct kernel pass on the floor alone). `ys[name]` is the whole
    yardstick: a failure's message, and every other use, sees the same value as before."""

    def __init__(self, ex: KernelExample, q: Tensor, k: Tensor, v: Tensor, corner: str,
                 golden: tuple[Tensor, Tensor, Any], *, grad: Tensor | None = None,
                 grad_lse: Tensor | None = None, dtype: torch.dtype | None = None) -> None:
        self.dtype = dtype_from_name(ex.dtype) if dtype is None else dtype
        self._call = (ex, q, k, v, corner, golden, grad, grad_lse)
        # float64 is the golden's own dtype: errors of 1e-16, far below the floor.
        self._left = [] if self.dtype == torch.float64 else [False, True]  # reorder, in turn
        self._so_far = dict.fromkeys(_OUTPUTS, 0.0)

    def _more(self) -> bool:
        """The next fair computation folded in; False when none is left."""
        if not self._left:
            return False
        ex, q, k, v, corner, golden, grad, grad_lse = self._call
        o, lse, grads = reference(ex, q, k, v, corner, self.dtype, reorder=self._left.pop(0),
                                  grad=grad, grad_lse=grad_lse)
        pairs = [("o", o, golden[0]), ("lse", lse, golden[1])]
        if grads is not None:
            pairs += list(zip(("dq", "dk", "dv"), grads, golden[2], strict=True))
        for name, got, want in pairs:
            err = tol.max_abs_diff(got, want)[0]
            self._so_far[name] = max(self._so_far[name], err if math.isfinite(err) else 0.0)
        return True

    def __getitem__(self, name: str) -> float:
        while self._more():
            pass
        return self._so_far[name]

    def covering(self, name: str, err: float, K: float, floor: float) -> float:
        """The yardstick as far as computed once `err` is within K x it + floor, or whole."""
        while err > K * self._so_far[name] + floor and self._more():
            pass
        return self._so_far[name]


def _finite_max(t: Tensor) -> float:
    if not t.numel():
        return 0.0
    return float(t.detach().abs().nan_to_num(0.0, posinf=0.0, neginf=0.0).max())


def _judge(name: str, got: Tensor | None, want: Tensor, yard: float | Yardstick,
           ex: KernelExample, K: float = tol.K, what: str = "", magnitude: float = 0.0,
           floor_dtype: str | None = None) -> Outcome | None:
    """A failure where max|got - want| exceeds K x yard + floor (None: within the rule); the
    floor is `floor_dtype`'s (the example's dtype unless given), scaled by the larger of want's
    values and `magnitude`. A Yardstick is computed only as far as the verdict needs."""
    if got is None:
        return _failed(f"{what}the kernel returned no {name}")
    scale = max(_finite_max(want), magnitude)
    floor = tol.floor(floor_dtype or ex.dtype, scale)
    err, index = tol.max_abs_diff(got, want)
    if isinstance(yard, Yardstick):
        yard = yard.covering(name, err, K, floor)
    allowed = K * yard + floor
    if err > allowed:
        axes = "b h i" if name == "lse" else "b h i d" if name in ("o", "dq") else "b g j d"
        return _failed(f"{what}max|{name} - reference| = {err:.3g}, allowed {allowed:.3g} ({K:g} x "
                     f"the reference's own {floor_dtype or ex.dtype} error {yard:.3g} + floor)"
                     f"{_at(index, axes)}",
                     err, allowed, _where(index, axes))
    return None


def _jitter(*pairs: tuple[Tensor | None, Tensor | None]) -> float:
    worst = 0.0
    for a, b in pairs:
        if a is not None and b is not None:
            worst = max(worst, tol.max_abs_diff(a, b)[0])
    return worst


def _own_jitter(kern: Kernel, mine: Sequence[Mapping[str, Any]]) -> float:
    """The kernel's jitter between two identical calls, over the rows that are judged (rows it
    leaves undefined may hold anything, which must not widen the allowance)."""
    rows = _judgeable(kern.ex, kern.c)
    pairs = []
    for name in ("o", "lse"):
        a, b = mine[0][name], mine[1][name]
        if a is not None and b is not None:
            mask = rows if a.dim() == 4 else rows[..., 0]
            pairs.append((a.masked_fill(~mask, 0.0), b.masked_fill(~mask, 0.0)))
    return _jitter(*pairs)


def _changed(a: Tensor, b: Tensor, rows: Tensor, allowed: float) -> tuple[float, tuple[int, ...]
                                                                             | None]:
    """The largest |a - b| in the rows selected (B, H or 1, Tq, 1) and where."""
    if bool(rows.all()):  # every row (most examples): compared without copies
        return tol.max_abs_diff(a, b)
    mask = rows if a.dim() == 4 else rows[..., 0]
    err, index = tol.max_abs_diff(a.masked_fill(~mask, 0.0), b.masked_fill(~mask, 0.0))
    return err, index
