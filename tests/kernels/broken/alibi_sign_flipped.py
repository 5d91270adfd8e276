"""ALiBi with the wrong sign: adds slope_h * |i' - j| instead of subtracting it, so distant keys are
favoured. FA2's convention is `-slope * |i + Sk - Sq - j|` (research section 1.1); the module
catalogue's `alibi_slopes_reversed` is the per-head cousin. Any drawn ALiBi case shows it."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle"})
TRIGGER = {"alibi": True}
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


class AlibiPlus(Kernel):
    def alibi(self, s, i, j, Tq, Tk, p):
        if p.alibi is None:
            return s
        slopes = p.alibi.to(s.dtype)[:, None, None]
        return s + slopes * self.alibi_distance(i, j, Tq, Tk).to(s.dtype)  # the bug: + not -


attention, supports = bind(AlibiPlus, globals())
