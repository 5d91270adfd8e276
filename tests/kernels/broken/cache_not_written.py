"""The new k and v are attended but never stored: o is right for this call (the keys are the
cache's first cache_seqlens plus the new tokens, taken from the arguments), but the cache is
left as it was, so the next decoding step reads garbage where these tokens belong."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind_cache

EXPECTED = frozenset({"kv_append"})
PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "bottom_right"
LSE = "natural"
MASKED_ROWS = "zero"
DETERMINISTIC = True
FEATURES = ALL_FEATURES


class NotStored(Kernel):
    def append(self, cache, new, b, n, table):
        pass  # the bug: nothing is written

    def cached(self, cache, new, b, n, count, table):
        old = Kernel.cached(self, cache, None, b, n, 0, table)
        if new is None or not count:
            return old
        return torch.cat([old, new[b:b + 1].to(old.dtype)], dim=2)


attention, attention_with_cache, supports = bind_cache(NotStored, globals())
