"""LSE in the wrong base: declares a natural-log LSE (FA, xformers, flex) but returns log2, as
FlashInfer's kernels compute it and as flex's kernel does before its API multiplies by ln 2. The
outputs are right; only the LSE is off, by a factor of 1.44. The research notes (section 2.6)
found a FlashInfer reference mixing the two units that still passed at rtol 1e-2 because the
inputs were divided by 10: a small-magnitude check cannot see the base. attnspec draws x3/x5."""

from __future__ import annotations

import math

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle"})
TRIGGER = {"mag": 3.0}
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


class Base2(Kernel):
    def lse_base(self, lse):
        return lse / math.log(2)  # the bug: log2 where natural log was declared


attention, supports = bind(Base2, globals())
