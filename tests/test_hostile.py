"""Hostile subjects, round 4 (tests/hostile/): each file attacks the run from inside the subject
and says in HOSTILE what the run must still give: the exit status, the report's status, the
verdict of each property named, a message, and a wall-clock bound (the run's --timeout plus a
margin). Each runs through the command line, as a user would, with a tag in its environment
that every process it starts inherits; none may be left once the command has returned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from _catalogue import literal

ROOT = Path(__file__).parent.parent
HOSTILE = sorted(p for p in (Path(__file__).parent / "hostile").glob("*.py")
                 if not p.name.startswith("_"))
TIMEOUT = 10  # --timeout for every entry: what a hang must cost, at most, per example
MARGIN = 60  # start-up, the worker's restarts and a shared machine's noise

pytestmark = [pytest.mark.slow, pytest.mark.process,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="the tag is read from /proc")]


def _tagged(tag: str) -> list[int]:
    """Live processes whose environment holds the run's tag."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"ATTNSPEC_HOSTILE_TAG={tag}".encode() in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def test_the_catalogue_covers_each_class() -> None:
    assert len(HOSTILE) >= 8, [p.name for p in HOSTILE]


@pytest.mark.parametrize("path", HOSTILE, ids=[p.stem for p in HOSTILE])
def test_a_hostile_subject_gets_its_verdict_in_time_and_leaves_nothing(
        path: Path, tmp_path: Path) -> None:
    want: dict[str, Any] = literal(path, "HOSTILE")  # type: ignore[assignment]
    tag = uuid.uuid4().hex
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "ATTNSPEC_HOSTILE_TAG": tag,
           "ATTNSPEC_HOSTILE_DIR": str(tmp_path)}
    bound = want.get("within", TIMEOUT) + MARGIN
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "attnspec", "verify", str(path), "--seed", "0", "--timeout",
         str(want.get("timeout", TIMEOUT)), "--no-database", "--no-progress", "--report",
         str(report), *want["args"]],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        out, err = process.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"no verdict within {bound} s:\n{out[-2000:]}\n{err[-2000:]}")
    finally:
        time.sleep(0.5)  # a child the run killed at its end is reaped by then
        left = _tagged(tag)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    seconds = time.monotonic() - started
    shown = f"exit {process.returncode} after {seconds:.1f} s\n{out[-3000:]}\n{err[-2000:]}"
    assert not left, f"processes of the run left running: {left}\n{shown}"
    assert process.returncode == want["exit"], shown
    data = json.loads(report.read_text())
    assert data["status"] == want["status"], shown
    assert data["finished"] is want.get("finished", True), shown
    verdicts = {p["id"]: p for p in data["properties"]}
    for prop, verdict in want["verdicts"].items():
        assert verdicts[prop]["verdict"] == verdict, (prop, verdicts[prop]["message"], shown)
    for key, value in want.get("header", {}).items():
        assert data[key] == value, (key, data[key], shown)
    if "note" in want:  # what the run says of its runners: the lane lost, and why
        assert want["note"] in (data.get("workers_note") or ""), shown
    if "message" in want:
        prop, text = want["message"]
        assert text in verdicts[prop]["message"], (verdicts[prop]["message"], shown)
