"""The reference whose weights drift between calls: every forward first scales its parameters
by 1 + 1e-3, in place (`build`), or scales its output by 1 + 1e-3 per call this process has
made (`shared`: the drift outlives the module). determinism must fail; causality and
batch_independence must say that identical calls differ, never call the drift a leak."""

from __future__ import annotations

import torch
from _base import export_weights, reference_build
from torch import Tensor, nn

__all__ = ["build", "export_weights", "shared"]

_calls = [0]  # shared: forward calls made in this process


class Drifting(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            for p in self.inner.parameters():
                p.mul_(1 + 1e-3)
        return self.inner(x)  # type: ignore[no-any-return]


def build(n_embd: int, n_head: int) -> nn.Module:
    return Drifting(n_embd, n_head)


class SharedDrift(Drifting):
    def forward(self, x: Tensor) -> Tensor:
        _calls[0] += 1
        return self.inner(x) * (1 + 1e-3 * _calls[0])  # type: ignore[no-any-return]


def shared(n_embd: int, n_head: int) -> nn.Module:
    return SharedDrift(n_embd, n_head)
