"""Window encoding off by one: FA2's `window_size=(left, right)` is inclusive (query i sees keys
i' - left .. i' + right), but this kernel reads `left` as exclusive and drops key i' - left: the
slip between a window *size* and a window *reach* that makes vLLM pass FlashInfer
`window_left = sliding_window - 1`. Invisible without a window or when left exceeds Tk."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle", "window"})
TRIGGER = {"window": (2, 0), "Tq": 9, "Tk": 9}
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


class LeftExclusive(Kernel):
    def window_edges(self, window, causal):
        left, right = super().window_edges(window, causal)
        return (None if left is None else left - 1), right  # the bug: one key too few


attention, supports = bind(LeftExclusive, globals())
