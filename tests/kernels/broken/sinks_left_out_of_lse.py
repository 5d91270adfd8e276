"""Sinks ignored in the LSE: the attention-sink logit (gpt-oss, FA4 `learnable_sink`) is in every
row's softmax denominator, so o is right, but the returned LSE is the logsumexp of the keys alone.
A merge of split or ring partials by LSE then double-counts or drops the sink; FA4 checks dsink
against a reference (`check_dsink_vs_ref`). The protocol's LSE includes the sink."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle"})
TRIGGER = {"sinks": True}
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


class LseWithoutSink(Kernel):
    def softmax_attend(self, s, v, p):
        o, _ = super().softmax_attend(s, v, p)
        m = self.row_max(s).detach()
        m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        total = torch.exp(s - m).sum(dim=-1, keepdim=True)
        some = total > 0
        lse = torch.where(some, m + torch.log(torch.where(some, total, torch.ones_like(total))),
                          torch.full_like(m, float("-inf")))
        return o, lse.squeeze(-1)  # the bug: the sink is not in the LSE


attention, supports = bind(LseWithoutSink, globals())
