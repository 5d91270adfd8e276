"""Writes into its worker's end of attnspec's socket (the fd is in the worker's argv), as
$ATTNSPEC_SOCKET_FAULT says: `huge` (a frame length of 2 GiB, then a hang), `partial` (a
frame's length and 10 of its 1,000 bytes, then a hang), `garbage` (a whole frame of junk, then
the reference's answer), `forged` (a well-formed answer of its own, then the reference's), or
`load` (a 2 GiB length at import, then a hang)."""

import os
import struct
import sys
import time

from _base import build_before, export_weights
from torch import Tensor

__all__ = ["build", "export_weights"]

_FD = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else -1


def _write(fault: str) -> None:
    if fault in ("huge", "load"):
        os.write(_FD, struct.pack("<Q", 2**31))
    elif fault == "partial":
        os.write(_FD, struct.pack("<Q", 1000) + b"\1" * 10)
    elif fault == "garbage":
        os.write(_FD, struct.pack("<Q", 16) + b"\xff" * 16)
        return
    elif fault == "forged":
        from attnspec.runner.wire import encode

        message = encode({"kind": "error", "message": "forged"})
        os.write(_FD, struct.pack("<Q", len(message)) + message)
        return
    if fault:
        time.sleep(3600)


def _misbehave(x: Tensor) -> None:
    _write(os.environ.get("ATTNSPEC_SOCKET_FAULT", ""))


if os.environ.get("ATTNSPEC_SOCKET_FAULT") == "load" and _FD >= 0:
    _write("load")

build = build_before(_misbehave)
