"""The wrong corner: declares bottom-right (FlashAttention, FlashInfer: query i sees keys
j <= i + Tk - Tq) but masks at the top left (j <= i), as SDPA's `is_causal` and xformers'
`LowerTriangularMask` do and as flash-attention did before 2.1. With Tq < Tk queries see too
few keys; with Tq > Tk the leading rows, which must see nothing (o 0, lse -inf), see keys.
Hiding too much leaks nothing, so a causality check alone cannot catch it."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"masked_rows", "oracle"})
TRIGGER = {"Tq": 7, "Tk": 4}
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


class TopLeft(Kernel):
    def offset(self, Tq, Tk):
        return 0  # the bug: the top-left diagonal


attention, supports = bind(TopLeft, globals())
