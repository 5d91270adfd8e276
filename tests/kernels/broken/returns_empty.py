"""Returns uninitialised memory: `torch.empty` of the right shape and dtype, nothing computed.
KernelBench's adversarial `result_reuse_kernel.py`: the empty tensor "can get allocated the same
physical memory as the PyTorch reference outputs", so a harness that runs the reference first and
frees its output passes it; wafer.ai's 104x HIP kernel read uninitialised shared memory. Caught by
poisoning the allocator before the call and by new values at the same address."""

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


class Empty(Kernel):
    def attention(self, q, k, v, **kw):
        # the bug: the answer is whatever the allocator hands back
        o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        return o, torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)  # (B, H, Tq)


attention, supports = bind(Empty, globals())
