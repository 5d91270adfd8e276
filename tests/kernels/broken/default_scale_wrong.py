"""The default scale wrong: an explicit `scale=` is honoured, but `scale=None` (the default, which
FlashAttention's `softmax_scale=None` and SDPA's `scale=None` mean as 1/sqrt(D)) becomes 1/D.
Passed while attnspec always passed the keyword; now examples at the default scale leave it out,
as the kernel's users do."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle"})
TRIGGER: dict[str, object] = {}
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


class DefaultOneOverD(Kernel):
    def scale_of(self, scale, D):
        return 1.0 / D if scale is None else float(scale)  # the bug: the default is 1/D


attention, supports = bind(DefaultOneOverD, globals())
