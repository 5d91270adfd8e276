"""Layout confusion on the way out: declares BSHD and transposes its inputs to BHSD correctly, but
brings the output back with `reshape(B, Tq, H, D)` instead of `transpose(1, 2)`, so each output
position holds a slice of another position's heads. The view-instead-of-transpose bug of
diffusers PR #14341 (a double transpose of K/V) and pytorch PR #184348 (FlopCounter mixing up
BSHD and BHSD); shapes are all right, so only values show it."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"batch_independence", "causality", "oracle"})
TRIGGER = {"H": 3, "G": 3, "Tq": 6, "Tk": 6}
PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES


class ReshapedOut(Kernel):
    def from_bhsd(self, o):
        B, H, T, D = o.shape
        return o.reshape(B, T, H, D)  # the bug: reshape is not transpose


attention, supports = bind(ReshapedOut, globals())
