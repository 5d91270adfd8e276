"""A correct subject that starts processes: build runs a multiprocessing child (a worker that
was a daemon could not have children), and `:sleeper` leaves a long `sleep` running, which must
not outlive the run. ATTNSPEC_TEST_PIDS names a file where the sleeper's pid is written."""

import multiprocessing
import os
import subprocess
from types import SimpleNamespace

from _base import export_weights, reference_build
from torch import nn

__all__ = ["build", "export_weights", "sleeper"]


def _noop() -> None:
    pass


def build(n_embd: int, n_head: int) -> nn.Module:
    child = multiprocessing.get_context("fork").Process(target=_noop)
    child.start()
    child.join()
    return reference_build(n_embd, n_head)


def _sleeper_build(n_embd: int, n_head: int) -> nn.Module:
    process = subprocess.Popen(["sleep", "600"])
    with open(os.environ["ATTNSPEC_TEST_PIDS"], "a") as pids:
        pids.write(f"{process.pid}\n")
    return reference_build(n_embd, n_head)


sleeper = SimpleNamespace(build=_sleeper_build, export_weights=export_weights)
