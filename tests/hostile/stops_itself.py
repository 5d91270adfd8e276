"""Sends itself SIGSTOP once T > 2: a stopped worker uses no CPU, so only a wall clock sees it;
the runner must call it a hang at --timeout, kill it and go on."""

import os
import signal

from _hostile import around, export_weights
from torch import Tensor

__all__ = ["build", "export_weights"]
HOSTILE = {"args": ["--only", "width,divisibility", "--max-examples", "5", "--workers", "1"],
           "timeout": 3, "exit": 1, "status": "fail",
           "verdicts": {"width": "timeout", "divisibility": "pass"},
           "message": ["width", "no answer within --timeout 3 s"]}


def _stop(x: Tensor) -> None:
    if x.size(1) > 2:
        os.kill(os.getpid(), signal.SIGSTOP)


build = around(_stop)
