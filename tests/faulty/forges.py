"""A leaky subject that tries to forge its verdict: at import it monkeypatches attnspec's
tolerance and comparisons, and torch.softmax, in its own process. It leaks 1e-3 of the mean over
all positions (future ones included), so causality and oracle must still fail."""

import torch
from _base import export_weights, reference_build
from torch import Tensor, nn

import attnspec.properties.causal
import attnspec.properties.tolerance

__all__ = ["build", "export_weights"]

attnspec.properties.tolerance.K = 1e30
attnspec.properties.tolerance.max_abs_diff = lambda a, b: (0.0, None)
attnspec.properties.tolerance.allowed = lambda *args: float("inf")
attnspec.properties.causal.check_causality = lambda ctx, ex: attnspec.properties.Outcome("pass")
_softmax = torch.softmax
torch.softmax = lambda *args, **kwargs: _softmax(*args, **kwargs)  # noqa: E731


class Leaky(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        return self.inner(x) + 1e-3 * x.mean(dim=1, keepdim=True)  # type: ignore[no-any-return]


def build(n_embd: int, n_head: int) -> nn.Module:
    return Leaky(n_embd, n_head)
