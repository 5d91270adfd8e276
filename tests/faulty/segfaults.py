"""A forward that segfaults (reads address 0 through ctypes), like a native kernel gone wrong."""

import ctypes

from _base import reference_build
from torch import Tensor, nn


class Segfaults(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        if x.size(0) > 1:
            ctypes.string_at(0)
        return self.inner(x)


def build(n_embd: int, n_head: int) -> nn.Module:
    return Segfaults(n_embd, n_head)
