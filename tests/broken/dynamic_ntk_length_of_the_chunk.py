"""Dynamic NTK rebased on the decode call's own token count instead of the sequence so far
(offset + t): past the original length, decoded tokens turn on the unscaled frequencies."""

from _spec_common import CORNER, PROTOCOL, SpecAttn, cross, decode, export_weights, padded

from attnspec import DynamicNTK, RoPE

EXPECTED = frozenset({"decode"})
VARIANTS = {"positions": [RoPE(scaling=DynamicNTK(2.0, 4)),
                          RoPE(interleaved=True, scaling=DynamicNTK(8.0, 6))],
            "n_kv_head": "any"}


class ChunkLength(SpecAttn):
    def decode_length(self, offset, t):
        return t


def build(spec):
    return ChunkLength(spec)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "cross", "decode",
           "export_weights", "padded"]
