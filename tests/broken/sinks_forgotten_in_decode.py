"""The decode path calls a plain softmax (its kernel has no sink argument): the full forward
has sinks, tokens decoded against the cache do not."""

import torch
from _spec_common import CORNER, PROTOCOL, SpecAttn, cross, decode, export_weights, padded

EXPECTED = frozenset({"decode"})
VARIANTS = {"sinks": [True], "n_kv_head": "any"}


class SinkForgotten(SpecAttn):
    def masked_softmax(self, scores, seen):  # the hooks' softmax; forward keeps its own
        scores = scores.masked_fill(~seen, float("-inf"))
        some = seen.any(dim=-1, keepdim=True)
        return torch.softmax(scores.masked_fill(~some, 0.0), dim=-1) * some


def build(spec):
    return SinkForgotten(spec)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "cross", "decode",
           "export_weights", "padded"]
