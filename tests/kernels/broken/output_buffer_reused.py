"""Writes every call's o into one buffer it keeps and returns that buffer: the caller's earlier
result changes under it at the next call (FlashAttention's `out=` misused as a cache; generated
kernels that preallocate "for speed"). Each call is right when it returns, so only a result kept
across a later call shows it: fresh_results keeps every call's o until the last has run, in the
worker, where the memory is the kernel's."""

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


class Reused(Kernel):
    buffers: dict = {}

    def output(self, o, q):
        o = super().output(o, q)
        key = (tuple(o.shape), o.dtype, o.device)
        if key not in self.buffers:
            self.buffers[key] = o.detach().clone()
        buffer = self.buffers[key]
        buffer.copy_(o.detach())  # the bug: one buffer, rewritten by every call
        return buffer


attention, supports = bind(Reused, globals())
