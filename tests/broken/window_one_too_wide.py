"""A sliding window of W + 1 keys: j >= i - W instead of j > i - W (transformers#39408,
vllm#3385: the window's edge counted inclusively)."""

import torch
from _spec_common import PROTOCOL, SpecAttn, export_weights

EXPECTED = frozenset({"window"})
VARIANTS = {"window": "any"}


class WideWindow(SpecAttn):
    def allowed(self, T, device):
        i = torch.arange(T, device=device)[:, None]
        j = torch.arange(T, device=device)[None, :]
        W = self.spec.window
        return (j <= i) if W is None else (j <= i) & (j >= i - W)


def build(spec):
    return WideWindow(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
