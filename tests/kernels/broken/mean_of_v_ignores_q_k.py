"""Ignores q and k: returns the mean of the visible values (causal mask and masked rows respected,
so causality and masked_rows pass). The KernelBench cheat the research notes simulate (section
3.2): with KernelBench L1-97's U[0,1) inputs, T = 512, D = 1024, every softmax row is nearly
uniform and mean(V) passes `allclose(atol=rtol=1e-2)` in all 96 heads. Zero-mean x3/x5 inputs
and a sensitivity property (moving q or k must move o) catch it."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle", "sensitivity"})
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


class MeanOfV(Kernel):
    def logits(self, q, k, p):
        return torch.zeros(q.shape[:-1] + (k.shape[-2],), dtype=q.dtype, device=q.device)

    def alibi(self, s, i, j, Tq, Tk, p):
        return s  # the bug: scores are never computed; every visible key weighs the same


attention, supports = bind(MeanOfV, globals())
