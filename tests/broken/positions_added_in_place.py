"""Adds fixed sinusoidal position encodings with `x += pe[:T]` under `torch.no_grad()` ("the
table needs no gradient"), which writes them into the caller's input tensor."""

import math

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"input_unchanged", "oracle"})

MAX_LEN = 1024


def sinusoids(length: int, width: int) -> torch.Tensor:
    position = torch.arange(length, dtype=torch.float64)[:, None]
    freq = torch.exp(torch.arange(0, width, 2, dtype=torch.float64) * (-math.log(1e4) / width))
    pe = torch.zeros(length, width, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * freq)
    pe[:, 1::2] = torch.cos(position * freq[: width // 2])
    return pe.float()


class PositionsAddedInPlace(Attention):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__(n_embd, n_head)
        self.register_buffer("pe", sinusoids(MAX_LEN, n_embd), persistent=False)

    def forward(self, x):
        with torch.no_grad():
            x += self.pe[: x.size(1)]  # in place: the caller's tensor changes too
        return super().forward(x)


def build(n_embd: int, n_head: int) -> PositionsAddedInPlace:
    return PositionsAddedInPlace(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
