"""build raises for valid configurations with more than 4 heads."""

from _base import export_weights, reference_build
from torch import nn

__all__ = ["build", "export_weights"]


def build(n_embd: int, n_head: int) -> nn.Module:
    if n_head > 4:
        raise ValueError(f"only up to 4 heads supported, got {n_head}")
    return reference_build(n_embd, n_head)
