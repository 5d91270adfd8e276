"""Under pytest-xdist, each worker computes on one torch thread: two workers on two cores each
spinning two threads made the wide examples (C up to 512) several times slower."""

from __future__ import annotations

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)
