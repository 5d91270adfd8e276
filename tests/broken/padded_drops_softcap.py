"""The padded path forgets the soft cap the forward applies (a second code path for batches
with padding, written before the cap was added: Gemma-2 ports). Padding is still never read and
both sides agree, so only the padded path's oracle catches it."""

import dataclasses

from _spec_common import CORNER, PROTOCOL, SpecAttn, export_weights

EXPECTED = frozenset({"padding_invariance"})
VARIANTS = {"softcap": [1.0, 5.0]}


class PaddedDropsCap(SpecAttn):
    def padded(self, x, keep):
        full, self.spec = self.spec, dataclasses.replace(self.spec, softcap=None)
        try:
            return super().padded(x, keep)
        finally:
            self.spec = full


def build(spec):
    return PaddedDropsCap(spec)


def padded(module, x, key_mask):
    return module.padded(x, key_mask)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights", "padded"]
