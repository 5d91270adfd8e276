"""Workers forked from the runner's zygote (`runner/spawn.py`): the command line forks them,
each is re-parented to its runner, in a session of its own, with nothing of the runner's open;
its exit status and signal are read as a Popen's; the API, other threads and a runner that is
not a subreaper fall back to exec'd workers; and a forked run gives the exec'd run's verdicts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import attnspec
from attnspec.runner import spawn
from attnspec.runner.isolation import become_subreaper, is_subreaper, stop_subreaper

ROOT = Path(__file__).parent.parent
FAULTY = Path(__file__).parent / "faulty"
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="zygotes are Linux only")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "attnspec", "verify", *args, "--no-database", "--no-progress"],
        cwd=ROOT, env={**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _proc(pid: int, name: str) -> str:
    try:
        return Path(f"/proc/{pid}/{name}").read_text()
    except OSError:
        return ""


def _tree(root: int) -> dict[int, tuple[int, int, str]]:
    """{pid: (parent, session, comm)} of `root` and every process below it."""
    table: dict[int, tuple[int, int, str]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        stat = _proc(int(entry.name), "stat")
        comm = _proc(int(entry.name), "comm").strip()
        if stat and comm:  # gone between the two reads: a blank name would overwrite its real one
            fields = stat[stat.rfind(")") + 2:].split()
            table[int(entry.name)] = (int(fields[1]), int(fields[3]), comm)
    below, todo = {}, [root]
    while todo:
        pid = todo.pop()
        for child, row in table.items():
            if row[0] == pid and child not in below:
                below[child] = row
                todo.append(child)
    return below


@linux
@pytest.mark.slow
@pytest.mark.process
def test_the_cli_forks_each_runners_workers_from_its_own_zygote(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    process = _cli("tests/faulty/slow.py", "--only", "width,dtype,determinism",
                   "--max-examples", "12", "--seed", "0", "--workers", "2", "--report",
                   str(path))
    seen: dict[int, tuple[int, int, str]] = {}
    while process.poll() is None:
        seen.update(_tree(process.pid))
        time.sleep(0.05)
    _, stderr = process.communicate()
    assert process.returncode == 0, stderr
    lanes = {pid for pid, (_, _, comm) in seen.items() if comm == "attnspec-lane1"}
    runners = {process.pid} | lanes
    zygotes = {pid: row for pid, row in seen.items() if row[2] == "attnspec-zygote"
               and row[0] in runners}
    workers = {pid: row for pid, row in seen.items() if row[2] == "attnspec-worker"}
    assert len(lanes) == 1 and {row[0] for row in zygotes.values()} == runners, seen
    assert workers, seen
    for pid, (parent, session, _) in workers.items():
        assert parent in runners, (pid, parent)  # re-parented: its runner waits for it
        assert session == pid  # its own session and group, killed as one
    # Nothing was exec'd: no process ran the exec'd worker's `python -c` boot line.
    assert not any(row[2].startswith("python") for row in seen.values()), seen
    saved = json.loads(path.read_text())
    assert [p["verdict"] for p in saved["properties"]] == ["pass"] * 3
    time.sleep(0.5)
    assert not any(Path(f"/proc/{pid}").exists() and "State:\tZ" not in _proc(pid, "status")
                   for pid in seen), "a zygote, lane or worker outlived the run"


@linux
@pytest.mark.slow
@pytest.mark.process
def test_a_forked_workers_crash_is_named_by_its_signal_and_shrunk(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    process = _cli(str(FAULTY / "segfaults.py"), "--only", "width,divisibility", "--seed", "0",
                   "--report", str(path))
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 1, stderr
    width, divisibility = json.loads(path.read_text())["properties"]
    assert width["verdict"] == "crash"
    assert "killed its process (killed by SIGSEGV)" in width["message"], width["message"]
    assert width["counterexample"]["B"] == 2  # shrunk: every try a fresh forked worker
    assert divisibility["verdict"] == "pass"  # the worker restarted, forked again


@linux
@pytest.mark.slow
@pytest.mark.process
def test_forked_workers_give_the_exec_d_workers_verdicts(tmp_path: Path) -> None:
    props = "width,causality,determinism,batch_independence"
    path = tmp_path / "cli.json"
    process = _cli("attnspec.subjects.reference", "--only", props, "--seed", "3",
                   "--max-examples", "10", "--workers", "1", "--report", str(path))
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    forked = json.loads(path.read_text())["properties"]
    exec_d = attnspec.verify("attnspec.subjects.reference", only=props, seed=3,
                             max_examples=10, workers=1, database=False)  # the API execs
    assert spawn.zygote_pid() is None
    for a, b in zip(forked, exec_d.properties, strict=True):
        assert (a["id"], a["verdict"], a["examples"]) == (b.id, b.verdict, b.examples)
        assert a.get("drawn") == b.drawn


@linux
@pytest.mark.slow
@pytest.mark.process
def test_attnspec_exec_workers_turns_the_zygote_off(tmp_path: Path) -> None:
    process = _cli("tests/faulty/slow.py", "--only", "width", "--max-examples", "6",
                   "--workers", "1", env={**os.environ, "ATTNSPEC_EXEC_WORKERS": "1"})
    seen: dict[int, tuple[int, int, str]] = {}
    while process.poll() is None:
        seen.update(_tree(process.pid))
        time.sleep(0.05)
    _, stderr = process.communicate()
    assert process.returncode == 0, stderr
    comms = {row[2] for row in seen.values()}
    assert "attnspec-zygote" not in comms and "attnspec-worker" not in comms, comms
    assert any(c.startswith("python") for c in comms), comms  # the exec'd worker


@linux
def test_a_zygote_is_refused_with_other_threads_or_without_a_subreaper() -> None:
    assert spawn.zygote_pid() is None  # the API's runner (this process) never starts one
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert "threads" in (spawn.fork_unsafe_reason() or "")
        assert spawn.start_zygote(lambda fd, parent: None) is False
    finally:
        stop.set()
        other.join()
    was = is_subreaper()
    stop_subreaper()
    try:
        # Its workers would be re-parented to init, never this process's to wait for.
        assert spawn.start_zygote(lambda fd, parent: None) is False
    finally:
        if was:
            become_subreaper()
    assert spawn.zygote_pid() is None


@linux
def test_a_forked_worker_reads_as_a_popen() -> None:
    """Forked's poll and wait: None while it runs, a timeout, then -N for signal N."""
    was = is_subreaper()
    become_subreaper()
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            time.sleep(30)
            os._exit(0)
        child = spawn.Forked(pid)
        assert child.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(0.05)
        os.kill(pid, signal.SIGKILL)
        assert child.wait(5) == -signal.SIGKILL and child.returncode == -signal.SIGKILL
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os._exit(3)
        assert spawn.Forked(pid).wait(5) == 3
    finally:
        if not was:
            stop_subreaper()
