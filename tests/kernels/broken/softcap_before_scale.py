"""Softcap applied before the scale: computes softcap * tanh(q.k / softcap) and then multiplies by
the scale, where FA2 and Gemma-2 cap the scaled scores (`tanh(s / softcap) * softcap` after
scaling, research section 1.1). Near-identical while |q.k| << softcap; FA's tests multiply q by
the softcap so the cap matters, and x3/x5 inputs with a small softcap show it."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle"})
TRIGGER = {"softcap": 4.0, "scale": 0.3}
PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES


class CapThenScale(Kernel):
    def logits(self, q, k, p):
        s = q @ k.transpose(-2, -1)
        if p.softcap is not None:
            s = p.softcap * torch.tanh(s / p.softcap)
        return s * p.scale  # the bug: the cap saw unscaled scores


attention, supports = bind(CapThenScale, globals())
