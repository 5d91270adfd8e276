"""ALiBi distance from the wrong corner: the mask sits at the bottom right, as declared, but the
ALiBi distance is measured as |i - j| from the top left instead of |i + Tk - Tq - j|, so with
Tq != Tk the bias is shifted by Tk - Tq keys. FA2 measures from its bottom-right i' (research
section 1.1); a kernel ported from an SDPA (top-left) reference keeps the old distance. Invisible
at Tq = Tk, the shape most tests use."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle"})
TRIGGER = {"alibi": True, "Tq": 5, "Tk": 9}
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


class AlibiTopLeft(Kernel):
    def alibi_distance(self, i, j, Tq, Tk):
        return (i[:, None] - j[None, :]).abs()  # the bug: i, not i + Tk - Tq


attention, supports = bind(AlibiTopLeft, globals())
