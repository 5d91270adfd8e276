"""Nondeterministic forward at the rounding level: one output element in eight moves by one unit in
the last place, chosen afresh on each call, as a kernel that reads uninitialised shared memory or
races on an accumulator does. Within any tolerance, so every oracle passes; only repeating the call
and comparing bits shows it. wafer.ai/KernelArena's 104x HIP kernel read uninitialised memory
and was caught by a run-twice check; FA guarantees a bit-identical forward and tests it
(`test_flash_attn_race_condition`)."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"determinism"})
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


_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.bfloat16: torch.int16,
         torch.float16: torch.int16}


class RoundingNoise(Kernel):
    def output(self, o, q):
        o = super().output(o, q)
        jitter = (torch.rand(o.shape, device=o.device) < 0.125).to(_BITS[o.dtype])
        noisy = (o.detach().view(_BITS[o.dtype]) + jitter).view(o.dtype)
        return o + (noisy - o.detach())  # the bug: last bits drawn per call


attention, supports = bind(RoundingNoise, globals())
