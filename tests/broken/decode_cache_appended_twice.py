"""Each decode step appends its keys and values to the cache twice (an update done both inside
the layer and by the caller): every later query attends to duplicated keys."""

from _spec_common import CORNER, PROTOCOL, SpecAttn, cross, decode, export_weights, padded
from torch import cat

EXPECTED = frozenset({"decode"})
VARIANTS = {"n_kv_head": "any", "window": "any"}


class AppendedTwice(SpecAttn):
    def append(self, cache, k, v):
        if cache is None:
            return k, v
        return cat((cache[0], k, k), dim=2), cat((cache[1], v, v), dim=2)


def build(spec):
    return AppendedTwice(spec)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "cross", "decode",
           "export_weights", "padded"]
