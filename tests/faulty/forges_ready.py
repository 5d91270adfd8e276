"""A subject that, while it loads, writes a forged "ready" into attnspec's pipe: a supported
grid whose pair has one number (once "not enough values to unpack", and no report)."""

import os
import struct
import sys

from _base import export_weights, reference_build

from attnspec.runner.wire import encode

__all__ = ["build", "export_weights"]

build = reference_build

if sys.argv[0] == "-c":  # in attnspec's worker, whose socket is sys.argv[2]
    _data = encode({"kind": "ready", "info": {
        "name": "forged", "origin": "forged", "has_export": True, "dtypes": None,
        "supported": [[8]], "cuda": False}})
    os.write(int(sys.argv[2]), struct.pack("<Q", len(_data)) + _data)
