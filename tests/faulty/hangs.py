"""A forward that never returns once T > 2 (a kernel stuck in a spin loop)."""

import time

from _base import export_weights, reference_build
from torch import Tensor, nn

__all__ = ["build", "export_weights"]


class Hangs(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        if x.size(1) > 2:
            while True:
                time.sleep(0.05)
        return self.inner(x)


def build(n_embd: int, n_head: int) -> nn.Module:
    return Hangs(n_embd, n_head)
