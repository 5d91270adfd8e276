"""Decoding forgets the soft cap the forward applies (the cached path has a score function of
its own). decode's message names the path and the feature."""

import dataclasses

from _spec_common import CORNER, PROTOCOL, SpecAttn, decode, export_weights

EXPECTED = frozenset({"decode"})
VARIANTS = {"softcap": [1.0, 5.0]}


class DecodeDropsCap(SpecAttn):
    def decode(self, x, cache, offset):
        full, self.spec = self.spec, dataclasses.replace(self.spec, softcap=None)
        try:
            return super().decode(x, cache, offset)
        finally:
            self.spec = full


def build(spec):
    return DecodeDropsCap(spec)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "decode", "export_weights"]
