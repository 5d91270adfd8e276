"""A forward that never returns once T > 2 (a kernel stuck in a spin loop)."""

import time

from _base import build_before, export_weights
from torch import Tensor

__all__ = ["build", "export_weights"]


def _hang(x: Tensor) -> None:
    if x.size(1) > 2:
        while True:
            time.sleep(0.05)


build = build_before(_hang)
