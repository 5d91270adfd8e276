"""The padded path attends to every earlier key, forgetting the sliding window the forward has
(a mask built from the key padding alone, then combined with the causal mask only)."""

import dataclasses

from _spec_common import CORNER, PROTOCOL, SpecAttn, export_weights

EXPECTED = frozenset({"padding_invariance"})
VARIANTS = {"window": "any"}


class PaddedDropsWindow(SpecAttn):
    def padded(self, x, keep):
        full, self.spec = self.spec, dataclasses.replace(self.spec, window=None)
        try:
            return super().padded(x, keep)
        finally:
            self.spec = full


def build(spec):
    return PaddedDropsWindow(spec)


def padded(module, x, key_mask):
    return module.padded(x, key_mask)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights", "padded"]
