"""Kills its runner (the worker's parent) with SIGKILL once the run has made CALLS forward calls
(counted in a file, across workers): nothing in the runner can write again, so the report must
already say what it is, `partial` with `"finished": false`, and keep the verdicts it finished."""

import os
import signal

from _hostile import around, export_weights, tag_dir
from torch import Tensor

__all__ = ["build", "export_weights"]
CALLS = 8  # width takes 5 (one per example), determinism 10: killed in determinism
HOSTILE = {"args": ["--only", "width,determinism", "--workers", "1", "--max-examples", "5"],
           "exit": -9, "status": "partial", "finished": False,  # -9: killed by SIGKILL
           "verdicts": {"width": "pass"}}


def _count_then_kill(x: Tensor) -> None:
    with open(tag_dir() / "calls", "a+") as calls:
        calls.write(".")
        calls.seek(0)
        if len(calls.read()) == CALLS:
            os.kill(os.getppid(), signal.SIGKILL)


build = around(_count_then_kill)
