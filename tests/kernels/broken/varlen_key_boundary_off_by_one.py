"""cu_seqlens off by one at the boundary: each sequence's keys are taken as
k[cu_seqlens_k[b] : cu_seqlens_k[b + 1] + 1], so every sequence but the last also sees the next
sequence's first key (and, bottom-right, its corner moves by one). The inclusive-end slip of
hand-written varlen loops; invisible with one sequence, and the last sequence is always right."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle", "varlen"})
TRIGGER = {"seqlens_q": [4, 3], "seqlens_k": [5, 6]}
PROTOCOL = "kernel"
LAYOUT = "varlen"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_LAYOUT = "hs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES


class KeyEndInclusive(Kernel):
    def sequences(self, cu_q, cu_k):
        total = int(cu_k[-1])
        return [(qs, qe, ks, min(ke + 1, total))  # the bug: the end is inclusive
                for qs, qe, ks, ke in super().sequences(cu_q, cu_k)]


attention, supports = bind(KeyEndInclusive, globals())
