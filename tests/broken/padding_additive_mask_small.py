"""Padding masked by adding -1e4 to the scores (a constant sized for float16 logits), and the
padded inputs fed in as they are: large values in the padding outweigh the mask, and NaN there
passes straight through it (pytorch#101967, xformers' NaN-in-padding test)."""

import torch
from _spec_common import CORNER, PROTOCOL, SpecAttn, cross, decode, export_weights, padded

EXPECTED = frozenset({"padding_invariance"})
VARIANTS = {"n_kv_head": "any"}


class AdditiveMask(SpecAttn):
    def padded_input(self, x, keep):
        return x

    def masked_softmax(self, scores, seen):
        causal = seen.all(dim=0, keepdim=True)  # the causal part is shared by every row
        scores = scores.masked_fill(~causal, float("-inf"))
        return torch.softmax(scores + (~seen).to(scores.dtype) * -1e4, dim=-1)


def build(spec):
    return AdditiveMask(spec)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "cross", "decode",
           "export_weights", "padded"]
