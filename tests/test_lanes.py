"""More than one runner (`--workers N`, session/lanes.py): the same verdicts as one runner, the
same stop at the first failure, Ctrl-C and a lost runner handled, bad values refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import attnspec
from attnspec import UsageError
from attnspec.common.options import RunOptions
from attnspec.session.engine import Session
from attnspec.session.verdicts import HALTED

HERE = Path(__file__).parent
ROOT = HERE.parent

pytestmark = [pytest.mark.slow, pytest.mark.process]


def _verify(*args: str, report: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "attnspec", "verify", *args, "--no-database",
                           "--no-progress", "--report", str(report)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def _without_times(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in p.items() if k != "seconds"} for p in report["properties"]]


@pytest.mark.parametrize("target", ["attnspec.subjects.reference", "tests/broken/no_scale.py",
                                    "tests/kernels/broken/lse_base2_declared_natural.py"])
def test_two_runners_give_what_one_gives_example_for_example(target: str,
                                                              tmp_path: Path) -> None:
    """Each pass's draws depend on the seed and the property alone, so which runner ran it
    changes nothing: the same verdicts, examples, coverage, messages and counterexamples."""
    reports = {}
    for workers in (1, 2):
        path = tmp_path / f"w{workers}.json"
        done = _verify(target, "--seed", "3", "--max-examples", "14", "--workers",
                       str(workers), report=path)
        assert done.returncode in (0, 1), done.stderr
        assert "Traceback" not in done.stderr
        reports[workers] = json.loads(path.read_text())
        assert reports[workers]["workers"] == workers
    assert reports[1]["status"] == reports[2]["status"]
    assert _without_times(reports[1]) == _without_times(reports[2])
    if target != "attnspec.subjects.reference":
        assert reports[1]["status"] == "fail"  # so the failures were compared too


def test_exitfirst_stops_every_runner_at_the_first_failure(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    done = _verify("tests/broken/mask_off_by_one.py", "--seed", "0", "-x", "--workers", "2",
                   report=path)
    assert done.returncode == 1, done.stderr
    saved = json.loads(path.read_text())
    verdicts = {p["id"]: p["verdict"] for p in saved["properties"]}
    failed = [k for k, v in verdicts.items() if v not in ("pass", "skip", "not_run")]
    # The first failure, and at most one more: the other runner's pass under way at the time.
    assert 1 <= len(failed) <= 2, verdicts
    assert "not_run" in verdicts.values() and saved["partial"] is True
    assert "Traceback" not in done.stderr


def test_a_pass_halted_by_another_propertys_failure_is_no_verdict() -> None:
    """What a runner's pass does when another runner's failure stops the run (-x)."""
    with Session("attnspec.subjects.reference", RunOptions(max_examples=20, seed=0,
                                                           database=False)) as session:
        def halt_after_three(prop: str, done: int, total: int, result: object) -> None:
            if done >= 3:
                session.halted = True

        found = session.run("causality", halt_after_three)
        assert found.verdict == "not_run" and not found.ok
        assert found.message.startswith(HALTED), found.message
        assert found.examples == 3, found.examples
        assert session.run("width").verdict == "not_run"  # and none starts after it


def _slow_run(path: Path, *args: str, only: str = "width,dtype,determinism",
              **popen: Any) -> subprocess.Popen[str]:
    """`attnspec verify` of tests/faulty/slow.py (each forward sleeps) on two runners."""
    return subprocess.Popen(
        [sys.executable, "-m", "attnspec", "verify", "tests/faulty/slow.py", "--no-database",
         "--only", only, "--workers", "2", "--report", str(path), *args],
        cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, **popen)


def _ctrl_c_answered() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _lane_pids(parent: int) -> list[int]:
    """The runners forked from `parent`: its children named attnspec-lane1, 2, ... (its
    zygote and the workers it forked run the same command line)."""
    def comm(pid: int | str) -> str:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return ""

    try:
        kids = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except OSError:
        return []
    return [int(k) for k in kids if comm(k).startswith("attnspec-lane")]


def _wait_for_lane(process: subprocess.Popen[str], seconds: float = 120) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lanes = _lane_pids(process.pid)
        if lanes and Path(f"/proc/{lanes[0]}/task/{lanes[0]}/children").read_text().split():
            return lanes[0]  # forked, and its worker started
        time.sleep(0.05)
    pytest.fail("no second runner was forked")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="lanes are Linux only")
def test_ctrl_c_stops_every_runner_and_keeps_what_each_found(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    # Its own group: Ctrl-C as a terminal sends it, to every runner.
    process = _slow_run(path, "--max-examples", "30", only="width,dtype,determinism,finite",
                        preexec_fn=_ctrl_c_answered, start_new_session=True)
    lane = _wait_for_lane(process)
    time.sleep(2.0)  # both runners into their examples (each forward sleeps 0.2 s)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    saved = json.loads(path.read_text())
    assert saved["status"] == "interrupted" and saved["partial"] is True
    verdicts = [p["verdict"] for p in saved["properties"]]
    assert set(verdicts) <= {"pass", "skip", "interrupted", "not_run"}, verdicts
    assert sum(p["examples"] for p in saved["properties"]
               if p["verdict"] == "interrupted") > 0  # what the passes had run is kept
    assert "Traceback" not in stderr
    assert not Path(f"/proc/{lane}").exists() or b"zombie" in Path(
        f"/proc/{lane}/status").read_bytes().lower()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="lanes are Linux only")
def test_a_runner_that_is_killed_gives_its_pass_back(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    process = _slow_run(path, "--max-examples", "12", "--seed", "0")
    lane = _wait_for_lane(process)
    time.sleep(1.5)  # loaded, and into a pass
    os.kill(lane, signal.SIGKILL)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    saved = json.loads(path.read_text())
    assert saved["status"] == "pass"
    assert [p["verdict"] for p in saved["properties"]] == ["pass"] * 3
    assert all(p["examples"] == 12 for p in saved["properties"])
    assert "lane 1 was lost" in saved["workers_note"] and "SIGKILL" in saved["workers_note"]


@pytest.mark.parametrize("workers", [0, 17, "2", True, 1.5])
def test_a_workers_value_that_is_not_a_count_is_refused(workers: Any) -> None:
    with pytest.raises(UsageError, match="workers=.*must be a whole number from 1 to 16"):
        attnspec.verify("attnspec.subjects.reference", workers=workers)


def test_more_runners_for_a_subject_in_this_process_are_refused() -> None:
    from attnspec.subjects import reference

    with pytest.raises(UsageError, match="give a TARGET string, or workers=1"):
        attnspec.verify(reference, workers=2)


def test_the_cli_names_the_flag() -> None:
    done = subprocess.run([sys.executable, "-m", "attnspec", "verify",
                           "attnspec.subjects.reference", "--workers", "0"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2
    assert "--workers 0: must be a whole number from 1 to 16" in done.stderr
    assert "Traceback" not in done.stderr


def test_with_other_threads_running_one_runner_is_used_and_the_report_says_why() -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        report = attnspec.verify("attnspec.subjects.reference", only="width,dtype",
                                 max_examples=3, seed=0, database=False, workers=2)
    finally:
        stop.set()
    assert report.ok, report.summary()
    assert report.header["workers"] == 1
    assert "one runner, not 2" in report.header["workers_note"]
    assert "threads" in report.header["workers_note"]


def test_exitfirst_takes_one_runner_unless_told_otherwise() -> None:
    """-x mostly stops within the quick passes, before a second runner would have loaded."""
    report = attnspec.verify("attnspec.subjects.reference", only="width,dtype", max_examples=3,
                             seed=0, database=False, exitfirst=True)
    assert report.ok and report.header["workers"] == 1
    assert "workers_note" not in report.header


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="lanes are Linux only")
def test_a_signal_from_outside_the_run_loses_the_runner_not_the_pass(tmp_path: Path) -> None:
    """SIGINT to the second runner alone (a same-user subject can send it): not this run's
    Ctrl-C, so the pass it cut short runs again, and the run still ends with every verdict."""
    path = tmp_path / "r.json"
    process = _slow_run(path, "--max-examples", "12", "--seed", "0")
    lane = _wait_for_lane(process)
    time.sleep(1.5)
    os.kill(lane, signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    saved = json.loads(path.read_text())
    assert saved["status"] == "pass"
    assert [p["examples"] for p in saved["properties"]] == [12, 12, 12]
    assert "interrupted by a signal this run did not send" in saved["workers_note"]


_RAISING_CALLBACK = """
import threading, attnspec
def progress(prop, done, total, result):
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("the caller's callback broke")
try:
    attnspec.verify("tests/faulty/slow.py", only="width,dtype,determinism", max_examples=12,
                    seed=0, database=False, workers=2, progress=progress)
