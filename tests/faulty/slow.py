"""The reference, slowed down: each forward sleeps, so a run can be interrupted mid-way."""

import time

from _base import export_weights, reference_build
from torch import Tensor, nn

__all__ = ["build", "export_weights"]


class Slow(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        time.sleep(0.2)
        return self.inner(x)


def build(n_embd: int, n_head: int) -> nn.Module:
    return Slow(n_embd, n_head)
