"""The reference until this process has made 40 forward calls, then 1% off: state carried from
call to call (a global counter, as a cache warming up or an autotuner settling would be), so
the failing example passes when replayed alone in a fresh worker, and the message says so."""

from __future__ import annotations

from _base import export_weights, reference_build
from torch import Tensor, nn

__all__ = ["build", "export_weights"]

_calls = [0]  # forward calls made in this process


class Warming(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        _calls[0] += 1
        out: Tensor = self.inner(x)
        return out * 1.01 if _calls[0] > 40 else out


def build(n_embd: int, n_head: int) -> nn.Module:
    return Warming(n_embd, n_head)
