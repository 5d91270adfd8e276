"""tests/good/sharded_gather.py sharded the other ways the protocol allows: shard_heads returns
the module wrapped (nn.Sequential: parameters become `0.q.weight`), its output a DTensor
(RowwiseParallel without use_local_output); shard_positions changes the module in place and
returns None. Correct: both sharded properties must pass."""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sharded_gather  # noqa: E402
from sharded_gather import (  # noqa: E402
    CP_LAYOUT,
    PROTOCOL,
    VARIANTS,
    WORLD_SIZES,
    Gathered,
    build,
    export_weights,
)

__all__ = ["CP_LAYOUT", "PROTOCOL", "VARIANTS", "WORLD_SIZES", "build", "export_weights",
           "shard_heads", "shard_positions"]


def shard_heads(module: Gathered, mesh: object) -> nn.Module:
    return nn.Sequential(sharded_gather.shard_heads(module, mesh, local_output=False))


def shard_positions(module: Gathered, mesh: object) -> None:
    module.group = mesh.get_group()  # type: ignore[attr-defined]
