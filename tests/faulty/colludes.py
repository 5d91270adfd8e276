"""Sharded attention whose ranks are 1.5x off, and whose unsharded module copies their error
while ranks are alive: ranks write a marker as soon as they have joined their process group,
and the unsharded module, asked for gradients while a marker's rank lives, gives 1.5x too. So
the ranks always agree with the unsharded run made beside them; oracle, run before any rank
starts, passes. ATTNSPEC_TEST_COLLUDE names the folder the markers go in."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "good"))

import sharded_gather  # noqa: E402
from sharded_gather import PROTOCOL, VARIANTS, export_weights  # noqa: E402

__all__ = ["PROTOCOL", "VARIANTS", "WORLD_SIZES", "build", "export_weights", "shard_heads",
           "shard_positions"]

WORLD_SIZES = (2,)
_MARKS = Path(os.environ.get("ATTNSPEC_TEST_COLLUDE", "/tmp")) / f"colludes-{os.getppid()}"


def _mark_when_a_rank() -> None:
    import torch.distributed as td

    while not td.is_initialized():
        time.sleep(0.005)
    _MARKS.mkdir(parents=True, exist_ok=True)
    (_MARKS / str(os.getpid())).touch()


def _ranks_alive() -> bool:
    return _MARKS.is_dir() and any(Path(f"/proc/{p.name}").exists() for p in _MARKS.iterdir())


threading.Thread(target=_mark_when_a_rank, daemon=True).start()


class Colluding(sharded_gather.Gathered):
    def forward(self, x: Tensor) -> Tensor:
        import torch.distributed as td

        out = super().forward(x)
        if td.is_initialized() or (torch.is_grad_enabled() and x.requires_grad
                                   and _ranks_alive()):
            return out * 1.5
        return out


def build(spec: object) -> nn.Module:
    return Colluding(spec)  # type: ignore[arg-type]


def shard_heads(module: nn.Module, mesh: object) -> nn.Module:
    return sharded_gather.shard_heads(module, mesh)  # type: ignore[arg-type]


def shard_positions(module: nn.Module, mesh: object) -> nn.Module:
    return sharded_gather.shard_positions(module, mesh)  # type: ignore[arg-type]
