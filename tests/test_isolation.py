"""Same-user isolation (docs/design.md section 6): the command-line runner is not dumpable and
is a child subreaper, what a subject detaches is killed at close, the report's digest is printed
where only attnspec writes, and a root runner can run the worker as another user."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnspec._errors import UsageError
from attnspec.common.options import RunOptions

HERE = Path(__file__).parent
FAULTY = HERE / "faulty"
ROOT = HERE.parent
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")


def _cli(*args: str, cwd: Path | str, user: str | None = None,
         ) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "attnspec", "verify", *args, "--no-database",
               "--no-progress", "--max-examples", "2"]
    if user is not None:  # stdout a pipe of that user's own, as in `attnspec verify ... | cat`
        command = ["bash", "-c", 'set -o pipefail; "$@" | cat', "bash", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd,
                          user=user, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@functools.cache
def _why_nobody_cannot_run() -> str | None:
    """None if this root process can run attnspec as user nobody, else why not."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "needs a root runner on Linux"
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return "no user nobody"
    try:
        done = subprocess.run([sys.executable, "-c", "import attnspec, torch"], cwd="/",
                              user="nobody", capture_output=True, text=True, timeout=300)
    except OSError:  # the interpreter itself is out of reach (under /root, say)
        return "user nobody cannot run this Python"
    if done.returncode != 0:
        return "user nobody cannot read this checkout or its Python environment"
    return None


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder every user may read and write, holding the tampering subject; skips where this
    root process cannot run attnspec as user nobody."""
    why = _why_nobody_cannot_run()
    if why:
        pytest.skip(why)
    yield from _shared_folder()


@pytest.fixture
def worker_dir() -> Iterator[Path]:
    """The same folder, for a root runner whose workers are forked (its zygote's copies need
    not start this Python as nobody, only read the subject)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("needs a root runner on Linux")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    yield from _shared_folder()


def _shared_folder() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="attnspec-isolation-"))
    folder.chmod(0o777)
    for name in ("tampers.py", "_base.py"):
        shutil.copy(FAULTY / name, folder / name)
        (folder / name).chmod(0o644)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _denied(stderr: str) -> set[str]:
    return {line.split(":")[1].strip() for line in stderr.splitlines()
            if line.startswith("tampers:") and "denied" in line}


@linux
@pytest.mark.slow
@pytest.mark.process
def test_the_cli_runner_is_hardened_and_prints_the_reports_digest(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    done = _cli("attnspec.subjects.reference", "--only", "width", "--report", str(report),
                cwd=ROOT)
    assert done.returncode == 0, done.stderr
    header = json.loads(report.read_text())
    assert header["isolation"] == {"subreaper": True, "dumpable": False, "worker_user": None}
    digest = hashlib.sha256(report.read_bytes()).hexdigest()
    assert done.stdout.rstrip().endswith(f"report: {report} (sha256 {digest})"), done.stdout


@linux
@pytest.mark.slow
@pytest.mark.process
def test_a_subject_of_the_same_non_root_user_cannot_reach_the_runner(shared_dir: Path) -> None:
    done = _cli("tampers.py", "--only", "width", cwd=shared_dir, user="nobody")
    assert done.returncode == 0, done.stderr
    assert "FORGED" not in done.stdout, done.stdout
    assert _denied(done.stderr) == {"stdout", "mem", "environ"}, done.stderr


@linux
@pytest.mark.slow
@pytest.mark.process
def test_a_root_runner_can_run_the_worker_as_another_user(worker_dir: Path) -> None:
    report = worker_dir / "report.json"
    done = _cli("tampers.py", "--only", "width", "--worker-user", "nobody", "--report",
                str(report), cwd=worker_dir)
    assert done.returncode == 0, done.stderr
    assert "FORGED" not in done.stdout, done.stdout
    assert _denied(done.stderr) == {"stdout", "mem", "environ"}, done.stderr
    assert json.loads(report.read_text())["isolation"]["worker_user"] == "nobody"


def test_worker_user_is_checked_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="there is no user 'no-such-user-attnspec'"):
        RunOptions(worker_user="no-such-user-attnspec")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(UsageError, match="only root can start processes as another user, and "
                                         "this runner is uid 1000"):
        RunOptions(worker_user="nobody")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(UsageError, match="'root' is root"):
        RunOptions(worker_user="root")


@linux
def test_sweep_kills_detached_processes_and_leaves_the_callers_own(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import os, subprocess, time
        from attnspec.runner.isolation import become_subreaper, children, sweep

        assert become_subreaper()
        mine = subprocess.Popen(["sleep", "60"])  # the caller's: same session
        child = os.fork()
        if child == 0:  # a daemon's escape: a new session, then a double fork
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", ["sleep", "60"])
            os._exit(0)
        os.waitpid(child, 0)
        time.sleep(0.2)
        detached = [p for p in children() if p != mine.pid]
        assert len(detached) == 1, children()
        print(sweep(), detached[0] in children(), mine.pid in children())
        print(sweep(own_session=True), mine.pid in children())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "False", "True", "1", "False"], done.stdout


@linux
@pytest.mark.slow
@pytest.mark.process
def test_the_api_leaves_the_callers_process_as_it_found_it() -> None:
    # A subreaper that outlived the run would keep, as zombies, the orphans of whatever the
    # caller starts next (a pytest process's later subprocesses, say).
    script = textwrap.dedent("""
        import attnspec
        from attnspec.runner.isolation import is_dumpable, is_subreaper

        report = attnspec.verify("attnspec.subjects.reference", only="width", max_examples=2,
                                 database=False)
        print(report.ok, report.header["isolation"]["subreaper"], is_subreaper(),
              is_dumpable())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "False", "True"], done.stdout


@linux
def test_the_cli_called_in_process_leaves_its_process_as_it_found_it() -> None:
    script = textwrap.dedent("""
        from attnspec.frontends.cli import main
        from attnspec.runner.isolation import is_dumpable, is_subreaper

        code = main(["verify", "tests/faulty/targets/missing.py"])
        print(code, is_subreaper(), is_dumpable())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.stdout.split() == ["2", "False", "True"], (done.stdout, done.stderr)
