"""The command line as pytest users expect it (issue 45): `--report -` puts the JSON report on
stdout alone (the table goes to stderr, so `| jq` works), every run ends with a closing line of
counts, wall time and verdict, and `-q` prints that line alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attnspec.common.report import PropertyResult, Report
from attnspec.frontends import verify_cli
from attnspec.frontends.cli import main
from attnspec.frontends.verify_cli import tally

HERE = Path(__file__).parent
QUICK = ["attnspec.subjects.reference", "--only", "width,causality", "--max-examples", "3",
         "--no-database", "--seed", "0"]
BROKEN = [str(HERE / "broken" / "no_scale.py"), "--no-database", "--seed", "0",
          "--max-examples", "5", "--no-progress"]
CLOSING = re.compile(r"^(\d+ [a-z ]+, )*\d+ [a-z ]+ in \d+\.\d s: \S.*$")


def test_report_dash_writes_the_json_alone_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", *QUICK, "--report", "-"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)  # nothing else on stdout
    assert report["status"] == "pass" and report["target"] == "attnspec.subjects.reference"
    assert {p["id"]: p["verdict"] for p in report["properties"]}["width"] == "pass"
    assert re.search(r"property\s+verdict", err) and "conforms" in err  # the table: stderr
    assert "report: -" not in err + out


def test_every_run_ends_with_counts_time_and_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", *QUICK, "--no-progress"]) == 0
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert CLOSING.match(last), last
    assert last.startswith("2 passed in ") and ": conforms" in last, last


def test_a_failing_run_counts_its_failures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", *BROKEN, "--only", "width,oracle"]) == 1
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert CLOSING.match(last) and "1 failed" in last and "1 passed" in last, last
    assert ": fails" in last, last


def test_quiet_prints_the_closing_line_alone(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", *QUICK, "-q"]) == 0
    out, err = capsys.readouterr()
    assert len(out.strip().splitlines()) == 1 and CLOSING.match(out.strip()), out
    assert not re.search(r"property\s+verdict", out + err)


def test_quiet_with_report_dash_keeps_stdout_for_the_json(capsys: pytest.CaptureFixture[str],
                                                         ) -> None:
    assert main(["verify", *QUICK, "-q", "--report", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["status"] == "pass"
    assert CLOSING.match(err.strip()), err


def test_report_dash_with_several_backends_is_a_usage_error(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify_cli, "_hf_targets", lambda args: ["hf:x@eager", "hf:x@sdpa"])
    assert main(["verify", "hf:x", "--hf-backend", "all", "--report", "-"]) == 2
    err = capsys.readouterr().err
    assert "cannot share stdout" in err and "FILE@BACKEND.json" in err and "Traceback" not in err


def test_the_closing_line_names_each_verdict_once() -> None:
    verdicts = ["pass", "pass", "fail", "skip", "error", "timeout"]
    report = Report(target="t", header={}, partial=False, properties=[
        PropertyResult(id=f"p{i}", verdict=v, examples=1) for i, v in enumerate(verdicts)])
    line = tally(report, 4.12)
    assert line.startswith("2 passed, 1 failed, 1 errors, 1 timed out, 1 skipped in 4.1 s: ")
    assert line.endswith(report.conclusion.split("\n")[0])


def test_torchs_note_that_numpy_is_absent_is_not_shown() -> None:
    """numpy is optional; torch warns at import that it is absent (scripts/wheel_smoke.py runs
    every command in a venv without numpy and fails on the warning)."""
    import subprocess
    import sys

    code = ("import warnings, attnspec; warnings.warn_explicit('Failed to initialize NumPy: No "
            "module named numpy', UserWarning, 'torch/x.py', 1)")
    done = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0 and "NumPy" not in done.stderr, done.stderr


SUBJECT_WITH_NAMES = '''
import torch
from attnspec.subjects.reference import build, export_weights

DTYPES = ("float64", "torch.float32")
'''


def test_dtypes_may_be_named_as_dtype_takes_them(tmp_path: Path) -> None:
    import attnspec

    path = tmp_path / "named_dtypes.py"
    path.write_text(SUBJECT_WITH_NAMES)
    report = attnspec.verify(str(path), only="width", max_examples=4, seed=0, database=False)
    assert report.ok, report.summary()
    assert report.header["dtypes"] == {"cpu": ["float64", "float32"]}


@pytest.mark.parametrize(("declared", "said"), [
    ('"float64"', "is one dtype, not a sequence: write ('float64',)"),
    ('("float64", 3)', "3 is neither a torch dtype nor a dtype's name"),
    ('("float8",)', "DTYPES lists float8; attnspec checks float32, float64, bfloat16, float16"),
])
def test_a_dtypes_that_is_not_names_or_dtypes_says_which_entry(tmp_path: Path, declared: str,
                                                              said: str) -> None:
    import attnspec
    from attnspec import TargetError

    path = tmp_path / "bad_dtypes.py"
    path.write_text(SUBJECT_WITH_NAMES.replace('("float64", "torch.float32")', declared))
    with pytest.raises(TargetError) as raised:
        attnspec.verify(str(path), only="width", max_examples=2, database=False)
    assert said in str(raised.value) and "bad_dtypes.py" in str(raised.value)


@pytest.mark.parametrize("imports", ["from .common import SCALE", "from mypkg.common import SCALE"])
def test_a_file_inside_a_package_suggests_its_dotted_name(tmp_path: Path, imports: str,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         ) -> None:
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "common.py").write_text("SCALE = 1.0\n")
    (package / "attn.py").write_text(f"{imports}\n"
                                     "from attnspec.subjects.reference import build\n")
    monkeypatch.chdir(tmp_path)
    assert main(["verify", "mypkg/attn.py", "--only", "width", "--no-database"]) == 2
    err = capsys.readouterr().err
    assert "It is inside the package 'mypkg'" in err and "`attnspec verify mypkg.attn`" in err
    assert f"from {tmp_path}" in err and "Traceback" not in err, err


def test_a_relative_target_resolves_from_where_the_caller_stands_now(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        ) -> None:
    """Workers forked from the zygote start in the runner's directory of the moment, not the
    zygote's at its fork (the command line run twice in one process, from two directories)."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "subject.py").write_text("from attnspec.subjects.reference import build\n")
    (second / "subject.py").write_text("raise RuntimeError('the second directory')\n")
    quick = ["verify", "subject.py", "--only", "width", "--max-examples", "2", "--no-database"]
    monkeypatch.chdir(first)
    assert main(quick) == 0
    monkeypatch.chdir(second)
    assert main(quick) == 2
    assert "the second directory" in capsys.readouterr().err
