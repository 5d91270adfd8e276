"""Returns a tensor subclass: the values are right, but the output is a `torch.Tensor` subclass, the
vehicle of lazy-evaluation hacks that defer the work past the timer (KernelBench's static checker
rejects `_make_subclass` and subclassing torch.Tensor; DeepReinforce's "validate tensor type and
storage"). attnspec's contract: outputs are plain torch.Tensor."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"dtype"})
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


class LazyResult(torch.Tensor):
    pass


class Subclassed(Kernel):
    def output(self, o, q):
        return super().output(o, q).as_subclass(LazyResult)  # the bug: not a plain Tensor


attention, supports = bind(Subclassed, globals())
