"""A correct subject that prints on every forward (debug output left in a kernel)."""

import os

from _base import export_weights, reference_build
from torch import Tensor, nn

__all__ = ["build", "export_weights"]


class Chatty(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        print(f"chatty: forward on {tuple(x.shape)}", flush=True)
        os.write(1, b"chatty: straight to fd 1\n")  # as a native kernel's printf would
        return self.inner(x)


def build(n_embd: int, n_head: int) -> nn.Module:
    return Chatty(n_embd, n_head)
