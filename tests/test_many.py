"""Many targets in one command (`attnspec verify T1 T2 DIR`, `verify_many`): one JSONL line per
target, verdicts as one-target runs give them, a killed run loses only what was in flight and
--resume finishes it, a judge that dies is run once more and then reported, misuse exits 2."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import attnspec

pytestmark = [pytest.mark.process, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent
# Few examples of few properties: these tests are about the many-target machinery.
FAST = ["--profile", "smoke", "--only", "width,causality,oracle", "--seed", "0",
        "--no-database", "--no-progress"]
OPTIONS = {"profile": "smoke", "only": ["width", "causality", "oracle"], "seed": 0,
           "database": False}


def _folder(tmp_path: Path, *, broken: bool = True, dying: bool = False) -> Path:
    folder = tmp_path / "candidates"
    folder.mkdir()
    shutil.copy(ROOT / "good" / "einops_heads.py", folder / "good_einops.py")
    shutil.copy(ROOT / "good" / "blocked_online_softmax.py", folder / "good_blocked.py")
    if broken:
        shutil.copy(ROOT / "broken" / "_common.py", folder / "_common.py")
        shutil.copy(ROOT / "broken" / "global_mean_leak.py", folder / "leaks.py")
    if dying:
        shutil.copy(ROOT / "many" / "kills_its_judge.py", folder / "kills_its_judge.py")
    (folder / "notes.py").write_text("WHAT = 'not a subject'\n")
    return folder


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "attnspec", "verify", *args],
                          capture_output=True, text=True, timeout=timeout)


def _lines(path: Path) -> list[dict[str, object]]:
    text = path.read_text()
    assert text.endswith("\n"), "a JSONL report never ends with half a line"
    return [json.loads(raw) for raw in text.splitlines()]


def test_a_folder_gives_one_line_per_target_with_the_verdicts_one_target_runs_give(
        tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    report = tmp_path / "out.jsonl"
    done = _cli(str(folder), *FAST, "--report", str(report), "--jobs", "2")
    assert done.returncode == 1, done.stdout + done.stderr  # one fails
    assert f"skipped {folder / 'notes.py'}: defines no build" in done.stdout
    assert f"skipped {folder / '_common.py'}: a private module" in done.stdout
    assert "2 conforms, 1 fails in" in done.stdout
    lines = {Path(str(line["target"])).name: line for line in _lines(report)}
    assert sorted(lines) == ["good_blocked.py", "good_einops.py", "leaks.py"]
    for name, line in lines.items():
        assert line["key"] == hashlib.sha256((folder / name).read_bytes()).hexdigest()
        assert line["attempts"] == 1 and line["schema"] == "attnspec-many/1"
        alone = attnspec.verify(str(folder / name), **OPTIONS)  # type: ignore[arg-type]
        assert line["properties"] == {p.id: p.verdict for p in alone.properties}, name
        assert line["status"] == {"pass": "conforms", "fail": "fails"}[alone.status]
    failures = {f["id"]: f for f in lines["leaks.py"]["failures"]}  # type: ignore[attr-defined]
    assert "--replay" in failures["causality"]["replay"]


def test_a_killed_run_loses_only_what_was_under_way_and_resume_finishes_it(
        tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    report = tmp_path / "out.jsonl"
    run = subprocess.Popen([sys.executable, "-m", "attnspec", "verify", str(folder), *FAST,
                            "--report", str(report), "--jobs", "1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not report.exists() or not report.read_text()):
        time.sleep(0.05)
    run.kill()  # SIGKILL: no handler runs; what is in the file is all there is
    run.wait()
    kept = _lines(report)
    assert 1 <= len(kept) < 3
    with report.open("a") as handle:  # and a line cut short, as a full disk would leave it
        handle.write('{"schema": "attnspec-many/1", "tar')
    done = _cli(str(folder), *FAST, "--report", str(report), "--resume")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{len(kept)} already judged (--resume" in done.stdout
    assert "were not verdicts (cut short or not JSON)" in done.stderr
    lines = _lines(report)
    assert sorted(Path(str(line["target"])).name for line in lines) == [
        "good_blocked.py", "good_einops.py", "leaks.py"]  # each exactly once
    assert lines[:len(kept)] == kept
    again = _cli(str(folder), *FAST, "--report", str(report), "--resume")
    assert "3 already judged" in again.stdout and _lines(report) == lines


def test_a_judge_that_dies_is_run_again_then_reported_and_the_others_go_on(
        tmp_path: Path) -> None:
    folder = _folder(tmp_path, broken=False, dying=True)
    report = tmp_path / "out.jsonl"
    done = _cli(str(folder), *FAST, "--report", str(report))
    assert done.returncode == 1, done.stdout + done.stderr
    lines = {Path(str(line["target"])).name: line for line in _lines(report)}
    dying = lines["kills_its_judge.py"]
    assert dying["status"] == "error" and dying["attempts"] == 2
    assert "the judge ended without a verdict (killed by SIGKILL), on each of 2 tries" in str(
        dying["conclusion"])
    assert lines["good_einops.py"]["status"] == lines["good_blocked.py"]["status"] == "conforms"


def test_a_stop_signal_ends_the_run_with_its_lines_kept(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    report = tmp_path / "out.jsonl"
    run = subprocess.Popen([sys.executable, "-m", "attnspec", "verify", str(folder), *FAST,
                            "--report", str(report), "--jobs", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not report.exists() or not report.read_text()):
        time.sleep(0.05)
    run.send_signal(signal.SIGTERM)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM, out + err
    assert "interrupted by SIGTERM" in err and "--resume continues" in err
    assert 1 <= len(_lines(report)) < 3


def test_misuse_of_many_targets_exits_2_saying_why(tmp_path: Path) -> None:
    folder = _folder(tmp_path, broken=False)
    report = tmp_path / "out.jsonl"
    report.write_text("")
    done = _cli(str(folder), *FAST, "--report", str(report))
    assert done.returncode == 2
    assert "exists: --resume continues it" in done.stderr
    done = _cli(str(folder), str(folder / "good_einops.py"), "--html", "x.html")
    assert done.returncode == 2 and "--html: an option of one target's run" in done.stderr
    report.write_text(json.dumps({"schema": "attnspec-many/1", "key": "x", "options": "0"})
                      + "\n")
    done = _cli(str(folder), *FAST, "--report", str(report), "--resume")
    assert done.returncode == 2 and "was written with other options" in done.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    done = _cli(str(empty))
    assert done.returncode == 2 and "holds no .py file to judge" in done.stderr


def test_the_ray_engine_without_ray_says_how_to_install_it(tmp_path: Path) -> None:
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "ray.py").write_text("raise ImportError('no ray here')\n")
    folder = _folder(tmp_path, broken=False)
    done = subprocess.run([sys.executable, "-m", "attnspec", "verify", str(folder), *FAST,
                           "--engine", "ray"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(hide)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: --engine ray: Ray is not installed here: pip install 'attnspec[ray]'" in \
        done.stderr


def test_report_dash_gives_the_lines_on_stdout(tmp_path: Path) -> None:
    folder = _folder(tmp_path, broken=False)
    done = _cli(str(folder), *FAST, "--report", "-")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(raw) for raw in done.stdout.splitlines()]
    assert sorted(str(line["status"]) for line in lines) == ["conforms", "conforms"]
    assert "2 conforms in" in done.stderr


def test_verify_many_yields_each_line_and_runs_where_the_caller_has_threads(
        tmp_path: Path) -> None:
    folder = _folder(tmp_path, broken=False)
    release = threading.Event()
    other = threading.Thread(target=release.wait)  # a caller's thread: judges are exec'd
    other.start()
    try:
        lines = list(attnspec.verify_many([str(folder)], jobs=2, **OPTIONS))
    finally:
        release.set()
        other.join()
    assert sorted(Path(str(line["target"])).name for line in lines) == [
        "good_blocked.py", "good_einops.py"]
    assert {line["status"] for line in lines} == {"conforms"}
    with pytest.raises(attnspec.UsageError, match="report, replay, progress"):
        next(attnspec.verify_many([str(folder)], replay={}))


HOSTILE = sorted(p for p in (ROOT / "hostile").glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("path", HOSTILE, ids=[p.stem for p in HOSTILE])
def test_a_hostile_subject_among_many_gets_its_verdict_and_leaves_nothing(
        path: Path, tmp_path: Path) -> None:
    from _catalogue import literal
    from test_hostile import MARGIN, TIMEOUT, _tagged

    want: dict[str, Any] = literal(path, "HOSTILE")  # type: ignore[assignment]
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(path, folder / path.name)
    shutil.copy(ROOT / "hostile" / "_hostile.py", folder / "_hostile.py")
    tag, report = uuid.uuid4().hex, tmp_path / "out.jsonl"
    env = {**os.environ, "ATTNSPEC_HOSTILE_TAG": tag, "ATTNSPEC_HOSTILE_DIR": str(tmp_path)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "attnspec", "verify", str(folder), "--seed", "0",
             "--timeout", str(want.get("timeout", TIMEOUT)), "--no-database", "--no-progress",
             "--report", str(report), *want["args"]],
            env=env, capture_output=True, text=True, timeout=2 * (TIMEOUT + MARGIN))
    finally:
        time.sleep(0.5)  # a child the run killed at its end is reaped by then
        left = _tagged(tag)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    shown = f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    assert not left, f"processes of the run left running: {left}\n{shown}"
    (line,) = _lines(report)
    if want["exit"] < 0:  # it killed its runner: here its judge, which is run once more
        assert line["attempts"] == 2, shown
        return
    assert line["attempts"] == 1, shown
    assert line["status"] == {"pass": "conforms", "fail": "fails"}[want["status"]], shown
    for prop, verdict in want["verdicts"].items():
        assert line["properties"][prop] == verdict, (prop, shown)  # type: ignore[index]
