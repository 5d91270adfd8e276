"""The kernel catalogue's shared code (tests/kernels/_common.py), for the subjects beside this file.

It is loaded under a name of its own because the module catalogue's tests/broken/_common.py is
imported as `_common` too, and one process (the catalogue test, a worker) may hold both.
good/_kernel.py is this same file, so whichever of the two a process imports first serves both.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_NAME = "attnspec_kernel_catalogue_common"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        _NAME, Path(__file__).resolve().parent.parent / "_common.py")
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _module
    _spec.loader.exec_module(_module)
common = sys.modules[_NAME]

ALL_FEATURES = common.ALL_FEATURES
NEG_INF = common.NEG_INF
PROTOCOL = common.PROTOCOL
Blockwise = common.Blockwise
Kernel = common.Kernel
Problem = common.Problem
bind = common.bind
bind_cache = common.bind_cache
fail = common.fail
