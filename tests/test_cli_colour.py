"""Colour as terminal users expect it (issue 45): verdict words coloured on a terminal, never
with NO_COLOR set or when piped, always with FORCE_COLOR; the table's columns still line up."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

import pytest

from attnspec.common.report import PropertyResult, Report, wants_colour

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pty")
GREEN, RED, RESET = "\x1b[32m", "\x1b[31m", "\x1b[0m"


class _Tty:
    def isatty(self) -> bool:
        return True


def test_colour_follows_no_color_force_color_term_and_the_tty(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    assert wants_colour(_Tty()) and not wants_colour(object())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_colour(_Tty())
    monkeypatch.setenv("NO_COLOR", "")  # empty: as if unset (no-color.org)
    assert wants_colour(_Tty())
    monkeypatch.setenv("TERM", "dumb")
    assert not wants_colour(_Tty())
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert wants_colour(object())


def test_a_coloured_table_lines_up_as_the_plain_one() -> None:
    report = Report(target="t", header={}, properties=[
        PropertyResult(id="width", verdict="pass", examples=3),
        PropertyResult(id="causality", verdict="fail", examples=2, message="leak")])
    plain, rich = report.summary(), report.summary(colour=True)
    assert GREEN not in plain and RED not in plain
    assert f"{GREEN}pass{RESET}" in rich and f"{RED}fail{RESET}" in rich
    assert re.sub(r"\x1b\[\d+m", "", rich) == plain


def _run_on_a_pty(env: dict[str, str]) -> str:
    leader, follower = pty.openpty()
    done = subprocess.run(
        [sys.executable, "-m", "attnspec", "verify", "attnspec.subjects.reference", "--only",
         "width", "--max-examples", "3", "--no-database", "--no-progress", "--seed", "0"],
        stdout=follower, stderr=subprocess.DEVNULL, env=env, timeout=120, check=False)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the other end is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert done.returncode == 0
    return b"".join(chunks).decode()


@pytest.mark.slow
def test_verify_colours_its_verdicts_on_a_terminal_and_not_with_no_color() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env["TERM"] = "xterm"
    shown = _run_on_a_pty(env)
    assert f"{GREEN}pass{RESET}" in shown and f"{GREEN}conforms" in shown
    assert "\x1b[" not in _run_on_a_pty({**env, "NO_COLOR": "1"})
    piped = subprocess.run(
        [sys.executable, "-m", "attnspec", "verify", "attnspec.subjects.reference", "--only",
         "width", "--max-examples", "3", "--no-database", "--no-progress", "--seed", "0"],
        capture_output=True, text=True, env=env, timeout=120, check=False)
    assert piped.returncode == 0 and "\x1b[" not in piped.stdout
