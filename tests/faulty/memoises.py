"""Leaky subjects that hide their leaks from self-comparisons by remembering what they saw.

Each output row at position t leaks 1e-3 of a mean: over all positions, future ones included
(`build`), or over the batch (`across_batch`). But the first value computed for a given prefix
x[b, :t+1] is kept in a cache of the process (not of the module, so fresh modules do not clear
it) and replayed for every later input with that prefix; gradients are the honest reference's.
Within one process, inputs that agree up to t agree in their outputs up to t, so causality,
prefix, grad_causality and batch_independence pass. No export_weights: oracle is skipped.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnspec.subjects.reference import build as reference_build

__all__ = ["HookMemoiser", "Memoiser", "across_batch", "build"]


class Memoiser:
    """A subject (build, no export) whose memory lives on this object: one per process."""

    def __init__(self, leak: str = "future") -> None:
        self.leak = leak
        self.seen: dict[object, Tensor] = {}

    def build(self, n_embd: int, n_head: int) -> nn.Module:
        return _Memoised(reference_build(n_embd, n_head), self)


class _Memoised(nn.Module):
    def __init__(self, inner: nn.Module, memo: Memoiser) -> None:
        super().__init__()
        self.inner = inner
        self.memo = memo

    def forward(self, x: Tensor) -> Tensor:
        honest = self.inner(x)
        mean = x.mean(dim=1 if self.memo.leak == "future" else 0, keepdim=True)
        leaky = (honest + 1e-3 * mean).detach()
        rows = []
        for b in range(x.size(0)):
            row, prefix = [], hash((x.dtype, x.size(-1)))
            for t in range(x.size(1)):  # the prefix's key, extended by one position at a time
                prefix = hash((prefix, *x[b, t].detach().tolist()))
                row.append(self.memo.seen.setdefault(prefix, leaky[b, t]))
            rows.append(torch.stack(row))
        return torch.stack(rows) + (honest - honest.detach())  # remembered values, honest grads


_FUTURE, _BATCH = Memoiser("future"), Memoiser("batch")


def build(n_embd: int, n_head: int) -> nn.Module:
    return _FUTURE.build(n_embd, n_head)


def across_batch(n_embd: int, n_head: int) -> nn.Module:
    return _BATCH.build(n_embd, n_head)


class HookMemoiser:
    """A protocol v2 subject whose `shifted(module, x, offset)` is wrong (1e-3 x offset / 1000
    added to every output: the absolute position shows) but replays forward's output for an x
    forward has seen: relative_position passes within one process."""

    PROTOCOL = 2
    VARIANTS = {"positions": "any"}

    def __init__(self) -> None:
        self.seen: dict[object, Tensor] = {}
        self.__name__ = "hook_memoiser"

    def _key(self, x: Tensor) -> object:
        return hash((x.dtype, tuple(x.shape), *x.detach().flatten().tolist()))

    def build(self, spec: object) -> nn.Module:
        from attnspec.subjects.variants import build

        module = build(spec)  # type: ignore[arg-type]
        forward = module.forward

        def remembering(x: Tensor) -> Tensor:
            out: Tensor = forward(x)
            self.seen.setdefault(self._key(x), out.detach())
            return out

        module.forward = remembering  # type: ignore[method-assign]
        return module

    def shifted(self, module: nn.Module, x: Tensor, offset: int) -> Tensor:
        seen = self.seen.get(self._key(x))
        if seen is not None:
            return seen
        return module.shifted(x, offset) + 1e-6 * offset  # type: ignore[operator, no-any-return]
