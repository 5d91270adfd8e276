"""Crashes for T > 3, and then fails to import when the worker restarts (a kernel cache that a
crash left corrupt). ATTNSPEC_TEST_LOADED names a file that marks the first load."""

import os

from _base import export_weights, reference_build
from torch import Tensor, nn

__all__ = ["build", "export_weights"]

_marker = os.environ["ATTNSPEC_TEST_LOADED"]
if os.path.exists(_marker):
    raise ImportError("kernel cache corrupt: delete it and rebuild")
with open(_marker, "w"):
    pass


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
