"""Correct sharded attention (tests/good/sharded_gather.py) whose rank 1 misbehaves in forward
once tensor-parallel: it dies, hangs, raises or writes a 2 GiB frame length into its socket
(`frame`), as $ATTNSPEC_RANK_FAULT (or the file $ATTNSPEC_RANK_FAULT_FILE, read at each call)
says. Every rank that
shards writes its pid into $ATTNSPEC_RANK_PIDS (a directory), so tests can see none outlives
the run."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "good"))

import sharded_gather  # noqa: E402
from sharded_gather import (  # noqa: E402
    CP_LAYOUT,
    PROTOCOL,
    VARIANTS,
    WORLD_SIZES,
    build,
    export_weights,
    shard_positions,
)

__all__ = ["CP_LAYOUT", "PROTOCOL", "VARIANTS", "WORLD_SIZES", "build", "export_weights",
           "shard_heads", "shard_positions"]


class Faulty(nn.Module):
    def __init__(self, inner: nn.Module, rank: int) -> None:
        super().__init__()
        self.inner, self.rank = inner, rank

    def forward(self, x: Tensor) -> Tensor:
        path = os.environ.get("ATTNSPEC_RANK_FAULT_FILE")  # read at each call: tests switch it
        fault = Path(path).read_text().strip() if path else os.environ.get(
            "ATTNSPEC_RANK_FAULT", "")
        if self.rank == 1 and fault == "die":
            os._exit(3)
        if self.rank == 1 and fault == "hang":
            time.sleep(3600)
        if self.rank == 1 and fault == "frame":  # a 2 GiB frame length on attnspec's socket
            os.write(int(sys.argv[2]), (2**31).to_bytes(8, "little"))
            time.sleep(3600)
        if self.rank == 1 and fault == "raise":
            raise ValueError("rank 1 has no kernel for this shape")
        return self.inner(x)  # type: ignore[no-any-return]


def shard_heads(module: nn.Module, mesh: object) -> nn.Module:
    pids = os.environ.get("ATTNSPEC_RANK_PIDS")
    if pids:
        (Path(pids) / str(os.getpid())).touch()
    rank = mesh.get_local_rank()  # type: ignore[attr-defined]
    return Faulty(sharded_gather.shard_heads(module, mesh), rank)  # type: ignore[arg-type]
