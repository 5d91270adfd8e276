"""Returns NaN at the last position once T > 5 (an uninitialised tail in a tiled kernel)."""

from _base import export_weights, reference_build
from torch import Tensor, nn

__all__ = ["build", "export_weights"]


class NanTail(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        out = self.inner(x)
        if x.size(1) > 5:
            out = out.clone()
            out[:, -1] = float("nan")
        return out


def build(n_embd: int, n_head: int) -> nn.Module:
    return NanTail(n_embd, n_head)
