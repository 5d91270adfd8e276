"""export_weights forgets the output projection."""

from _base import reference_build
from torch import Tensor, nn


def build(n_embd: int, n_head: int) -> nn.Module:
    return reference_build(n_embd, n_head)


def export_weights(module: nn.Module) -> dict[str, Tensor]:
    weights = dict(module.export_weights())  # type: ignore[operator]
    del weights["o_weight"]
    return weights
