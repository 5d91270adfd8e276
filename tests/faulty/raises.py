"""A forward that raises for T > 8 (an unimplemented tile size)."""

from _base import export_weights, reference_build
from torch import Tensor, nn

__all__ = ["build", "export_weights"]


class Raises(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        if x.size(1) > 8:
            raise NotImplementedError(f"tile for T={x.size(1)} not written yet")
        return self.inner(x)


def build(n_embd: int, n_head: int) -> nn.Module:
    return Raises(n_embd, n_head)
