"""Kills the second runner (lane 1, its worker's parent) with SIGKILL from inside a forward: the
first runner must see the lane gone, reap it, and run its pass itself, where this subject leaves
its runner alone; the killed lane's worker must not outlive the run."""

import os
import signal
from pathlib import Path

from _hostile import around, export_weights
from torch import Tensor

__all__ = ["build", "export_weights"]
HOSTILE = {"args": ["--only", "width,causality,determinism", "--max-examples", "5",
                    "--workers", "2"],
           "exit": 0, "status": "pass",
           "verdicts": {"width": "pass", "causality": "pass", "determinism": "pass"},
           "note": "lane 1 was lost (it ended: killed by SIGKILL)"}


def _kill_lane(x: Tensor) -> None:
    parent = os.getppid()
    if Path(f"/proc/{parent}/comm").read_text().strip() == "attnspec-lane1":
        os.kill(parent, signal.SIGKILL)


build = around(_kill_lane)
