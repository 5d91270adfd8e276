"""Decoding rotates each new token as if it stood at position 0, 1, ...: the cache's length is
never added to RoPE's positions (transformers#25420-style). The full forward is right; only
tokens decoded after a prefill are wrong."""

from _spec_common import CORNER, PROTOCOL, SpecAttn, cross, decode, export_weights, padded
from torch import arange

from attnspec import RoPE

EXPECTED = frozenset({"decode"})
VARIANTS = {"positions": [RoPE(), RoPE(interleaved=True)], "n_kv_head": "any"}


class OffsetForgotten(SpecAttn):
    def decode_positions(self, offset, t):
        return arange(0, t)


def build(spec):
    return OffsetForgotten(spec)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "cross", "decode",
           "export_weights", "padded"]
