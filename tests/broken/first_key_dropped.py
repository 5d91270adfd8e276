"""Masks key 0 (the BOS token) for every query but the first, as a mask built from a
`attention_mask[:, 1:]` slice one off: later queries never see position 0."""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"mixing", "oracle", "oracle_grad"})


class FirstKeyDropped(Attention):
    def mask(self, scores):
        T = scores.size(-1)
        allowed = torch.ones(T, T, dtype=torch.bool, device=scores.device).tril()
        allowed[1:, 0] = False
        return scores.masked_fill(~allowed, float("-inf"))


def build(n_embd: int, n_head: int) -> FirstKeyDropped:
    return FirstKeyDropped(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
