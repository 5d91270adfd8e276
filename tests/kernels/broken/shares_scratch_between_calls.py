"""Computes every call's o in one scratch tensor per shape, kept at module level "to save
allocations", and returns a copy of it: right for one caller at a time, wrong when two threads
call at once (a serving loop, a data loader's workers), as each overwrites the other's partial
result before it is copied out. Caught by fresh_results' call made from a second thread at the
same time as another."""

from __future__ import annotations

import time

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"fresh_results"})
TRIGGER = {"Tq": 32, "Tk": 32, "D": 32}
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

_SCRATCH: dict = {}


class Scratch(Kernel):
    def softmax_attend(self, s, v, p):
        o, lse = super().softmax_attend(s, v, p)
        if torch.is_grad_enabled() and o.requires_grad:
            return o, lse  # the backward's forward: a graph of its own
        key = (tuple(o.shape), o.dtype, o.device)
        buffer = _SCRATCH.setdefault(key, torch.empty_like(o))
        for d in range(o.shape[-1]):  # the bug: the shared buffer, written a column at a time
            buffer[..., d] = o[..., d]
            time.sleep(0)  # the GIL handed over, as a loaded machine's scheduler does
        return buffer.clone(), lse


attention, supports = bind(Scratch, globals())
