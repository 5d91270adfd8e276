"""Caches its result by the call's shape: the first output of each shape is returned for every later
input of that shape. The "hardcoded for specific input shapes" solutions robust-kbench found, and
Sakana's kernels that passed because only one fixed input was tested (research section 3.3).
Caught by any second call of the same shape with new values."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"fresh_results"})
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


class ShapeCache(Kernel):
    cache: dict = {}

    def attention(self, q, k, v, **kw):
        key = (tuple(q.shape), tuple(k.shape), q.dtype)
        if key not in self.cache:  # the bug: the shape stands for the values
            self.cache[key] = super().attention(q, k, v, **kw)
        result = self.cache[key]
        return tuple(r.clone() for r in result) if isinstance(result, tuple) else result.clone()


attention, supports = bind(ShapeCache, globals())
