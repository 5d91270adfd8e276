"""Precision downgrade: given float32 it computes in bfloat16 and casts the result back, so the
output has the declared dtype and roughly the right values (errors near 1e-2). The hack
KernelBench's static checker looks for (`.half()` in fp32 tasks) and DeepReinforce's "precision
downgrade"; caught by a tolerance tied to the float32 reference's own error, not by the dtype."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle"})
TRIGGER = {}
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


class Bfloat16Inside(Kernel):
    def compute_dtype(self, dtype):
        return torch.bfloat16  # the bug: float32 asked, bfloat16 computed


attention, supports = bind(Bfloat16Inside, globals())
