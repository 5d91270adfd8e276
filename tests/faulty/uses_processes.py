"""A correct subject that starts processes: build runs a multiprocessing child (a worker that
was a daemon could not have children), and `:sleeper` leaves two long `sleep`s running, one in
the worker's group at every build and one detached from it (setsid and a double fork, as a
daemon escapes) once per process, none of which may outlive the run.
ATTNSPEC_TEST_PIDS names a file where their pids go."""

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


def _detached_sleep() -> int:
    """`sleep 600` in a session of its own whose parent has exited: the pid."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.setsid()
        grandchild = os.fork()
        if grandchild == 0:
            os.execvp("sleep", ["sleep", "600"])
        os.write(write, str(grandchild).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    pid = int(os.read(read, 32))
    os.close(read)
    return pid


_detached: list[int] = []  # once per worker process, so a SIGKILL cannot land mid-fork


def _sleeper_build(n_embd: int, n_head: int) -> nn.Module:
    process = subprocess.Popen(["sleep", "600"])
    started = [process.pid]
    if not _detached:
        _detached.append(_detached_sleep())
        started += _detached
    with open(os.environ["ATTNSPEC_TEST_PIDS"], "a") as pids:
        pids.write("".join(f"{pid}\n" for pid in started))
    return reference_build(n_embd, n_head)


sleeper = SimpleNamespace(build=_sleeper_build, export_weights=export_weights)
