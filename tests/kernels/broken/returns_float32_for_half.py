"""Upcasts bfloat16 and float16 inputs to float32, computes there (correctly) and returns the
float32 result: closer to the reference than any half-precision kernel could be, and twice the
memory and bandwidth a caller budgeted, with a dtype its next layer does not expect. The output's
dtype must be q's."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"dtype"})
TRIGGER = {"dtype": torch.bfloat16}
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


class Upcast(Kernel):
    def output(self, o, q):
        return o.float().contiguous()  # the bug: float32 whatever q's dtype


attention, supports = bind(Upcast, globals())
