"""A query that sees no key gets softmax over nothing but -inf: NaN (pytorch#110213, left-padded
Falcon; #103963). Real tokens are unharmed; the padded queries' outputs and every gradient
through them are NaN."""

import torch
from _spec_common import CORNER, PROTOCOL, SpecAttn, cross, decode, export_weights, padded

EXPECTED = frozenset({"masked_rows", "causal_corner"})
VARIANTS = {"n_kv_head": "any"}


class NaNRows(SpecAttn):
    def masked_softmax(self, scores, seen):
        return torch.softmax(scores.masked_fill(~seen, float("-inf")), dim=-1)


def build(spec):
    return NaNRows(spec)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "cross", "decode",
           "export_weights", "padded"]