except RuntimeError as error:
    print("raised:", error)
"""


def test_a_progress_callback_that_raises_in_a_runners_thread_ends_the_run_with_its_error(
) -> None:
    done = subprocess.run([sys.executable, "-c", _RAISING_CALLBACK], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "raised: the caller's callback broke" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("data, says", [
    ({"id": "width", "verdict": "pass", "seconds": "1"}, "seconds is str"),
    ({"id": "width", "verdict": "passed"}, "verdict 'passed'"),
    ({"id": "width", "bogus": 1}, "not one"),
    (["width"], "not one"),
    ({"id": "width", "examples": True}, "examples is bool"),
])
def test_a_result_from_a_runner_is_checked_before_it_counts(data: Any, says: str) -> None:
    from attnspec.session.lanes import LaneLost, result_from

    with pytest.raises(LaneLost, match=says):
        result_from(data, "1")
    assert result_from({"id": "width", "verdict": "pass", "examples": 3}, "1").examples == 3


_SILENT_LANE = """
import os, signal, attnspec
from attnspec.session import lanes, run
run.lane_silence = lambda timeout: 3.0
forked = []
start = lanes.Lane.__init__
def recording(self, *args, **kwargs):
    start(self, *args, **kwargs)
    forked.append(self.pid)
lanes.Lane.__init__ = recording
def progress(prop, done, total, result):
    if forked and done >= 1:
        os.kill(forked.pop(), signal.SIGSTOP)  # the lane hangs: it is alive, and says nothing
