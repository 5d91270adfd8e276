"""Caches its result by a checksum of the first elements: the key is the shape plus the first eight
values of q, k and v, so fresh random draws always miss the cache (new values differ there) and
look honest, while an input that changes only later positions gets a stale answer. The cache
keyed on a cheap fingerprint that the harness hack catalogues (research section 3.4: "caches the
output by data_ptr, shape or a checksum"). Calls with all-new values cannot catch it; one that
changes only the last batch row or position does."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"fresh_results"})
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


class ChecksumCache(Kernel):
    cache: dict = {}

    def attention(self, q, k, v, **kw):
        head = tuple(torch.cat([x.flatten()[:8].double() for x in (q, k, v)]).tolist())
        key = (tuple(q.shape), tuple(k.shape), head)
        if key not in self.cache:  # the bug: eight values stand for all of them
            self.cache[key] = super().attention(q, k, v, **kw)
        result = self.cache[key]
        return tuple(r.clone() for r in result) if isinstance(result, tuple) else result.clone()


attention, supports = bind(ChecksumCache, globals())
