"""Decoding a left-padded batch with position ids shared across it: the prefill counts each
row's real tokens (as generate() does from the attention mask), but every new token gets the
cache index `offset + i`, so a padded row's new tokens sit too far from its prompt (the shape of
unsloth#3699). Unpadded decoding, and every padded forward, are right."""

import torch
from _spec_common import PROTOCOL, SpecAttn, decode, decode_padded, export_weights, padded

EXPECTED = frozenset({"decode"})
VARIANTS = {"n_kv_head": "any", "positions": "any"}


class SharedPositions(SpecAttn):
    def padded_decode_positions(self, keep, offset, t):
        if offset == 0:  # the prefill: counted per row
            return super().padded_decode_positions(keep, offset, t)
        return torch.arange(offset, offset + t).expand(keep.shape[0], t)


def build(spec):
    return SharedPositions(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "decode", "decode_padded",
           "export_weights", "padded"]
