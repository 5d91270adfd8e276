"""aborts.py, which then fails to import when the worker restarts (a kernel cache that a crash
left corrupt). ATTNSPEC_TEST_LOADED names a file that marks the first load."""

import os

from _base import export_weights
from aborts import build

__all__ = ["build", "export_weights"]

_marker = os.environ["ATTNSPEC_TEST_LOADED"]
if os.path.exists(_marker):
    raise ImportError("kernel cache corrupt: delete it and rebuild")
with open(_marker, "w"):
    pass
