"""B/H swap visible only when B != H: the kernel's values are right and laid out right in memory,
but it hands the output back shaped (H, B, Tq, D), having read the sizes in the wrong order (the
`view(n_heads, batch, ...)` slip). With B = H the shape, and so every value, is exactly right; a
suite that draws B = H (or B = 1 = H) never sees it. attnspec draws B, H, T, D distinct."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"width"})
TRIGGER = {"B": 2, "H": 3, "G": 3}
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


class SwappedShape(Kernel):
    def output(self, o, q):
        B, H = o.shape[0], o.shape[1]
        return super().output(o, q).reshape(H, B, *o.shape[2:])  # the bug: sizes swapped


attention, supports = bind(SwappedShape, globals())
