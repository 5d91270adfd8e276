"""A forward that kills its own process (os.abort) once T > 3, like a failed native assert."""

import os

from _base import reference_build
from torch import Tensor, nn


class Aborts(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        if x.size(1) > 3:
            os.abort()
        return self.inner(x)


def build(n_embd: int, n_head: int) -> nn.Module:
    return Aborts(n_embd, n_head)
