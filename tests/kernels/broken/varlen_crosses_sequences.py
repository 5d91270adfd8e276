"""cu_seqlens ignored in the mask: a varlen kernel that attends over the whole packed batch as one
sequence, so queries of sequence b see keys of the sequences packed before it (and the corner is
the pack's, not the sequence's). The packing leak that xformers' `BlockDiagonalMask` and FA's
`flash_attn_varlen_func` exist to prevent; invisible with one sequence."""

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


class OneSequence(Kernel):
    def sequences(self, cu_q, cu_k):
        return [(0, int(cu_q[-1]), 0, int(cu_k[-1]))]  # the bug: one span for the whole pack


attention, supports = bind(OneSequence, globals())
