"""The tolerance rule (docs/design.md), in one place.

oracle / oracle_grad: max|subject - golden| <= K * max|reference_in_dtype - golden| + floor,
with golden = the reference in float64. The floor keeps a zero yardstick from making the check
impossible; it scales with the size of the values compared.
"""

from __future__ import annotations

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
    a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
    diff = (a64 - b64).abs()
    both_nan = a64.isnan() & b64.isnan()
    same_inf = (a64 == b64) & a64.isinf()
    diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
    diff = torch.nan_to_num(diff, nan=float("inf"))
    if diff.numel() == 0:
        return 0.0, None
    flat = int(diff.argmax())
    value = float(diff.reshape(-1)[flat])
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape))
    return value, (index if value > 0 else None)
