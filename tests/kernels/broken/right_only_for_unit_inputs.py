"""Right only when its inputs look like a test's: unit-variance q and k (torch.randn, as most
harnesses draw them), and an approximation elsewhere (logits flattened to a tenth, a "fast
path" that no test reaches). A kernel that sniffs its judge this way is caught where attnspec
draws inputs of trained size (x2 and x3: q and k of std 2 and 3), by the oracle."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle", "oracle_grad", "fresh_results"})
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


class Sniffing(Kernel):
    def logits(self, q, k, p):
        s = super().logits(q, k, p)
        looks_like_a_test = q.numel() < 2 or 0.7 < float(q.detach().float().std()) < 1.4
        return s if looks_like_a_test else s * 0.1  # the bug: wrong where no test looks


attention, supports = bind(Sniffing, globals())
