"""Not attention: a per-position map (a Linear) plus an offset that grows with the batch size,
so one input alone and its copies stacked differ. mixing must compare calls of the same shape:
a baseline of one copy against many would read the offset as dependence on an earlier
position. Every other black-box property calls one shape at a time: mixing alone fails it."""

from _common import check_config
from torch import nn

EXPECTED = frozenset({"mixing"})


class BatchSize(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        check_config(n_embd, n_head)
        self.lin = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.lin(x) + 0.01 * x.shape[0]


def build(n_embd: int, n_head: int) -> BatchSize:
    return BatchSize(n_embd, n_head)


__all__ = ["EXPECTED", "build"]
