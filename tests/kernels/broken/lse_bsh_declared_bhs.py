"""LSE in the wrong layout: declares FlashAttention's (B, H, Tq) but returns (B, Tq, H),
FlashInfer's [qo_len, H] order with a batch axis in front (research section 1.8). The outputs
are right. When H = Tq the shape matches and only the values show it; here H = 4 and Tq = 5
make the shape wrong too."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle", "width"})
TRIGGER = {"H": 4, "Tq": 5, "Tk": 9}
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


class LseTransposed(Kernel):
    def lse_shape(self, lse):
        return lse.transpose(1, 2)  # the bug: (B, Tq, H) declared as bhs


attention, supports = bind(LseTransposed, globals())
