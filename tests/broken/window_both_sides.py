"""A sliding window of 2W + 1 keys centred on the query, |i - j| < W + 1, as in local attention
for encoders (transformers#29623): future keys inside the window leak."""

import torch
from _spec_common import PROTOCOL, SpecAttn, export_weights

EXPECTED = frozenset({"causality", "window"})
VARIANTS = {"window": "any"}


class TwoSidedWindow(SpecAttn):
    def allowed(self, T, device):
        i = torch.arange(T, device=device)[:, None]
        j = torch.arange(T, device=device)[None, :]
        W = self.spec.window
        return (j <= i) if W is None else (i - j).abs() <= W


def build(spec):
    return TwoSidedWindow(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
