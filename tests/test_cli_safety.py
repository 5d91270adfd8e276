"""What a run must never do to the user's files and terminal, and what it must never lose:
--report refuses files that are not reports and writes through links and into pipes; a closed
stdout or stderr, SIGTERM or SIGHUP still leave a report and the verdicts' exit status; replay
JSON that would blow the stack is a usage error; the subject's escape codes are not obeyed."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _reports import first_verdict_written

from attnspec._errors import UsageError
from attnspec.common.report import PropertyResult, Report, check_report_path, printable
from attnspec.frontends.cli import main
from attnspec.frontends.verify_cli import REPLAY_MAX_CHARS, _SafeStream

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


# ---- --html never replaces what is not an HTML report, and bad numbers say the range -------


def _html_case(tmp_path: Path, case: str) -> tuple[list[str], Path, str]:
    source = tmp_path / "impl.py"
    source.write_text((HERE.parent / "src/attnspec/subjects/reference.py").read_text())
    other = tmp_path / "notes.html"
    other.write_text("<!DOCTYPE html><html><title>my notes</title></html>\n")
    both = tmp_path / "r.out"
    both.write_text("")
    return {"target": ([str(source), "--html", str(source)], source,
                       "the TARGET " + repr(str(source)) + " itself"),
            "not-a-report": ([str(source), "--html", str(other)], other,
                             "the file exists and is not an attnspec HTML report"),
            "same-as-report": ([str(source), "--html", str(both), "--report", str(both)], both,
                               "the same file as --report"),
            "directory": ([str(source), "--html", str(tmp_path)], source, "a directory")}[case]


@pytest.mark.parametrize("case", ["target", "not-a-report", "same-as-report", "directory"])
def test_html_refuses_the_target_a_foreign_file_the_report_or_a_directory_up_front(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    args, kept, said = _html_case(tmp_path, case)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert main(["verify", *args, "--no-database", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--html {args[2]!r}: {said}" in err and "Traceback" not in err, err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert kept.exists()


def test_html_refuses_a_file_that_appeared_during_the_run_and_replaces_its_own(
        tmp_path: Path) -> None:
    from attnspec.frontends.html_report import write_html

    page = tmp_path / "r.html"
    write_html(small_report(), str(page))  # new: written
    first = page.read_text()
    assert first.startswith("<!DOCTYPE html>") and "attnspec report" in first
    write_html(small_report("fail"), str(page))  # an earlier page: replaced
    assert page.read_text() != first
    page.write_text("print('mine')\n")
    with pytest.raises(UsageError, match="not an attnspec HTML report"):
        write_html(small_report(), str(page))
    assert page.read_text() == "print('mine')\n"
    assert sorted(os.listdir(tmp_path)) == ["r.html"]  # no temporary file left beside it


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--max-seq", "x", "'x' is not a whole number: give a whole number from 1 to 4096"),
    ("--max-seq", "0", "--max-seq 0: must be between 1 and 4096"),
    ("--timeout", "1s", "'1s' is not a number: give a finite number of seconds > 0"),
    ("--timeout", "-1", "--timeout -1: must be a finite number of seconds > 0"),
    ("--workers", "two", "'two' is not a whole number: give a whole number from 1 to 16"),
    ("--workers", "17", "--workers 17: must be a whole number from 1 to 16"),
    ("--max-examples", "1.5", "'1.5' is not a whole number: give a whole number >= 1"),
    ("--max-heads", "h", "'h' is not a whole number: give a whole number from 1 to 256"),
    ("--max-head-dim", "0", "--max-head-dim 0: must be between 1 and 1024"),
    ("--max-width", "wide", "'wide' is not a whole number: give a whole number from 1 to 16384"),
    ("--seed", "1.5", "'1.5' is not a whole number: give any whole number"),
])
def test_a_bad_number_exits_2_with_the_valid_range(
        capsys: pytest.CaptureFixture[str], flag: str, value: str, said: str) -> None:
    with contextlib.suppress(SystemExit):  # argparse exits 2 itself on a type error
        code = main(["verify", "attnspec.subjects.reference", flag, value, "--no-database"])
        assert code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err


def test_a_replay_of_the_other_kind_exits_2_saying_so(capsys: pytest.CaptureFixture[str]) -> None:
    kernel = ('{"B":1,"H":1,"G":1,"Tq":2,"Tk":2,"D":1,"dtype":"float32","device":"cpu",'
              '"seed":0,"causal":true,"kind":"kernel"}')
    module = '{"B":1,"T":2,"C":2,"H":1,"dtype":"float32","device":"cpu","seed":0,"cuts":[]}'
    for target, replay, said in (
            ("attnspec.subjects.reference", kernel,
             "it is a kernel example (kind: kernel), and this subject is a module"),
            ("attnspec.subjects.kernel_sdpa", module,
             "it is a module example (it has T and C, a kernel's has Tq, Tk and D), and this "
             "subject is a kernel")):
        assert main(["verify", target, "--only", "width", "--replay", replay,
                     "--no-database", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, err


@pytest.mark.parametrize(("source", "said"), [
    ("import os\n\nimport nosuch_module_here\n",
     "bad.py:3: ModuleNotFoundError: No module named 'nosuch_module_here'"),
    ("def build(n_embd, n_head:\n", "bad.py:1: SyntaxError"),
])
def test_a_target_that_does_not_import_names_its_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, said: str) -> None:
    (tmp_path / "bad.py").write_text(source)
    assert main(["verify", str(tmp_path / "bad.py"), "--no-database", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err

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
    monkeypatch.setattr("attnspec.common.report.tempfile.mkstemp", no_temporary_files)
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


@pytest.mark.slow
@pytest.mark.process
def test_verify_writes_one_report_document_into_a_fifo(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    os.mkfifo(path)
    got: list[bytes] = []
    reader = _read_fifo(path, got)
    done = subprocess.run(command("verify", *QUICK, "--report", str(path)), capture_output=True,
                          text=True, timeout=300, env=environment(), cwd=HERE.parent)
    assert done.returncode == 0, done.stderr
    _end_reader(path, reader)
    assert json.loads(got[0])["status"] == "pass"
    assert got[1:] == [b""]  # one document, not one per property and another at the end
    assert stat.S_ISFIFO(path.stat().st_mode) and os.listdir(tmp_path) == ["r.json"]


# ---- nothing lost through stdout or stderr ----------------------------------------------


def test_safe_stream_swallows_a_missing_closed_or_broken_stream() -> None:
    quiet = _SafeStream(None)
    assert quiet.write("x") == 1 and not quiet.isatty()
    quiet.flush()
    closed = io.StringIO()
    closed.close()
    stream = _SafeStream(closed)
    print("lost", file=stream, flush=True)
    assert stream.broken

    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    broken = _SafeStream(Broken())
    print("lost", file=broken)
    print("lost again", file=broken)  # stops writing once broken
    assert broken.broken


def test_verify_with_stderr_none_runs_and_restores_signal_handlers(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "stderr", None)  # what Python sets when started with 2>&-
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    path = tmp_path / "r.json"
    # --max-seq 1 adds a note on stderr to the progress lines that also go there.
    assert main(["verify", *QUICK, "--max-seq", "1", "--report", str(path)]) == 0
    assert json.loads(path.read_text())["status"] == "pass"
    assert {s: signal.getsignal(s) for s in before} == before


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_verify_piped_into_head_keeps_report_and_exit_status(tmp_path: Path,
                                                            buffered: bool) -> None:
    path = tmp_path / "r.json"
    env = environment()
    if buffered:  # as a user's shell runs it: the table waits in stdout's buffer until exit
        del env["PYTHONUNBUFFERED"]
    with subprocess.Popen(command("verify", *QUICK, "--report", str(path)),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          cwd=HERE.parent) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()  # as `| head -1` does, before the verdict table comes
        stderr = process.stderr.read()
        assert process.wait(timeout=300) == 0, stderr
    assert first.startswith("attnspec ")
    assert json.loads(path.read_text())["status"] == "pass"
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr


@pytest.mark.slow
@pytest.mark.process
def test_verify_with_stderr_closed_keeps_report_and_exit_status(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    line = " ".join(command("verify", *QUICK, "--report", str(path))) + " 2>&-"
    done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=300,
                          env=environment(), cwd=HERE.parent)
    assert done.returncode == 0, done.stdout
    assert json.loads(path.read_text())["status"] == "pass"
    assert "width" in done.stdout and "Traceback" not in done.stdout


# ---- SIGTERM and SIGHUP end a run as Ctrl-C does ----------------------------------------


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid`, from /proc (children lists, read recursively)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status  # a zombie has finished: only its exit code is left


def _running_with(*words: str) -> list[str]:
    """Command lines of live processes that contain every one of `words`."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, UnicodeDecodeError):
            continue
        if all(w in line for w in words) and _alive(int(entry.name)):
            found.append(line)
    return found


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_stop_signal_writes_an_interrupted_report(tmp_path: Path, signum: int,
                                                  workers: int) -> None:
    if signal.getsignal(signum) is signal.SIG_IGN:  # under nohup the runner inherits the ignore
        pytest.skip(f"{signal.Signals(signum).name} is ignored here (nohup?), as the CLI keeps it")
    path = tmp_path / "r.json"
    process = subprocess.Popen(
        command("verify", "tests/faulty/slow.py", "--no-database", "--max-examples", "30",
                "--only", "width,dtype,determinism", "--report", str(path),
                "--workers", str(workers)),
        cwd=HERE.parent, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    first_verdict_written(path, any_property=workers > 1)  # written from the start
    time.sleep(1.0)  # into the second property's examples
    below = _descendants(process.pid)
    assert below, "the worker should be running below the runner"
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    name = signal.Signals(signum).name
    assert process.returncode == 128 + signum, stderr
    saved = json.loads(path.read_text())
    assert saved["partial"] is True and saved["status"] == "interrupted"
    verdicts = [p["verdict"] for p in saved["properties"]]
    if workers == 1:
        assert verdicts == ["pass", "interrupted", "interrupted"], verdicts  # verdicts kept
        assert saved["properties"][2]["message"].startswith(f"{name} came before its full pass")
        assert saved["properties"][1]["message"].startswith(f"{name} after")
    else:  # which runner was where depends on timing; each names the signal all the same
        assert set(verdicts) <= {"pass", "interrupted"} and "interrupted" in verdicts, verdicts
        assert all(p["message"].startswith(name) for p in saved["properties"]
                   if p["verdict"] == "interrupted")
    assert f"interrupted: {name} after" in stdout  # the verdict table so far
    assert f"interrupted by {name}; the report so far is in {path}, marked interrupted" in stderr
    assert "Traceback" not in stderr
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
            any(map(_alive, below)) or _running_with("attnspec", str(tmp_path))):
        time.sleep(0.2)
    assert not [pid for pid in below if _alive(pid)], "a process the run started outlived it"
    assert not _running_with("attnspec", str(tmp_path))


