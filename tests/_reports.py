"""Waiting on a report that a running `attnspec verify` writes (from the start, status running)."""

from __future__ import annotations

import json
import time
from pathlib import Path


def first_verdict_written(path: Path, seconds: float = 120) -> None:
    """Wait until the report at `path` has its first property's verdict."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if json.loads(path.read_text())["properties"][0]["verdict"] != "not_run":
                return
        except (OSError, ValueError):  # not there yet, or between writes
            pass
        time.sleep(0.2)
