"""Tokens decoded after the prefill go into the cache without the key norm (the norm lives
in the prefill path only): the full forward is right, decoding is not."""

from _spec_common import CORNER, PROTOCOL, SpecAttn, cross, decode, export_weights, padded

from attnspec import QKNorm

EXPECTED = frozenset({"decode"})
VARIANTS = {"qk_norm": [QKNorm(), QKNorm(per_head=False)], "n_kv_head": "any"}


class KNormSkipped(SpecAttn):
    def decode(self, x, cache, offset):
        if cache is None:
            return super().decode(x, cache, offset)
        self.skip_k = True
        try:
            return super().decode(x, cache, offset)
        finally:
            self.skip_k = False

    def norm(self, t, which):
        return t if which == "k" and getattr(self, "skip_k", False) else super().norm(t, which)


def build(spec):
    return KNormSkipped(spec)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "cross", "decode",
           "export_weights", "padded"]
