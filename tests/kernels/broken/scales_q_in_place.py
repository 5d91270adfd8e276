"""Mutates its input: scales q in place (`q *= scale`) and then attends with scale 1. The output of
the first call is right, but the caller's q is changed, and a second call on the same tensors
scales it again. vLLM's pure-PyTorch `ref_paged_attn` does `q = query[...]; q *= scale`, which
writes through a view into the caller's query (a vendored copy adds "clone to avoid clobbering
the query tensor"; research section 1.7)."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"input_unchanged"})
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


class ScalesQ(Kernel):
    def attention(self, q, k, v, *, causal, scale=None, **kw):
        with torch.no_grad():
            q.mul_(self.scale_of(scale, q.shape[-1]))  # the bug: the caller's q, in place
        return super().attention(q, k, v, causal=causal, scale=1.0, **kw)


attention, supports = bind(ScalesQ, globals())
