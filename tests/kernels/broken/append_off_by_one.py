"""New k and v written one slot late: at cache_seqlens + 1 .. cache_seqlens + Tnew, leaving slot
cache_seqlens as it was (garbage) and overwriting the slot after the last token. Reading back
cache_seqlens + Tnew keys then takes the garbage slot and misses the last token."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind_cache

EXPECTED = frozenset({"kv_append", "paged"})
PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
LSE = "natural"
MASKED_ROWS = "zero"
DETERMINISTIC = True
FEATURES = ALL_FEATURES
PAGED = 4


class OneLate(Kernel):
    def append_at(self, n):
        return n + 1  # the bug: cache_seqlens is the first free slot, not the last used one


attention, attention_with_cache, supports = bind_cache(OneLate, globals())
