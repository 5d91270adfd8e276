"""Stops the runner's zygote (the process workers are forked from) with SIGSTOP at build, then
crashes its worker on the first T > 4: the next worker must still come (exec'd, if the zygote
does not answer), and the run must end with its verdicts."""

import os
import signal
from pathlib import Path

from _hostile import around, export_weights
from torch import Tensor, nn

__all__ = ["build", "export_weights"]
HOSTILE = {"args": ["--only", "width,divisibility", "--max-examples", "5", "--workers", "1"],
           "exit": 1, "status": "fail", "verdicts": {"width": "crash", "divisibility": "pass"}}


def _stop_zygotes() -> None:
    runner = os.getppid()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            comm = (entry / "comm").read_text().strip()
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if comm == "attnspec-zygote" and parent == runner:
            os.kill(int(entry.name), signal.SIGSTOP)


def _crash(x: Tensor) -> None:
    if x.size(1) > 4:
        os._exit(3)


def build(n_embd: int, n_head: int) -> nn.Module:
    _stop_zygotes()
    return around(_crash)(n_embd, n_head)
