"""To save memory at inference, when no gradient is needed the result is written into the input's
buffer (`x.copy_(y)`) and returned, so the caller's input tensor is overwritten.
"""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"input_unchanged"})


class OutputIntoInput(Attention):
    def forward(self, x):
        y = super().forward(x)
        if not (torch.is_grad_enabled() and x.requires_grad):
            return x.copy_(y)  # reuse the input's storage
        return y


def build(n_embd: int, n_head: int) -> OutputIntoInput:
    return OutputIntoInput(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
