"""The cache call's causal diagonal at the top left: query i of the Tq new queries sees keys
j <= i, not j <= cache_seqlens + Tnew - Tq + i. Right for a prefill into an empty cache with
Tq = Tnew (both corners agree there), wrong for every decoding step after it."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind_cache

EXPECTED = frozenset({"kv_append"})
PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "top_left"
LSE = "natural"
MASKED_ROWS = "zero"
DETERMINISTIC = True
FEATURES = ALL_FEATURES


class TopLeftCache(Kernel):
    def cache_corner(self):
        return self.corner  # the bug: the declared top-left corner, not the cache's own


attention, attention_with_cache, supports = bind_cache(TopLeftCache, globals())
