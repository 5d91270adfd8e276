"""The reference, slowed down: each forward sleeps, so a run can be interrupted mid-way."""

import time

from _base import build_before, export_weights
from torch import Tensor

__all__ = ["build", "export_weights"]


def _sleep(x: Tensor) -> None:
    time.sleep(0.2)


build = build_before(_sleep)
