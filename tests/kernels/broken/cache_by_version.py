"""Caches its result by the inputs' addresses and their `Tensor._version` counters: a write
through the tensor (`copy_`) bumps the counter and misses the cache, but values written without
a bump (through `.data`, DLPack, another library sharing the memory) get the old answer.
Caught by fresh_results, which writes the new values into the same tensors through `.data`."""

from __future__ import annotations

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


class VersionCache(Kernel):
    cache: dict = {}

    def attention(self, q, k, v, **kw):
        # The tensors themselves are kept, so that an id is never another tensor's.
        hit = self.cache.get(id(q))
        if hit is not None and all(a is b and a._version == n for a, b, n in zip(
                hit[0], (q, k, v), hit[1], strict=True)):
            result = hit[2]  # the bug: an unchanged version stands for unchanged values
        else:
            result = super().attention(q, k, v, **kw)
            self.cache[id(q)] = ((q, k, v), tuple(t._version for t in (q, k, v)), result)
        return tuple(r.clone() for r in result) if isinstance(result, tuple) else result.clone()


attention, supports = bind(VersionCache, globals())
