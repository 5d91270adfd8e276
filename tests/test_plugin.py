"""The conformance suite as a pytest plugin, used from a project that is not this repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent

pytestmark = pytest.mark.slow


def pytest_in(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ATTNSPEC_SUBJECT"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, timeout=600, cwd=project, env=env)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project: its own test, and an attention module of its own."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mine.py").write_text("def test_mine():\n    assert True\n")
    source = (HERE / "broken" / "mask_off_by_one.py").read_text()
    (tmp_path / "leaky_attention.py").write_text(source)
    (tmp_path / "_common.py").write_text((HERE / "broken" / "_common.py").read_text())
    return tmp_path


def test_a_broken_subject_fails_with_its_counterexample_and_replay(project: Path) -> None:
    done = pytest_in(project, "--attnspec-subject", "leaky_attention.py",
                     "--attnspec-max-examples", "10", "-k", "causality or width")
    assert done.returncode == 1, done.stdout[-3000:]
    out = done.stdout
    assert "FAILED ::test_causality[leaky_attention.py]" in out, out[-3000:]
    assert "causality fail on leaky_attention.py: changing inputs after position" in out
    assert "replay: attnspec verify leaky_attention.py --only causality --replay" in out
    assert "largest violation seen:" in out
    assert "2 failed, 1 passed, 20 deselected" in out  # width passes; grad_causality fails too


def test_a_correct_subject_passes_and_the_projects_own_tests_still_run(project: Path) -> None:
    done = pytest_in(project, "--attnspec-subject", "attnspec.subjects.sdpa",
                     "--attnspec-max-examples", "5", "tests", "-q")
    assert done.returncode == 0, done.stdout[-3000:]
    # 13 properties (mixing among them) and the project's own test pass; device_agreement
    # skips without a GPU, window, gqa_grouping and the seven hooks' for a protocol 1 subject.
    want = "15 passed, 9 skipped" if torch.cuda.is_available() else "14 passed, 10 skipped"
    assert want in done.stdout, done.stdout


def test_a_test_file_declaring_its_subject_holds_its_property_tests(project: Path) -> None:
    (project / "tests" / "test_attention.py").write_text(
        'ATTNSPEC_SUBJECT = "leaky_attention.py"\n\n\ndef test_also_mine():\n    pass\n')
    done = pytest_in(project, "tests", "--attnspec-max-examples", "10", "-k",
                     "causality or width or mine")
    assert done.returncode == 1, done.stdout[-3000:]
    out = done.stdout
    # node ids pytest can take back, beside the file's own and the project's other tests
    assert "FAILED tests/test_attention.py::test_causality[leaky_attention.py]" in out, out
    assert "2 failed, 3 passed, 20 deselected" in out, out[-2000:]
    one = pytest_in(project, "tests/test_attention.py::test_width[leaky_attention.py]",
                    "--attnspec-max-examples", "5", "-q")
    assert one.returncode == 0 and "1 passed" in one.stdout, one.stdout[-2000:]
    (project / "tests" / "test_attention.py").write_text("ATTNSPEC_SUBJECT = 3\n")
    bad = pytest_in(project, "tests", "-q")
    assert bad.returncode == 2, bad.stdout[-2000:]  # a collection error, saying what is wrong
    assert "ATTNSPEC_SUBJECT is 3, not a TARGET" in bad.stdout, bad.stdout[-2000:]


def test_without_a_subject_the_plugin_adds_nothing(project: Path) -> None:
    done = pytest_in(project, "-q", "tests")
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-2000:]


def test_an_impossible_limit_is_a_usage_error(project: Path) -> None:
    done = pytest_in(project, "--attnspec-subject", "attnspec.subjects.sdpa",
                     "--attnspec-max-seq", "0")
    assert done.returncode == 4, done.stderr  # pytest's usage error
    assert "--attnspec-max-seq 0: must be between 1 and 4096" in done.stderr


def test_a_test_run_without_a_subject_does_not_import_torch(project: Path) -> None:
    probe = ("import json, sys, pytest\n"
             "code = pytest.main(['-q', '-p', 'no:cacheprovider', 'tests'])\n"
             "print(json.dumps([int(code), sorted(m for m in sys.modules\n"
             "    if m.split('.')[0] in ('torch', 'attnspec', 'attnspec_pytest'))]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300, cwd=project,
                          env={k: v for k, v in os.environ.items() if k != "ATTNSPEC_SUBJECT"})
    code, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert code == 0, done.stdout[-2000:]
    assert imported == ["attnspec_pytest"]  # the entry point loaded, and nothing heavy


def test_the_entry_points_choices_are_attnspecs_own() -> None:
    import attnspec_pytest
    from attnspec.common.options import DEVICES, PROFILES

    assert attnspec_pytest.PROFILES == tuple(PROFILES)
    assert attnspec_pytest.DEVICES == DEVICES


def test_the_entry_points_size_defaults_are_attnspecs_own(pytestconfig: pytest.Config) -> None:
    from attnspec.common.options import MAX_HEAD_DIM, MAX_HEADS, MAX_WIDTH, RunOptions

    defaults = RunOptions()
    assert (defaults.max_heads, defaults.max_head_dim, defaults.max_width) == (
        MAX_HEADS, MAX_HEAD_DIM, MAX_WIDTH)
    assert (pytestconfig.getoption("--attnspec-max-heads"),
            pytestconfig.getoption("--attnspec-max-head-dim"),
            pytestconfig.getoption("--attnspec-max-width")) == (MAX_HEADS, MAX_HEAD_DIM, MAX_WIDTH)
