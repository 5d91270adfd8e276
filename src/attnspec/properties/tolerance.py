"""The tolerance rule (docs/design.md), in one place.

oracle / oracle_grad: max|subject - golden| <= K * max|reference_in_dtype - golden| + floor,
with golden = the reference in float64. The floor keeps a zero yardstick from making the check
impossible; it scales with the size of the values compared.
"""

from __future__ import annotations

import math

import torch

K = 2.0

# Absolute floors per unit of scale: a few ulps at magnitude 1 in each dtype.
_FLOOR = {
    "float64": 1e-12,
    "float32": 1e-5,
    "float16": 4e-3,
    "bfloat16": 3e-2,
}


def floor(dtype: str, scale: float) -> float:
    """The floor for values of magnitude `scale` in `dtype`."""
    return _FLOOR[dtype] * max(1.0, scale)


def allowed(yardstick: float, dtype: str, scale: float) -> float:
    """The largest error the rule allows, given the reference's own error `yardstick`."""
    return K * yardstick + floor(dtype, scale)


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> tuple[float, tuple[int, ...] | None]:
    """max|a - b| in float64 and where it is; NaN in one but not the other counts as inf."""
    a, b = a.detach(), b.detach()
    # Most comparisons (causality, jitter) are of equal tensors: one pass answers them.
    if a.dtype == b.dtype and a.shape == b.shape and a.device == b.device and torch.equal(a, b):
        return 0.0, None
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    diff = (a64 - b64).abs_()
    if diff.numel() == 0:
        return 0.0, None
    flat = int(diff.argmax())  # argmax picks a NaN where there is one: a finite max is all
    value = float(diff.reshape(-1)[flat])
    if not math.isfinite(value):  # NaN or inf somewhere: say which differ, and how
        both_nan = a64.isnan() & b64.isnan()
        same_inf = (a64 == b64) & a64.isinf()
        diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
        diff = torch.nan_to_num(diff, nan=float("inf"))
        flat = int(diff.argmax())
        value = float(diff.reshape(-1)[flat])
    if value <= 0:
        return value, None
    index = []
    for size in reversed(diff.shape):  # the flat index, unravelled (row-major)
        flat, i = divmod(flat, size)
        index.append(i)
    return value, tuple(reversed(index))
