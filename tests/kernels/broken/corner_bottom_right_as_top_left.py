"""The wrong corner the other way: declares top-left (SDPA `is_causal`, xformers
`LowerTriangularMask`, flex's `q_idx >= kv_idx`) but aligns the diagonal at the bottom right, as
a FlashAttention call wrapped behind an SDPA-style API does. With Tq < Tk every query sees
Tk - Tq keys it must not: a causal leak. The corner mix-up of the research notes (section 1.8:
xformers' two mask classes, flex's `_adjust` cropping to the upper left)."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"causality", "oracle"})
TRIGGER = {"Tq": 5, "Tk": 9}
PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "top_left"
WINDOW = "pair"
LSE = "natural"
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES


class BottomRight(Kernel):
    def offset(self, Tq, Tk):
        return Tk - Tq  # the bug: the bottom-right diagonal


attention, supports = bind(BottomRight, globals())
