"""Stops the second runner (lane 1, its worker's parent) with SIGSTOP from inside a forward:
the first runner must treat the silent lane as hung by the wall clock (a stopped process uses no
CPU), kill its process group, and run its pass itself, where this subject leaves its runner
alone."""

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
           "note": "lane 1 was lost (it was stopped (SIGSTOP, or a tracer) for 10 s"}


def _stop_lane(x: Tensor) -> None:
    parent = os.getppid()
    if Path(f"/proc/{parent}/comm").read_text().strip() == "attnspec-lane1":
        os.kill(parent, signal.SIGSTOP)


build = around(_stop_lane)
