"""Gradients as every layer takes them: the worker for the subject, properties for the
reference, with one helper."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["vjp"]


def vjp(outs: Sequence[Tensor], inputs: Sequence[Tensor], cotangents: Sequence[Tensor],
        ) -> tuple[Tensor | None, ...]:
    """torch.autograd.grad(outs, inputs, cotangents, allow_unused=True), the same values.

    Given as the gradient of sum(out * cotangent): its backward hands each out exactly its
    cotangent (1 x c), and a scalar needs no grad_outputs, whose check imports sympy (0.6 s).
    """
    total = sum((out * c).sum() for out, c in zip(outs, cotangents, strict=True))
    if not isinstance(total, Tensor):  # nothing to differentiate
        return tuple(None for _ in inputs)
    return torch.autograd.grad(total, list(inputs), allow_unused=True)
