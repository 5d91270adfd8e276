"""Not attention at all: a per-position map (a Linear, then GELU, then a Linear), so each
output depends on its own position alone. Causal, batch-independent, deterministic, exact at
every prefix: every black-box property but mixing holds, and with no attention weights to find
by name the oracle cannot run (the run is incomplete, never a pass)."""

from _common import check_config
from torch import nn

EXPECTED = frozenset({"mixing"})


class PerPosition(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        check_config(n_embd, n_head)
        self.up = nn.Linear(n_embd, 2 * n_embd)
        self.down = nn.Linear(2 * n_embd, n_embd)

    def forward(self, x):
        return self.down(nn.functional.gelu(self.up(x)))


def build(n_embd: int, n_head: int) -> PerPosition:
    return PerPosition(n_embd, n_head)


__all__ = ["EXPECTED", "build"]
