"""Zero-length sequences crash: a varlen kernel whose stable softmax takes `s.amax(-1)` with no
guard for an empty key axis, so a sequence with no keys raises "Expected reduction dim to have
non-zero size" instead of giving its queries o = 0 and lse = -inf. FA4 tests exactly this contract
(`seqlen_k == 0`: output zeros, LSE -inf; `seqlen_q == 0` must not crash); FA PR #2421 fixed NaN
in dK/dV at seqlen_q == 0 on ROCm; FA's varlen tests give every 5th sequence length 0."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"masked_rows", "varlen"})
TRIGGER = {"seqlens_q": [3, 2], "seqlens_k": [4, 0]}
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


class AmaxUnguarded(Kernel):
    def row_max(self, s):
        return s.amax(dim=-1, keepdim=True)  # the bug: no case for an empty key axis


attention, supports = bind(AmaxUnguarded, globals())
