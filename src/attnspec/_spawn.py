"""Starting a worker process, without importing torch.

`attnspec verify` starts its worker first thing, and tells it the TARGET at once, so that the
worker imports torch and loads the subject (transformers, for the HF built-ins) while the runner
imports its own; the runner's `Worker` then adopts the process if it would have said the same.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import struct
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["prestart", "spawn", "take"]

BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from attnspec._worker import main; "
        "main(int(sys.argv[2]), int(sys.argv[3]))")

Spawned = tuple["subprocess.Popen[bytes]", Connection]

# Started ahead, not yet adopted by a Worker, with the hello already sent to it (or None).
_waiting: list[tuple[Spawned, dict[str, Any] | None]] = []


def hello_bytes(hello: dict[str, Any]) -> bytes:
    """A hello in the wire format (_wire.encode's, for a message without tensors), torch-free."""
    header = json.dumps({"body": hello, "tensors": []}, allow_nan=True).encode()
    return struct.pack("<Q", len(header)) + header


def _open_fd(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def spawn() -> Spawned:
    """A new worker process in its own process group, and the runner's end of its socket."""
    ours, theirs = socket.socketpair()
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # The subject's prints go to stderr: stdout is the verdict table's.
    err: Any = None if _open_fd(2) else subprocess.DEVNULL
    out: Any = 2 if err is None else subprocess.DEVNULL
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", BOOT, package_parent, str(theirs.fileno()), str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, pass_fds=(theirs.fileno(),),
            start_new_session=True)  # its own process group, killed as one
    finally:
        theirs.close()
    return process, Connection(ours.detach())


def prestart(hello: dict[str, Any] | None = None) -> None:
    """Start one worker now, for the next `Worker` this process creates to adopt; with `hello`,
    send it at once, so that the subject loads while this process imports."""
    if _waiting:
        return
    process, conn = spawn()
    if hello is not None:
        try:
            conn.send_bytes(hello_bytes(hello))
        except OSError:
            hello = None  # it died already: the Worker will see, and start another
    _waiting.append(((process, conn), hello))


def take(hello: dict[str, Any]) -> tuple[Spawned, bool] | None:
    """The worker started ahead, if one is waiting and alive, and whether it was already sent
    this `hello`. One sent another hello (sys.path changed since) is stopped, not adopted."""
    while _waiting:
        (process, conn), sent = _waiting.pop()
        if process.poll() is None and sent in (None, hello):
            return (process, conn), sent is not None
        _stop((process, conn))
    return None


def _stop(spawned: Spawned) -> None:
    process, conn = spawned
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    conn.close()


@atexit.register
def _kill_waiting() -> None:
    """A worker started ahead and never adopted (the run stopped early) goes with the runner."""
    while _waiting:
        _stop(_waiting.pop()[0])
