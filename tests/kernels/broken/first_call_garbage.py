"""Returns garbage on the first call of its process only (a lazily initialised workspace read
before it is written, a JIT's first launch with the wrong constants), right ever after: a
harness that warms a kernel up before it checks never sees it. attnspec's worker makes its
first call, as the subject loads, twice: determinism reports the difference."""

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


class ColdStart(Kernel):
    warm = False

    def output(self, o, q):
        o = super().output(o, q)
        if not ColdStart.warm:
            ColdStart.warm = True
            return torch.full_like(o, 7.0)  # the bug: the first call's workspace, unwritten
        return o


attention, supports = bind(ColdStart, globals())
