"""A forward that segfaults (reads address 0 through ctypes), like a native kernel gone wrong."""

import ctypes

from _base import build_before
from torch import Tensor


def _segfault(x: Tensor) -> None:
    if x.size(0) > 1:
        ctypes.string_at(0)


build = build_before(_segfault)
