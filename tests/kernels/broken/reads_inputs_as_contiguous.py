"""Reads q, k and v by their storage as if they were contiguous (a raw pointer and the shape, as
hand-written CUDA and Triton kernels do when they skip the stride arguments): right on the
contiguous tensors a harness allocates itself, wrong on a view into a larger tensor, which
FlashAttention accepts as long as the last dimension is dense. Caught by fresh_results' strided
call."""

from __future__ import annotations

import math

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


def _as_if_contiguous(t):
    # the bug: the storage from the view's offset, read with a contiguous tensor's strides
    flat = t.detach().as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
    start = t.storage_offset()
    return flat[start:start + math.prod(t.shape)].view(t.shape).clone().requires_grad_(
        t.requires_grad)


class RawPointer(Kernel):
    def attention(self, q, k, v, **kw):
        if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
            q, k, v = (_as_if_contiguous(t) for t in (q, k, v))
        return super().attention(q, k, v, **kw)


attention, supports = bind(RawPointer, globals())
