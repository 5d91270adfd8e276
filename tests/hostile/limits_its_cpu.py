"""Sets RLIMIT_CPU to 1 s at build: the kernel kills the worker with SIGXCPU once it has used a
second of CPU, and every worker after it does the same. The run must give a verdict (a crash,
named by its signal) and not keep restarting for ever."""

import resource

from _hostile import around, export_weights
from torch import Tensor, nn

__all__ = ["build", "export_weights"]
HOSTILE = {"args": ["--only", "width", "--max-examples", "30", "--max-seq", "64",
                    "--workers", "1"],
           "exit": 1, "status": "fail", "verdicts": {"width": "crash"},
           "message": ["width", "SIGXCPU"]}

_inner = around(lambda x: None)


def _burn(x: Tensor) -> None:
    deadline = 0
    while deadline < 10**8:  # CPU time, so that the limit is reached on any machine
        deadline += 1


def build(n_embd: int, n_head: int) -> nn.Module:
    resource.setrlimit(resource.RLIMIT_CPU, (1, 5))  # SIGXCPU at 1 s, SIGKILL at 5
    return around(_burn)(n_embd, n_head)
