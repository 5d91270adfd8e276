"""A sliding window of 4 keys that the spec does not declare (protocol 1: full causal
attention): a query at t >= 4 never sees position 0, as a Mistral-style layer left on."""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"mixing", "oracle", "oracle_grad"})


class Windowed(Attention):
    def mask(self, scores):
        T = scores.size(-1)
        i = torch.arange(T, device=scores.device)[:, None]
        j = torch.arange(T, device=scores.device)[None, :]
        return scores.masked_fill(~((j <= i) & (j > i - 4)), float("-inf"))


def build(n_embd: int, n_head: int) -> Windowed:
    return Windowed(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
