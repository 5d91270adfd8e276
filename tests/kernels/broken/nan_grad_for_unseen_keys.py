"""Its backward leaves NaN in dk and dv for keys that no query sees (a window's far past, keys
past a top-left corner), where the gradient is exactly 0: a dk/dv tile normalised by the sum of
its probabilities, 0/0 where nothing attended. The forward is right, and so is every gradient of a
key some query sees, so only draws with unseen keys and a backward show it."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle_grad"})
TRIGGER = {"window": (1, 0)}  # keys 0..2 are seen by no query
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


def _nan_where_unseen(g):
    unseen = (g == 0).all(dim=-1, keepdim=True)  # a key whose gradient is exactly 0 everywhere
    return g.masked_fill(unseen, float("nan"))  # the bug: 0/0 in the tile's normaliser


class NanForUnseen(Kernel):
    def attention(self, q, k, v, **kw):
        if torch.is_grad_enabled():
            if k.requires_grad:
                k = k.view_as(k)
                k.register_hook(_nan_where_unseen)
            if v.requires_grad:
                v = v.view_as(v)
                v.register_hook(_nan_where_unseen)
        return super().attention(q, k, v, **kw)


attention, supports = bind(NanForUnseen, globals())
