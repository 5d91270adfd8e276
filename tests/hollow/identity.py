"""Not attention: the identity (y = x). Every black-box property held before mixing."""

from torch import nn

EXPECTED_STATUS = "fail"
EXPECTED = {"mixing": "fail", "oracle": "incomplete"}


def build(n_embd: int, n_head: int) -> nn.Module:
    if n_embd < 1 or n_head < 1 or n_embd % n_head:
        raise ValueError(f"n_embd={n_embd} must be a positive multiple of n_head={n_head}")
    return nn.Identity()
