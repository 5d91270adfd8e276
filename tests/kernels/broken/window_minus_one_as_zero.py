"""Window encoding: FA2's `window_size` uses -1 for "unbounded", but this kernel clamps negatives to
0, so (-1, 2) becomes "the diagonal and two keys to the right" instead of "everything up to two
keys to the right". The encodings differ across kernels (FA2/FA3 -1, FA4 None, FlashInfer -1 in
`window_left`), and an adapter that maps one onto another this way is easy to write."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle", "window"})
TRIGGER = {"causal": False, "window": (None, 2), "Tq": 8, "Tk": 8}
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


class MinusOneIsZero(Kernel):
    def window_edges(self, window, causal):
        if window is None:
            return None, None
        left, right = window
        return max(int(left), 0), max(int(right), 0)  # the bug: -1 read as 0


attention, supports = bind(MinusOneIsZero, globals())
