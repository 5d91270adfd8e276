"""The reference's fast path for consumers: the same module with `kernel="sdpa"`."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ..reference.module import CausalSelfAttention


def build(n_embd: int, n_head: int) -> nn.Module:
    return CausalSelfAttention(n_embd, n_head, kernel="sdpa")


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, CausalSelfAttention)
    return module.export_weights()
