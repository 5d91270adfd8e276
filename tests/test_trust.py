"""The trust model: the runner judges and the worker only runs the subject, so a subject cannot
forge a verdict, cannot make attnspec blame itself, and leaves nothing running behind it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import attnspec

HERE = Path(__file__).parent
FAULTY = HERE / "faulty"

pytestmark = pytest.mark.slow


def verify(target: Path | str, **options: object) -> attnspec.Report:
    options.setdefault("max_examples", 10)
    options.setdefault("seed", 1)
    options.setdefault("database", False)
    return attnspec.verify(str(target), **options)  # type: ignore[arg-type]


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (it has exited, its parent has not reaped it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if not _gone(p)]


def test_a_subject_that_monkeypatches_the_judge_in_its_process_still_fails() -> None:
    report = verify(FAULTY / "forges.py", only="causality,oracle")
    assert report.result("causality").verdict == "fail", report.summary()
    assert report.result("oracle").verdict == "fail", report.summary()


@pytest.mark.parametrize(("name", "prop", "text"), [
    ("base_exception", "width", "Abandoned: tile cancelled"),
    ("generator_exit", "width", "GeneratorExit: kernel generator closed"),
    ("export_iteration_raises", "oracle",
     "iterating export_weights' mapping raised: RuntimeError: weights still streaming"),
    ("parameters_raise", "oracle_grad",
     "module.named_parameters() raised: RuntimeError: parameters live in a C++ extension"),
    ("meta_export", "oracle", "export_weights' q_weight is on the meta device"),
])
def test_faults_of_the_subjects_making_are_its_errors(name: str, prop: str, text: str) -> None:
    result = verify(f"{FAULTY / 'subject_faults.py'}:{name}", only=prop).result(prop)
    assert result.verdict == "error", result
    assert text in result.message and "internal error" not in result.message, result.message


def test_global_torch_state_changed_by_a_subject_does_not_fail_it() -> None:
    report = verify(FAULTY / "changes_torch_state.py",
                    only="width,causality,oracle,oracle_grad,grad_causality")
    assert report.ok, report.summary()


def test_a_subject_may_start_processes_of_its_own() -> None:
    report = verify(FAULTY / "uses_processes.py", only="width", max_examples=3)
    assert report.ok, report.summary()


def test_nothing_the_subject_started_outlives_the_run(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pids = tmp_path / "pids"
    monkeypatch.setenv("ATTNSPEC_TEST_PIDS", str(pids))
    report = verify(f"{FAULTY / 'uses_processes.py'}:sleeper", only="width", max_examples=3)
    assert report.ok, report.summary()
    started = [int(p) for p in pids.read_text().split()]
    assert started and _wait_gone(started) == []


def test_a_sigkilled_runner_takes_its_worker_and_the_subjects_processes_with_it(
        tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    runner = subprocess.Popen(
        [sys.executable, "-m", "attnspec", "verify", f"{FAULTY / 'uses_processes.py'}:sleeper",
         "--only", "width", "--max-examples", "100000", "--no-database", "--no-progress"],
        env={**os.environ, "ATTNSPEC_TEST_PIDS": str(pids)}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pids.exists(), "the subject never ran"
        runner.kill()  # SIGKILL: no handler runs in the runner
        runner.wait(10)
        started = [int(p) for p in pids.read_text().split()]
        assert _wait_gone(started) == [], "the subject's processes outlived a SIGKILLed runner"
    finally:
        runner.kill()


def test_verify_from_a_script_without_a_main_guard_works(tmp_path: Path) -> None:
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent("""
        import attnspec
        report = attnspec.verify("attnspec.subjects.reference", only="width", max_examples=3,
                                 database=False)
        print("ok" if report.ok else report.summary())
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_no_database_leaves_no_hypothesis_directory(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    verify("attnspec.subjects.reference", only="width,causality", max_examples=3)
    assert not (tmp_path / ".hypothesis").exists()


@pytest.mark.parametrize(("replay", "why"), [
    ({"B": 10**6, "T": 2, "C": 4, "H": 2}, "B must be at most 1024"),
    ({"B": 64, "T": 4096, "C": 4096, "H": 64, "cuts": list(range(100))},
     "this example needs about"),
])
def test_a_replay_too_large_to_run_is_a_usage_error(replay: dict[str, object],
                                                    why: str) -> None:
    with pytest.raises(attnspec.UsageError, match=why):
        attnspec.verify("attnspec.subjects.reference", only="causality", replay=replay,
                        isolate=False)


def test_a_largest_violation_is_reported_beside_the_smallest_counterexample() -> None:
    report = verify(HERE / "broken" / "global_mean_leak.py", only="causality", max_examples=40)
    result = report.result("causality")
    assert result.verdict == "fail" and result.largest is not None, result
    assert result.measured is not None and result.largest["measured"] >= result.measured
    assert "largest violation" in report.summary()


def test_an_in_process_run_gives_the_callers_torch_state_back() -> None:
    import torch

    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            report = attnspec.verify("attnspec.subjects.reference", only="width,oracle_grad",
                                     max_examples=3, isolate=False, database=False)
            assert report.ok, report.summary()
            assert not torch.is_grad_enabled()
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(before)
