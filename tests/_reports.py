"""Waiting on a report that a running `attnspec verify` writes (from the start, status running)."""

from __future__ import annotations

import json
import time
from pathlib import Path


def first_verdict_written(path: Path, seconds: float = 120, *, any_property: bool = False,
                          ) -> None:
    """Wait until the report at `path` has its first property's verdict (`any_property`: any
    verdict; with two runners the longest pass starts first, so the first property may end
    last)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            verdicts = [p["verdict"] for p in json.loads(path.read_text())["properties"]]
            if any(v != "not_run" for v in (verdicts if any_property else verdicts[:1])):
                return
        except (OSError, ValueError):  # not there yet, or between writes
            pass
        time.sleep(0.2)
