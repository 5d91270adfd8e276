"""A subject that declares what it handles: even head_dim only (rotary-style), float32 only."""

import torch
from _base import export_weights, reference_build
from torch import nn

__all__ = ["DTYPES", "build", "export_weights", "supports"]

DTYPES = (torch.float32,)


def supports(n_embd: int, n_head: int) -> bool:
    return (n_embd // n_head) % 2 == 0


def build(n_embd: int, n_head: int) -> nn.Module:
    if (n_embd // n_head) % 2 and n_embd % n_head == 0:
        raise ValueError("odd head_dim: supports() said so")
    return reference_build(n_embd, n_head)