# ---- --replay JSON that would exhaust the stack ----------------------------------------


@pytest.mark.parametrize("text, problem", [
    ("[" * REPLAY_MAX_CHARS, "nested too deeply"),
    ("[" * 50_000 + "]" * 50_000, "nested too deeply"),
    ('{"a": ' * 12_000 + "1" + "}" * 12_000, "nested too deeply"),
    ("[" * (REPLAY_MAX_CHARS + 1), "100,001 characters, more than the 100,000"),
    (" " * (REPLAY_MAX_CHARS + 1) + "{}", "characters, more than the 100,000"),
], ids=["open", "closed", "objects", "long", "long-blank"])
def test_replay_json_that_is_too_deep_or_long_is_a_usage_error(
        text: str, problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", *QUICK[:3], "--replay", text]) == 2
    err = capsys.readouterr().err
    assert problem in err and "Traceback" not in err and len(err) < 1000


def test_replay_file_that_is_too_deep_or_long_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep, long = tmp_path / "deep.json", tmp_path / "long.json"
    deep.write_text("[" * 90_000)
    long.write_text("[" * 200_000)
    assert main(["verify", *QUICK[:3], "--replay", str(deep)]) == 2
    assert "nested too deeply" in capsys.readouterr().err
    assert main(["verify", *QUICK[:3], "--replay", str(long)]) == 2
    assert "the file holds more than 100,000 characters" in capsys.readouterr().err


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
@pytest.mark.process
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
