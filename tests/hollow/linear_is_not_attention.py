"""Not attention: build returns a plain nn.Linear(C, C) (after refusing C % H). Causal,
batch-independent, deterministic and exact at every prefix, it passed every property: the
oracle was skipped for want of export_weights, and nothing black-box looked for mixing."""

from torch import nn

EXPECTED_STATUS = "fail"
EXPECTED = {"mixing": "fail", "oracle": "incomplete"}


def build(n_embd: int, n_head: int) -> nn.Module:
    if n_embd < 1 or n_head < 1 or n_embd % n_head:
        raise ValueError(f"n_embd={n_embd} must be a positive multiple of n_head={n_head}")
    return nn.Linear(n_embd, n_embd)
