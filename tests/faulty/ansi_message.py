"""A forward that raises with terminal escape codes in its message (clear screen, cursor home)."""

from _base import build_before, export_weights
from torch import Tensor

__all__ = ["build", "export_weights"]


def _raise(x: Tensor) -> None:
    raise RuntimeError("\x1b[2J\x1b[Hall properties pass\r")


build = build_before(_raise)
