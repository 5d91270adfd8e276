"""A sliding window of W - 1 keys: j > i - W + 1, the query's own key counted twice."""

import torch
from _spec_common import PROTOCOL, SpecAttn, export_weights

EXPECTED = frozenset({"window"})
VARIANTS = {"window": "any"}


class NarrowWindow(SpecAttn):
    def allowed(self, T, device):
        i = torch.arange(T, device=device)[:, None]
        j = torch.arange(T, device=device)[None, :]
        W = self.spec.window
        # W = 1 keeps the diagonal, so no row is left without a key.
        return (j <= i) if W is None else (j <= i) & ((j > i - W + 1) | (j == i))


def build(spec):
    return NarrowWindow(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
