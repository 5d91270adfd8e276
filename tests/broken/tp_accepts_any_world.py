"""Tensor parallelism that shards any number of heads: with n_head % world != 0, DTensor's
ColwiseParallel splits the q rows unevenly, so a rank holds a fraction of a head and the module
runs on, silently wrong (or fails deep in a view). Correct wherever the world divides n_head,
which is all attnspec draws: tp_equivalence also asks the hook to refuse n_head = world + 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "good"))

from sharded_gather import PROTOCOL, VARIANTS, WORLD_SIZES, build, export_weights  # noqa: E402

EXPECTED = frozenset({"tp_equivalence"})
__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "WORLD_SIZES", "build", "export_weights",
           "shard_heads"]


def shard_heads(module: nn.Module, mesh: object) -> nn.Module:
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
            "o": RowwiseParallel()}
    return parallelize_module(module, mesh, plan)  # type: ignore[arg-type]
