"""Closes every inherited file descriptor above stderr at build, the worker's socket to its
runner among them: the worker can no longer answer; the run must say so as the subject's
failure, restart it, and go on, never wait for ever."""

import os

from _hostile import around, export_weights
from torch import nn

__all__ = ["build", "export_weights"]
HOSTILE = {"args": ["--only", "width", "--max-examples", "3", "--workers", "1"],
           "exit": 1, "status": "fail", "verdicts": {"width": "crash"}}


def build(n_embd: int, n_head: int) -> nn.Module:
    os.closerange(3, 65536)
    return around(lambda x: None)(n_embd, n_head)
