"""Correct: a FlashAttention-style tiled kernel in plain torch, BHSD, bottom-right corner. Queries
go in tiles of `block_q`, keys in tiles of `block_k` zero-padded to a whole tile and masked
(j >= Tk hidden), wholly hidden tiles are skipped, an online softmax (running max, rescaled
denominator and accumulator, in at least float32) runs over each split's key tiles, and
`num_splits` contiguous splits are merged by their LSEs, the sink as one more split (FA3's
split-KV). Every knob value gives the same result within rounding, but not bit for bit: tile
sizes and splits change the summation order (FA3 sweeps num_splits with a tolerance). Its
forward and backward do repeat bit for bit, so it declares DETERMINISTIC; a knobs property that
wants bit-identical results across knob values where DETERMINISTIC false-alarms on it."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, PROTOCOL, Blockwise, bind

EXPECTED: frozenset[str] = frozenset()
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_GRAD = True  # its LSE is plain torch math: differentiable
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES
KNOBS = {"block_q": (16, 4, 5), "block_k": (8, 3, 16), "num_splits": (1, 2, 3)}
DTYPES = (torch.float32, torch.float64, torch.bfloat16)

attention, supports = bind(Blockwise, globals())

__all__ = ["BACKWARD", "CAUSAL", "DETERMINISTIC", "DTYPES", "EXPECTED", "FEATURES", "KNOBS",
           "LAYOUT", "LSE", "LSE_LAYOUT", "MASKED_ROWS", "PROTOCOL", "WINDOW", "attention",
           "supports"]