report = attnspec.verify("tests/faulty/slow.py", only="width,dtype,determinism",
                         max_examples=12, seed=0, database=False, workers=2, progress=progress)
print("status", report.ok, [p.examples for p in report.properties])
print("note", report.header.get("workers_note"))
"""


def test_a_runner_that_goes_silent_is_killed_at_its_deadline_and_its_pass_run_again() -> None:
    done = subprocess.run([sys.executable, "-c", _SILENT_LANE], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "status True [12, 12, 12]" in done.stdout, done.stdout + done.stderr
    assert "it sent nothing for 3 s, and was killed" in done.stdout, done.stdout


def test_full_passes_start_longest_first_by_their_quick_pass() -> None:
    """The pass whose quick pass took longest starts first: fresh_results (a third of a
    kernel's verify) started last left the other runner idle for 3 of its 7 s."""
    from types import SimpleNamespace

    from attnspec.common.report import PropertyResult
    from attnspec.session.lanes import Passes

    props = ["width", "oracle", "fresh_results", "causality"]
    session = SimpleNamespace(twinned=set(), workers=SimpleNamespace(twin=None))
    result = SimpleNamespace(properties=[PropertyResult(id=p) for p in props], failures=[])
    other = SimpleNamespace(name="1")  # a second runner, never started: the order is the test
    passes = Passes(session, props, result, lambda: None, None, False, 10, [other])  # type: ignore[arg-type, list-item]
    for seconds in (0.05, 0.12, 0.13, 0.02):
        job = passes._next("here")
        assert job is not None and job[1] == "quick"
        passes._done("here", job[0], "quick", PropertyResult(id=props[job[0]], verdict="pass",
                                                             examples=10, seconds=seconds))
    order = []
    while (job := passes._next("here")) is not None:
        order.append(props[job[0]])
        passes._done("here", job[0], "full", PropertyResult(id=props[job[0]], verdict="pass"))
    assert order == ["fresh_results", "oracle", "width", "causality"]
