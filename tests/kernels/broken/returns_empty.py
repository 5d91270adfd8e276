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
        shape = q.shape  # the bug: the answer is whatever the allocator hands back
        o = torch.empty(shape, dtype=q.dtype, device=q.device)
        if self.lse is None:
            return o
        H, Tq = (q.shape[1], q.shape[0]) if self.layout == "varlen" else (
            (q.shape[1], q.shape[2]) if self.layout == "bhsd" else (q.shape[2], q.shape[1]))
        lse_shape = {"bhs": (q.shape[0], H, Tq), "bsh": (q.shape[0], Tq, H), "hs": (H, Tq),
                     "sh": (Tq, H)}[self.lse_layout]
        return o, torch.empty(lse_shape, dtype=torch.float32, device=q.device)


attention, supports = bind(Empty, globals())
