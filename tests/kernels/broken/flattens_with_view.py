"""Flattens q, k and v with `.view(-1, D)` before its matmuls, as generated kernels write it:
right on the contiguous tensors a harness allocates, and a RuntimeError on a k broadcast along
the batch with `expand` (stride 0, one copy of a shared prefix for every row), which SDPA and
FlashAttention take as they are. Caught by fresh_results' call with k of stride 0 along B."""

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


class Flattened(Kernel):
    def attention(self, q, k, v, **kw):
        # the bug: view, not reshape; a view cannot merge a stride-0 batch axis into the rest
        q, k, v = (t.view(-1, t.shape[-1]).view(t.shape) for t in (q, k, v))
        return super().attention(q, k, v, **kw)


attention, supports = bind(Flattened, globals())
