"""A correct subject that tries to reach the runner from its worker, as a same-user process
can: write a forged verdict table into the runner's stdout through /proc/RUNNER/fd/1, open the
runner's memory for writing, and read its environment. It prints on stderr what it managed,
one `tampers: WHAT: ok|denied (...)` line each, so a test can tell that each attempt was made."""

import os
import sys

from _base import export_weights, reference_build
from torch import nn

__all__ = ["build", "export_weights"]

FORGED = "\nwidth  pass  FORGED-BY-THE-SUBJECT\n"


def _try(what: str, path: str, mode: str, data: str | None = None) -> None:
    try:
        with open(path, mode) as handle:
            if data is not None:
                handle.write(data)
        outcome = "ok"
    except OSError as error:
        outcome = f"denied ({type(error).__name__})"
    print(f"tampers: {what}: {outcome}", file=sys.stderr, flush=True)


def build(n_embd: int, n_head: int) -> nn.Module:
    runner = os.getppid()
    _try("stdout", f"/proc/{runner}/fd/1", "w", FORGED)
    _try("mem", f"/proc/{runner}/mem", "r+b")
    _try("environ", f"/proc/{runner}/environ", "rb")
    return reference_build(n_embd, n_head)
