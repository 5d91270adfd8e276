"""Both padded paths, the padded forward and decoding a padded batch, forget the sliding
window: they agree with each other, so the decode's self-comparison passes; the padded path's
oracle inside decode catches it (generate() on a padded batch attends past the window)."""

import dataclasses

from _spec_common import CORNER, PROTOCOL, SpecAttn, decode, export_weights

EXPECTED = frozenset({"decode", "padding_invariance"})
VARIANTS = {"window": "any"}


class PaddedPathsDropWindow(SpecAttn):
    def _unwindowed(self, method, *args):
        full, self.spec = self.spec, dataclasses.replace(self.spec, window=None)
        try:
            return method(*args)
        finally:
            self.spec = full

    def padded(self, x, keep):
        return self._unwindowed(super().padded, x, keep)

    def decode_padded(self, x, keep, cache, offset):
        return self._unwindowed(super().decode_padded, x, keep, cache, offset)


def build(spec):
    return PaddedPathsDropWindow(spec)


def padded(module, x, key_mask):
    return module.padded(x, key_mask)


def decode_padded(module, x, key_mask, cache, offset):
    return module.decode_padded(x, key_mask, cache, offset)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "decode", "decode_padded",
           "export_weights", "padded"]
