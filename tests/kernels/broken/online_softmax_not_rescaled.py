"""Online softmax rescaling wrong: when a later key tile raises a row's running max, the accumulator
is rescaled by exp(m_old - m_new) but the running denominator is not, so the row is normalised by
a sum mixing two scales. The classic hand-written FlashAttention slip (FA2's Algorithm 1 rescales
both l and O; tiny-flash-attention and flash-attention-minimal style rewrites). Invisible while
the row's max sits in its first tile or Tk fits one tile; peaked rows (x3/x5 inputs) and several
tiles show it."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Blockwise, bind

EXPECTED = frozenset({"knobs", "oracle"})
TRIGGER = {"causal": False, "Tq": 5, "Tk": 20}
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
KNOBS = {"block_q": (16, 4), "block_k": (8, 3, 16), "num_splits": (1, 2)}


class NotRescaled(Blockwise):
    def update(self, m, den, acc, s, vt):
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True)).detach()
        m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        rescale = torch.exp(m - m_safe)
        e = torch.exp(s - m_safe)
        return m_new, den + e.sum(dim=-1, keepdim=True), acc * rescale + e @ vt  # the bug: den


attention, supports = bind(NotRescaled, globals())
