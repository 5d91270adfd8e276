"""Layout confusion: declares BSHD, FlashAttention's (B, T, H, D), but reads its inputs as BHSD, so
the "heads" it attends over are positions and the "positions" are heads: attention mixes heads
and the causal mask runs along the head axis. The most common false result users report (FA #1128,
BSHD tensors given to SDPA; FA #1391, "FlashAttention expects (bs, seqlen, num_heads, head_dim)";
FA #1359, max diff 5.27). It runs without error whenever T and H allow it, as here (H = G).
Each position still reads only its own keys, so causality cannot see it; heads leak into heads."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"batch_independence", "oracle"})
TRIGGER = {"B": 2, "H": 3, "G": 3, "Tq": 6, "Tk": 6, "D": 5}
PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES


class ReadsBHSD(Kernel):
    def to_bhsd(self, x):
        return x  # the bug: no transpose(1, 2)

    def from_bhsd(self, o):
        return o


attention, supports = bind(ReadsBHSD, globals())
