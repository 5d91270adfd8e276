"""Starting a worker process, without importing torch.

`attnspec verify` starts its worker first thing, so that the worker's import of torch runs
while the runner imports its own; the runner's `Worker` then adopts the process.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .isolation import WorkerUser

__all__ = ["prestart", "spawn", "take", "worker_env"]

BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from attnspec.runner.worker import main; "
        "main(int(sys.argv[2]), int(sys.argv[3]))")

Spawned = tuple["subprocess.Popen[bytes]", socket.socket]

_waiting: list[Spawned] = []  # started ahead, not yet adopted by a Worker


def _open_fd(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def worker_env(environ: dict[str, str]) -> dict[str, str]:
    """The worker's environment: the runner's, with OpenMP's idle threads asleep unless the user
    said otherwise. Spinning (libgomp's default), a waiting worker's idle thread takes the core
    the runner draws on: 45% more CPU for a default verify on 2 cores, same results."""
    return {**environ, "OMP_WAIT_POLICY": environ.get("OMP_WAIT_POLICY", "PASSIVE")}


def spawn(user: WorkerUser | None = None) -> Spawned:
    """A new worker process in its own process group, and the runner's end of its socket; run
    as `user` where given (a root runner), with a HOME of that user's own."""
    ours, theirs = socket.socketpair()
    env = worker_env(dict(os.environ))
    account: dict[str, Any] = {}
    if user is not None:
        env["HOME"], env["USER"], env["LOGNAME"] = user.home, user.name, user.name
        account = {"user": user.uid, "group": user.gid, "extra_groups": []}
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # The subject's prints go to stderr: stdout is the verdict table's.
    err: Any = None if _open_fd(2) else subprocess.DEVNULL
    out: Any = 2 if err is None else subprocess.DEVNULL
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", BOOT, package_parent, str(theirs.fileno()), str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, pass_fds=(theirs.fileno(),),
            env=env, start_new_session=True, **account)  # its own process group, killed as one
    finally:
        theirs.close()
    return process, ours


def prestart() -> None:
    """Start one worker now, for the next `Worker` this process creates to adopt."""
    if not _waiting:
        _waiting.append(spawn())


def take() -> Spawned | None:
    """The worker started ahead, if one is waiting and still alive."""
    while _waiting:
        process, conn = _waiting.pop()
        if process.poll() is None:
            return process, conn
        conn.close()
    return None


@atexit.register
def _kill_waiting() -> None:
    """A worker started ahead and never adopted (the run stopped early) goes with the runner."""
    while _waiting:
        process, conn = _waiting.pop()
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
        conn.close()
