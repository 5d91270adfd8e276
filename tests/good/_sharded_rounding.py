"""tests/good/sharded_gather.py rounding like MKL on AVX-512: rows in the partial tail of 4-row
blocks move one ulp (tests/good/batch_position_rounding.py), unsharded and on every rank. The
ranks' calls have other shapes than the unsharded one, so their rows fall in other blocks: a
sharded check that compared exactly would call correct sharding wrong on such a CPU."""

from __future__ import annotations

import sys
from pathlib import Path

from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sharded_gather  # noqa: E402
from batch_position_rounding import nudge_by_position  # noqa: E402
from sharded_gather import (  # noqa: E402
    CP_LAYOUT,
    PROTOCOL,
    VARIANTS,
    WORLD_SIZES,
    export_weights,
)

__all__ = ["CP_LAYOUT", "PROTOCOL", "VARIANTS", "WORLD_SIZES", "build", "export_weights",
           "shard_heads", "shard_positions"]


class Rounding(sharded_gather.Gathered):
    def forward(self, x: Tensor) -> Tensor:
        return nudge_by_position(super().forward(x))


def build(spec: object) -> nn.Module:
    return Rounding(spec)  # type: ignore[arg-type]


def shard_heads(module: nn.Module, mesh: object) -> nn.Module:
    return sharded_gather.shard_heads(module, mesh)  # type: ignore[arg-type]


def shard_positions(module: nn.Module, mesh: object) -> nn.Module:
    return sharded_gather.shard_positions(module, mesh)  # type: ignore[arg-type]
