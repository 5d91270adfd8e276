"""export_weights hands over the fused (3C, C) projection as q_weight."""

from _base import reference_build
from torch import Tensor, nn


def build(n_embd: int, n_head: int) -> nn.Module:
    return reference_build(n_embd, n_head)


def export_weights(module: nn.Module) -> dict[str, Tensor]:
    weights = dict(module.export_weights())  # type: ignore[operator]
    weights["q_weight"] = module.c_attn.weight  # type: ignore[assignment]
    return weights
