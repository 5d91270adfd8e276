"""Not attention: a per-position map (a Linear) plus an offset that grows with the row's place
in the batch, so copies of one input at different batch offsets differ. mixing must compare
outputs at the same offset: a comparison across offsets would read the offset as dependence on
an earlier position. Rows do not interact (batch_independence holds): mixing alone fails it."""

import torch
from _common import check_config
from torch import nn

EXPECTED = frozenset({"mixing"})


class RowOffset(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        check_config(n_embd, n_head)
        self.lin = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        row = torch.arange(x.shape[0], dtype=x.dtype, device=x.device).view(-1, 1, 1)
        return self.lin(x) + 0.01 * row


def build(n_embd: int, n_head: int) -> RowOffset:
    return RowOffset(n_embd, n_head)


__all__ = ["EXPECTED", "build"]
