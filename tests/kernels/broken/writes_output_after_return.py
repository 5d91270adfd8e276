"""Returns its output before it is written and lets a background thread fill it in 50 ms
later (a kernel launched on a side stream without a sync, a lazy future): a caller that reads it
at once reads whatever the memory held. attnspec copies the output the moment the call returns,
into memory it poisoned with NaN before the call."""

from __future__ import annotations

import threading
import time

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle", "finite", "fresh_results", "determinism"})
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


class Late(Kernel):
    def output(self, o, q):
        o = super().output(o, q)
        out = torch.empty_like(o)

        def fill() -> None:
            time.sleep(0.05)
            out.copy_(o)  # the bug: written after the caller has it

        threading.Thread(target=fill, daemon=True).start()
        return out


attention, supports = bind(Late, globals())
