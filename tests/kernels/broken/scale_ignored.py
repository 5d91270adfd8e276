"""Scale ignored: declares the `scale` feature, takes the keyword, and always uses 1/sqrt(D), the
default of FA's `softmax_scale=None` and SDPA's `scale=None`. Invisible whenever the drawn scale
happens to be 1/sqrt(D), which attnspec draws sometimes and a model's config often is; the module
catalogue's `cross_ignores_scale` is the same slip in one code path."""

from __future__ import annotations

import math

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle"})
TRIGGER = {"scale": 0.21}
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


class DefaultScale(Kernel):
    def scale_of(self, scale, D):
        return 1.0 / math.sqrt(D)  # the bug: the keyword is dropped


attention, supports = bind(DefaultScale, globals())
