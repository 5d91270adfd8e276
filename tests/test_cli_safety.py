"""What a run must never do to the user's files and terminal: --report refuses files that are
not reports and writes through links and into pipes; the subject's escape codes are not
obeyed."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from attnspec._cli import main
from attnspec._errors import UsageError
from attnspec._report import PropertyResult, Report, check_report_path, printable

HERE = Path(__file__).parent
FAULTY = HERE / "faulty"
QUICK = ["attnspec.subjects.reference", "--only", "width", "--max-examples", "3",
         "--no-database"]
NOT_A_REPORT = "exists and is not an attnspec JSON report"


def small_report(status: str = "pass") -> Report:
    verdict = "fail" if status == "fail" else "pass"
    return Report(target="t", header={}, partial=False,
                  properties=[PropertyResult(id="width", verdict=verdict, examples=3)])


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "attnspec", *args]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


# ---- --report never replaces what is not a report -----------------------------------------


@pytest.mark.parametrize("content", [
    b"def build(n_embd, n_head):\n    ...\n", b"{}", b'{"schema": 1}', b"[1, 2]",
    b"\xff\xfe\x00binary", b"[" * 100_000, b"\n"],
    ids=["source", "empty-object", "no-properties", "array", "binary", "deep", "newline"])
def test_report_refuses_an_existing_file_that_is_not_a_report(tmp_path: Path,
                                                             content: bytes) -> None:
    path = tmp_path / "impl.py"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=NOT_A_REPORT):
        check_report_path(path)
    with pytest.raises(UsageError, match=NOT_A_REPORT):
        small_report().write(path)
    assert path.read_bytes() == content
    assert os.listdir(tmp_path) == ["impl.py"]  # no temporary file left beside it


def test_verify_refuses_the_targets_own_source_as_report_up_front(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "impl.py"
    text = (HERE.parent / "src/attnspec/subjects/reference.py").read_text()
    source.write_text(text)
    assert main(["verify", str(source), "--report", str(source)]) == 2
    err = capsys.readouterr().err
    assert f"--report {str(source)!r}: the file {NOT_A_REPORT}" in err
    assert "so it will not be replaced" in err and "Traceback" not in err
    assert source.read_text() == text


def test_report_overwrites_an_earlier_report_and_an_empty_file(tmp_path: Path) -> None:
    earlier = tmp_path / "earlier.json"
    small_report("fail").write(earlier)
    earlier.chmod(0o640)
    check_report_path(earlier)
    small_report("pass").write(earlier)
    assert json.loads(earlier.read_text())["status"] == "pass"
    assert stat.S_IMODE(earlier.stat().st_mode) == 0o640  # an earlier report keeps its mode
    touched = tmp_path / "touched.json"
    touched.touch()
    check_report_path(touched)
    small_report().write(touched)
    assert json.loads(touched.read_text())["status"] == "pass"


def test_report_writes_through_a_symlink_and_keeps_it(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    target = tmp_path / "reports" / "r.json"
    small_report("fail").write(target)
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    check_report_path(link)
    small_report("pass").write(link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["status"] == "pass"
    assert sorted(os.listdir(tmp_path / "reports")) == ["r.json"]


def test_report_through_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link, target = tmp_path / "latest.json", tmp_path / "new.json"
    link.symlink_to(target)
    check_report_path(link)
    small_report().write(link)
    assert link.is_symlink() and json.loads(target.read_text())["status"] == "pass"


def test_report_through_a_symlink_to_a_source_file_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "impl.py"
    source.write_text("x = 1\n")
    link = tmp_path / "r.json"
    link.symlink_to(source)
    with pytest.raises(UsageError, match=f"r.json.*impl.py.*{NOT_A_REPORT}"):
        check_report_path(link)
    with pytest.raises(UsageError, match=NOT_A_REPORT):
        small_report().write(link)
    assert link.is_symlink() and source.read_text() == "x = 1\n"


def test_report_on_a_symlink_loop_is_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(UsageError, match="a.json"):
        check_report_path(a)
    with pytest.raises(UsageError, match="a.json"):
        small_report().write(a)
    assert a.is_symlink() and b.is_symlink()


def test_report_on_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        with pytest.raises(UsageError, match="not a regular file, a character device or a FIFO"):
            check_report_path(path)
        with pytest.raises(UsageError, match="not a regular file"):
            small_report().write(path)
        assert stat.S_ISSOCK(path.stat().st_mode)
    finally:
        server.close()


def test_report_to_dev_null_is_written_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_temporary_files(*args: object, **kwargs: object) -> tuple[int, str]:
        raise AssertionError(f"a temporary file was made for /dev/null: {kwargs}")

    # A trial or temporary file next to /dev/null, or a rename onto it, must never happen.
    monkeypatch.setattr("attnspec._report.tempfile.mkstemp", no_temporary_files)
    check_report_path("/dev/null")
    small_report().write("/dev/null")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def _end_reader(path: Path, reader: threading.Thread) -> None:
    """Open and close the FIFO once more, so its reader reads an empty chunk and stops."""
    deadline = time.monotonic() + 10
    while reader.is_alive() and time.monotonic() < deadline:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: the reader is between two opens
            pass
        reader.join(0.1)


def _read_fifo(path: Path, into: list[bytes]) -> threading.Thread:
    def read() -> None:
        while True:  # each writer's open and close is one chunk; EOF with no writer ends it
            with open(path, "rb") as handle:
                data = handle.read()
            into.append(data)
            if not data or len(into) > 5:
                return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_report_to_a_fifo_is_written_plainly(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    os.mkfifo(path)
    got: list[bytes] = []
    reader = _read_fifo(path, got)
    check_report_path(path)
    small_report().write(path)
    _end_reader(path, reader)
    assert not reader.is_alive()
    assert json.loads(got[0])["status"] == "pass" and got[1:] == [b""]
    assert stat.S_ISFIFO(path.stat().st_mode) and os.listdir(tmp_path) == ["r.json"]


# ---- the subject's escape codes are shown, not obeyed ----------------------------------


def test_printable_escapes_control_characters_but_newline_and_tab() -> None:
    assert printable("a\x1b[2J\x1b[Hb\r\x00\x07\x7f\x9b\u202e\tc\nd") == \
        "a\\x1b[2J\\x1b[Hb\\x0d\\x00\\x07\\x7f\\x9b\\u202e\tc\nd"
    assert printable("µ ✓ 𝛼") == "µ ✓ 𝛼"


def test_summary_escapes_the_subjects_message_and_the_json_keeps_it(tmp_path: Path) -> None:
    raw = "RuntimeError: \x1b[2J\x1b[Hall properties pass\r\nsecond line\twith tab"
    report = Report(target="t", header={}, partial=False, properties=[
        PropertyResult(id="width", verdict="error", examples=1, message=raw,
                       notes=["note \x1b[31mred"])])
    shown = report.summary()
    assert "\x1b" not in shown and "\r" not in shown
    assert "RuntimeError: \\x1b[2J\\x1b[Hall properties pass\\x0d\nsecond line\twith tab" in shown
    report.write(tmp_path / "r.json")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["properties"][0]["message"] == raw
    assert saved["properties"][0]["notes"] == ["note \x1b[31mred"]


@pytest.mark.slow
def test_verify_shows_a_subjects_escape_codes_escaped(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    done = subprocess.run(
        command("verify", str(FAULTY / "ansi_message.py"), "--only", "width",
                "--max-examples", "3", "--no-database", "--report", str(path)),
        capture_output=True, text=True, timeout=300, env=environment(), cwd=HERE.parent)
    assert done.returncode == 1, done.stderr
    assert "\x1b" not in done.stdout and "\r" not in done.stdout
    assert "\\x1b[2J\\x1b[Hall properties pass" in done.stdout
    assert "\x1b[2J" in json.loads(path.read_text())["properties"][0]["message"]
