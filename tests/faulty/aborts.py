"""A forward that kills its own process (os.abort) once T > 3, like a failed native assert."""

import os

from _base import build_before
from torch import Tensor


def _abort(x: Tensor) -> None:
    if x.size(1) > 3:
        os.abort()


build = build_before(_abort)
