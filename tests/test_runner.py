"""Runner reliability: bad TARGETs exit 2 plainly; faulty subjects become verdicts; the report
is always written; runs are reproducible."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _reports import first_verdict_written

import attnspec
from attnspec._errors import TargetError
from attnspec.runner.subject import load_subject
from attnspec.session.selection import select_properties

HERE = Path(__file__).parent
FAULTY = HERE / "faulty"
TARGETS = FAULTY / "targets"

pytestmark = [pytest.mark.slow, pytest.mark.process]


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "attnspec", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=HERE.parent)


def verify(target: Path | str, **options: object) -> attnspec.Report:
    options.setdefault("max_examples", 15)
    options.setdefault("seed", 1)
    options.setdefault("database", False)
    return attnspec.verify(str(target), **options)  # type: ignore[arg-type]


# ---- TARGET problems: exit 2, one or two lines, no traceback from attnspec ----------------

TARGET_ERRORS = {
    "missing.py": "TARGET 'tests/faulty/targets/missing.py': no such file "
                  "'tests/faulty/targets/missing.py'.",
    "no_build.py": "TARGET 'tests/faulty/targets/no_build.py' has no build(n_embd, n_head); "
                   "define one that returns a torch.nn.Module.",
    "build_not_callable.py": "TARGET 'tests/faulty/targets/build_not_callable.py': build is "
                             "of type int, not a function.",
    "build_wrong_params.py": "TARGET 'tests/faulty/targets/build_wrong_params.py': "
                             "build(config) cannot be called as build(n_embd, n_head).",
    "bad_dtypes.py": "TARGET 'tests/faulty/targets/bad_dtypes.py': DTYPES must be a sequence "
                     "of torch dtypes or their names (torch.float32 or 'float32'), got "
                     "('float32', 3): 3 is neither a torch dtype nor a dtype's name.",
    "integer_dtypes.py": "TARGET 'tests/faulty/targets/integer_dtypes.py': DTYPES lists int8; "
                         "attnspec checks float32, float64, bfloat16, float16.",
}


@pytest.mark.parametrize("name", sorted(TARGET_ERRORS))
def test_target_problem_exits_2_with_one_line(name: str) -> None:
    done = cli("verify", f"tests/faulty/targets/{name}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"attnspec verify: {TARGET_ERRORS[name]}", done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_a_package_folder_in_the_working_directory_imports_as_the_package() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "attnspec", "verify", "attnpkg", "--only", "width",
         "--max-examples", "3", "--no-database", "--no-progress"],
        capture_output=True, text=True, timeout=300, cwd=FAULTY / "package_here")
    assert done.returncode == 0, done.stderr
    assert "width" in done.stdout and "pass" in done.stdout


def test_syntax_error_shows_the_subjects_file_and_line() -> None:
    done = cli("verify", "tests/faulty/targets/syntax_error.py")
    assert done.returncode == 2
    path = TARGETS / "syntax_error.py"
    assert done.stderr.startswith(
        f"attnspec verify: TARGET 'tests/faulty/targets/syntax_error.py' failed to import: "
        f"{path}:1: SyntaxError: "), done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) <= 2


@pytest.mark.parametrize(("name", "line", "error"), [
    ("import_error.py", 3, "ModuleNotFoundError: No module named "
                           "'a_module_that_does_not_exist'"),
    ("raises_on_import.py", 4, "KeyError: 'large'"),
])
def test_import_error_shows_the_subjects_own_line(name: str, line: int, error: str) -> None:
    done = cli("verify", f"tests/faulty/targets/{name}")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"attnspec verify: TARGET 'tests/faulty/targets/{name}' failed to import: "
        f"{TARGETS / name}:{line}: {error}"), done.stderr


def test_unknown_module_exits_2() -> None:
    done = cli("verify", "no_such_package.attention")
    assert done.returncode == 2
    assert done.stderr.strip() == ("attnspec verify: TARGET 'no_such_package.attention': no "
                                   "module named 'no_such_package' (neither a file nor an "
                                   "importable module).")


def test_subject_that_kills_its_process_while_loading_exits_2() -> None:
    done = cli("verify", "tests/faulty/targets/aborts_on_import.py")
    assert done.returncode == 2
    assert "killed its process while loading (killed by SIGABRT)" in done.stderr


def test_an_empty_skip_skips_nothing_and_an_infinite_timeout_is_refused() -> None:
    assert len(select_properties(skip=[])) == len(attnspec.PROPERTIES)
    with pytest.raises(attnspec.UsageError, match="timeout=inf: must be a finite number"):
        attnspec.verify("attnspec.subjects.reference", timeout=float("inf"))


def test_the_api_writes_the_report_for_a_target_that_does_not_load(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="has no build"):
        attnspec.verify(str(TARGETS / "no_build.py"), report=tmp_path / "r.json")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["status"] == "error" and "has no build" in saved["error"]


def test_misuse_exits_2() -> None:
    assert cli("verify").returncode == 2
    done = cli("verify", "attnspec.subjects.reference", "--only", "causalty")
    assert done.returncode == 2
    assert "unknown property id 'causalty'" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(("options", "why"), [
    ({"only": ""}, "only='': names no property id"),
    ({"skip": ",".join(attnspec.PROPERTIES)}, "leaves no property to run"),
    ({"dtypes": ["float16"]}, "dtypes='float16': no such dtype to check on cpu; attnspec's "
                              "defaults offer cpu: float32, float64, bfloat16 (float16 is "
                              "checked on CUDA only"),
])
def test_a_run_that_would_check_nothing_is_a_usage_error(options: dict[str, object],
                                                         why: str) -> None:
    if "dtypes" in options and torch.cuda.is_available():
        pytest.skip("float16 is checked on this machine's CUDA device")
    with pytest.raises(attnspec.UsageError, match=re.escape(why)):
        attnspec.verify("attnspec.subjects.reference", isolate=False, **options)  # type: ignore[arg-type]


def test_name_inside_a_module_is_loaded() -> None:
    made = load_subject(f"{TARGETS / 'callables.py'}:make")
    assert made.build(12, 3).n_embd == 12  # a plain callable is taken as build
    assert load_subject(f"{TARGETS / 'callables.py'}:Namespace").build(8, 2) is not None
    with pytest.raises(TargetError, match="has no attribute 'missing'"):
        load_subject(f"{TARGETS / 'callables.py'}:missing")
    with pytest.raises(TargetError, match="has no build"):
        load_subject(f"{TARGETS / 'callables.py'}:not_callable")


# ---- subject faults: verdicts on the property and example, the other properties still run --


def test_hang_is_a_timeout_verdict_and_the_rest_still_runs(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    report = verify(FAULTY / "hangs.py", only="width,divisibility,causality", timeout=2,
                    report=report_path)
    width, divisibility, causality = report.properties
    # The API names its parameter; the command line says --timeout 2 s.
    assert width.verdict == "timeout" and "no answer within timeout=2 s" in width.message
    assert width.counterexample is not None and width.counterexample["T"] > 2
    assert divisibility.verdict == "pass"  # the worker was restarted after the hang
    assert causality.verdict == "timeout"
    assert json.loads(report_path.read_text())["properties"][0]["verdict"] == "timeout"


@pytest.mark.parametrize(("name", "signal_name", "edge"), [("aborts.py", "SIGABRT", ("T", 4)),
                                                           ("segfaults.py", "SIGSEGV", ("B", 2))])
def test_crash_is_a_verdict_shrunk_to_the_edge_and_the_rest_still_runs(
    name: str, signal_name: str, edge: tuple[str, int], tmp_path: Path,
) -> None:
    report_path = tmp_path / "report.json"
    report = verify(FAULTY / name, only="width,divisibility,determinism", report=report_path)
    width, divisibility, determinism = report.properties
    assert width.verdict == "crash", width
    assert f"killed its process (killed by {signal_name})" in width.message
    assert width.counterexample is not None
    axis, first_crashing = edge  # aborts for T > 3, segfaults for B > 1
    assert width.counterexample[axis] == first_crashing, width.counterexample
    assert divisibility.verdict == "pass"
    assert determinism.verdict == "crash"
    saved = json.loads(report_path.read_text())
    assert [p["verdict"] for p in saved["properties"]] == ["crash", "pass", "crash"]
    assert saved["status"] == "fail" and saved["partial"] is False


def test_a_subject_that_fails_to_load_on_restart_keeps_the_verdicts_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ATTNSPEC_TEST_LOADED", str(tmp_path / "loaded"))
    report = verify(FAULTY / "loads_once.py", only="width,dtype", report=tmp_path / "r.json")
    width, dtype = report.properties
    assert width.verdict == "crash" and "killed its process" in width.message
    assert dtype.verdict == "crash" and "could not be restarted" in dtype.message
    assert "ImportError: kernel cache corrupt" in dtype.message
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["status"] == "fail"
    assert [p["message"] for p in saved["properties"]] == [width.message, dtype.message]


def test_forward_raising_is_an_error_with_the_subjects_text_shrunk_to_the_edge() -> None:
    report = verify(FAULTY / "raises.py", only="width,divisibility", max_examples=40)
    width = report.result("width")
    assert width.verdict == "error"
    first, *frames = width.message.splitlines()
    assert first == ("forward raised on input of shape (1, 9, 1): NotImplementedError: "
                     "tile for T=9 not written yet")
    assert frames[-1].endswith("raises.py:11 in _raise: raise NotImplementedError(f\"tile for "
                               "T={x.size(1)} not written yet\")"), frames  # the subject's
    assert all("torch" + os.sep not in f and "attnspec" + os.sep not in f for f in frames)
    assert width.counterexample is not None and width.counterexample["T"] == 9
    assert report.result("divisibility").verdict == "pass"


@pytest.mark.parametrize(("name", "text"), [
    ("exits", "SystemExit: 3"),
    ("interrupts", "KeyboardInterrupt"),
    ("unprintable", "Unprintable: <its str() raised ValueError>"),
])
def test_forward_raising_past_except_exception_is_still_the_subjects_error(
    name: str, text: str,
) -> None:
    report = verify(f"tests/faulty/misbehaves.py:{name}", only="width,divisibility",
                    max_examples=40)
    width = report.result("width")
    assert width.verdict == "error"
    assert width.message.splitlines()[0] == f"forward raised on input of shape (1, 9, 1): {text}"
    assert "misbehaves.py:33 in before: _fault(fault)" in width.message  # its frames follow
    assert report.result("divisibility").verdict == "pass"


def test_a_huge_error_message_is_clipped() -> None:
    width = verify("tests/faulty/misbehaves.py:floods", only="width").result("width")
    assert width.verdict == "error"
    first = width.message.splitlines()[0]
    assert first.endswith("... (1,998,012 more characters)")
    assert len(width.message) < 3400  # 2,000 of the message, at most 1,200 of its frames


def test_export_returning_none_says_so() -> None:
    oracle = verify("tests/faulty/misbehaves.py:exports_none", only="oracle").result("oracle")
    assert oracle.verdict == "error"
    assert oracle.message.startswith("export_weights returned NoneType, not a mapping of ")


def test_a_subjects_prints_go_to_stderr_and_leave_the_verdict_table_alone() -> None:
    done = cli("verify", "tests/faulty/chatty.py", "--only", "width", "--max-examples", "3",
               "--no-database", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "chatty:" not in done.stdout and "width" in done.stdout
    assert "chatty: forward on" in done.stderr and "chatty: straight to fd 1" in done.stderr


def test_tuple_output_gets_a_hint() -> None:
    width = verify(FAULTY / "returns_tuple.py", only="width").result("width")
    assert width.verdict == "error"
    assert width.message == ("forward returned tuple (a tuple, as nn.MultiheadAttention "
                             "returns (output, weights): return only the output tensor), "
                             "not a Tensor.")


def test_nan_output_fails_finite() -> None:
    finite = verify(FAULTY / "nan_for_long.py", only="finite", max_examples=40).result("finite")
    assert finite.verdict == "fail"
    # Shrinking stops near the edge: T=6 or the special value 7.
    assert finite.counterexample is not None and finite.counterexample["T"] in (6, 7)
    T = finite.counterexample["T"]
    assert f"outputs are not finite (first nan at (B, T, C) index (0, {T - 1}, 0))" \
        in finite.message


def test_export_with_a_missing_key_is_an_oracle_error() -> None:
    oracle = verify(FAULTY / "export_missing_key.py", only="oracle").result("oracle")
    assert oracle.verdict == "error"
    assert oracle.message.startswith("export_weights returned keys [")
    assert oracle.message.endswith("missing o_weight.")


def test_export_with_a_wrong_shape_is_an_oracle_error() -> None:
    oracle = verify(FAULTY / "export_wrong_shape.py", only="oracle").result("oracle")
    assert oracle.verdict == "error"
    assert oracle.message == ("export_weights: q_weight is (3, 1), but must be (1, 1) "
                              "(C = n_embd = 1, nn.Linear layout).")


def test_build_raising_for_a_valid_configuration_is_an_error() -> None:
    width = verify(FAULTY / "build_raises.py", only="width", max_examples=60).result("width")
    assert width.verdict == "error"
    assert width.message.startswith("build(5, 5) raised for a valid configuration: "
                                    "ValueError: only up to 4 heads supported, got 5")


def test_supports_and_dtypes_limit_what_is_drawn() -> None:
    report = verify(FAULTY / "supports_even.py", only="width,oracle", max_examples=30)
    assert report.ok, report.summary()
    assert report.header["dtypes"] == {"cpu": ["float32"]}


def test_exit_status_is_1_on_a_failing_subject_and_report_is_written(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    done = cli("verify", "tests/faulty/raises.py", "--only", "width", "--max-examples", "20",
               "--seed", "3", "--no-database", "--report", str(path))
    assert done.returncode == 1, done.stderr
    saved = json.loads(path.read_text())
    assert saved["status"] == "fail" and saved["properties"][0]["verdict"] == "error"
    assert "replay: attnspec verify tests/faulty/raises.py --only width --replay " in done.stdout


def test_report_is_written_for_a_target_error(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    done = cli("verify", "tests/faulty/targets/no_build.py", "--report", str(path))
    assert done.returncode == 2
    written = json.loads(path.read_text())
    assert written["status"] == "error" and not written["partial"]
    assert "has no build" in written["error"]


@pytest.mark.parametrize("where", ["a_directory", "new/", "a_file/r.json", "/proc/no/r.json"])
def test_a_report_path_that_cannot_be_written_exits_2_before_loading(
    where: str, tmp_path: Path,
) -> None:
    (tmp_path / "a_directory").mkdir()
    (tmp_path / "a_file").write_text("")
    path = where if where.startswith("/") else f"{tmp_path}/{where}"
    done = cli("verify", "tests/faulty/raises.py", "--report", path, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"attnspec verify: error: --report {path!r}: "), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""


def test_a_report_that_fails_mid_run_keeps_every_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from attnspec.common.report import Report

    def full_disk(self: Report, path: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Report, "write", full_disk)
    report = verify("attnspec.subjects.reference", only="width,dtype", max_examples=3,
                    report=tmp_path / "r.json")
    assert [p.verdict for p in report.properties] == ["pass", "pass"]
    assert report.write_error is not None and "No space left" in report.write_error


def test_a_non_finite_measurement_is_written_as_valid_json(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    report = verify(FAULTY / "nan_for_long.py", only="oracle", report=path)
    assert report.result("oracle").verdict == "fail"
    text = path.read_text()
    assert "Infinity" not in text and "NaN" not in text
    json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the report"))


def _ctrl_c_answered() -> None:
    """In the child: Ctrl-C as on a terminal, even where pytest runs as a background job (which
    starts with SIGINT ignored, and a child inherits that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_writes_a_partial_report(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "attnspec", "verify", "tests/faulty/slow.py", "--no-database",
         "--max-examples", "30", "--only", "width,dtype,determinism", "--report", str(path),
         "--workers", "1"],  # one runner: the order below is one runner's (test_lanes.py: more)
        cwd=HERE.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_ctrl_c_answered)
    first_verdict_written(path)
    time.sleep(1.0)  # into the second property's examples
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    saved = json.loads(path.read_text())
    assert saved["partial"] is True and saved["status"] == "interrupted"
    verdicts = [p["verdict"] for p in saved["properties"]]
    # determinism's full pass never began: what its quick pass found is kept, as interrupted.
    assert verdicts == ["pass", "interrupted", "interrupted"], verdicts
    assert "its quick pass of 5 narrow examples passed" in saved["properties"][2]["message"]
    assert saved["properties"][1]["examples"] > 0  # what it had run is kept
    assert "interrupted: Ctrl-C after" in stdout  # the verdict table so far is printed
    assert f"interrupted; the report so far is in {path}, marked interrupted" in stderr
    assert "Traceback" not in stderr


def test_ctrl_c_while_the_subject_loads_still_writes_the_report(tmp_path: Path) -> None:
    path, started = tmp_path / "r.json", tmp_path / "import-started"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "ATTNSPEC_TEST_IMPORT_STARTED": str(started)}
    process = subprocess.Popen(
        [sys.executable, "-m", "attnspec", "verify", "tests/faulty/slow_import.py",
         "--report", str(path)],
        cwd=HERE.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_ctrl_c_answered)
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)  # well before the import's minute is up
    assert process.returncode == 130, stderr
    saved = json.loads(path.read_text())
    assert saved["status"] == "interrupted" and saved["partial"] is True
    assert {p["verdict"] for p in saved["properties"]} == {"not_run"}
    assert "Traceback" not in stderr


# ---- options ---------------------------------------------------------------------------


def test_max_seq_reaches_bugs_past_a_block_boundary() -> None:
    leaky = FAULTY / "leaks_past_128.py"
    short = verify(leaky, only="causality", max_examples=40, seed=0).result("causality")
    assert short.verdict == "pass" and short.drawn is not None and short.drawn["T"][1] <= 64
    long = verify(leaky, only="causality", max_examples=40, seed=0, max_seq=300)
    found = long.result("causality")
    assert found.verdict == "fail", found
    assert found.counterexample is not None and found.counterexample["T"] > 128
    assert long.header["max_seq"] == 300


@pytest.mark.parametrize("max_seq", [0, 4097, 10**9])
def test_max_seq_out_of_range_is_a_usage_error(max_seq: int) -> None:
    expected = f"max_seq={max_seq}: must be between 1 and 4096"
    with pytest.raises(attnspec.UsageError, match=expected):
        verify("attnspec.subjects.reference", max_seq=max_seq)


def test_each_property_and_pass_draws_its_own_examples() -> None:
    first = verify("attnspec.subjects.sdpa", only="width,dtype", seed=3, max_examples=20)
    again = verify("attnspec.subjects.sdpa", only="width,dtype", seed=3, max_examples=20)
    drawn = [p.drawn for p in first.properties]
    assert drawn == [p.drawn for p in again.properties]  # the same seed, the same examples
    assert drawn[0] != drawn[1]  # width and dtype draw alike, but from their own streams


# ---- reproducible ----------------------------------------------------------------------


def test_same_seed_gives_same_examples_and_verdicts() -> None:
    first = verify(FAULTY / "raises.py", only="width,causality", seed=7, max_examples=25)
    second = verify(FAULTY / "raises.py", only="width,causality", seed=7, max_examples=25)
    assert [(p.verdict, p.examples, p.counterexample) for p in first.properties] == \
           [(p.verdict, p.examples, p.counterexample) for p in second.properties]


@pytest.mark.parametrize("ci", ["", "true"])
def test_a_seed_picks_the_examples_also_where_ci_derandomizes(
    ci: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI", ci)

    def drawn(seed: int | None) -> list[object]:
        report = verify("attnspec.subjects.sdpa", only="width", seed=seed, max_examples=20,
                        isolate=False)
        return [report.header["derandomize"], report.result("width").drawn]

    assert drawn(1) == drawn(1) and drawn(1) != drawn(2)
    assert drawn(1)[0] is False
    assert drawn(None)[0] is bool(ci)
    if ci:
        assert drawn(None) == drawn(None)  # derandomized: the same examples on every run


def test_replay_command_reproduces_the_failure() -> None:
    width = verify(FAULTY / "raises.py", only="width", max_examples=30).result("width")
    assert width.replay is not None and width.counterexample is not None
    replayed = attnspec.verify(str(FAULTY / "raises.py"), only="width",
                               replay=width.counterexample)
    assert replayed.result("width").verdict == "error"
    assert replayed.result("width").message == width.message
    assert replayed.result("width").examples == 1


@pytest.mark.parametrize(("replay", "why"), [
    ({}, "missing B, T, C, H"),
    ({"B": "x", "T": 2, "C": 4, "H": 2}, "B must be a whole number, got 'x'"),
    ({"B": 1, "T": 2, "C": 4, "H": 2, "seed": 2**70}, "seed must be in 0..2147483647"),
    ({"B": 1, "T": 2, "C": 4, "H": 2, "cuts": [5, -3]}, "cuts must lie in 0..T-1 = 0..1"),
    ({"B": 1, "T": 2, "C": 4, "H": 2, "device": []}, "device must be a string, got []"),
    ({"B": 1, "T": 2, "C": 4, "H": 2, "scale": float("inf")}, "scale must be a finite number"),
    ({"B": 1, "T": 2, "C": 4, "H": 2, "sed": 1}, "unknown field 'sed'"),
    ({"B": 1, "T": 2, "C": 4, "H": 2, "cuts": "ab"}, "cuts must be a list of whole numbers"),
    ({"B": 0, "T": 0, "C": 4, "H": 2}, "B, T, C and H must all be >= 1"),
    ({"B": 1, "T": 2, "C": 5, "H": 2}, "C=5 is not divisible by H=2"),
    ({"B": 1, "T": 2, "C": 4, "H": 2, "dtype": "int8"}, "dtype 'int8' is not one this run"),
    ({"B": 1, "T": 2, "C": 4, "H": 2, "device": "tpu"}, "device 'tpu' is not available"),
])
def test_a_replay_that_is_not_an_example_is_a_usage_error(replay: dict[str, object],
                                                           why: str) -> None:
    with pytest.raises(attnspec.UsageError, match="^replay=.*: " + re.escape(why)):
        attnspec.verify("attnspec.subjects.reference", only="width", replay=replay,
                        isolate=False)


def test_replay_accepts_what_the_engine_prints_for_divisibility() -> None:
    # invalid_configs draws C or H below 1 too; such a counterexample must replay as printed.
    report = attnspec.verify("tests/faulty/misbehaves.py:exits", only="divisibility",
                             replay={"B": 1, "T": 1, "C": 1, "H": -1, "cuts": (), "seed": 0},
                             isolate=False)
    assert report.result("divisibility").examples == 1


def test_replay_reads_a_file_and_refuses_text_that_is_not_json(tmp_path: Path) -> None:
    saved = tmp_path / "example.json"
    saved.write_text('{"B": 1, "T": 9, "C": 4, "H": 2}')
    done = cli("verify", "tests/faulty/raises.py", "--only", "width", "--replay", str(saved),
               "--no-progress")
    assert done.returncode == 1 and "NotImplementedError: tile for T=9" in done.stdout
    done = cli("verify", "tests/faulty/raises.py", "--only", "width", "--replay", "README.md")
    assert done.returncode == 2
    assert "not JSON" in done.stderr and "Traceback" not in done.stderr


def test_database_replays_a_failure_first_next_time(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)  # CI derandomizes, which keeps no database
    # No seed: Hypothesis neither reads nor writes the database under an explicit seed.
    db = tmp_path / "db"
    first = attnspec.verify(str(FAULTY / "raises.py"), only="width", max_examples=50,
                            database=str(db)).result("width")
    assert first.verdict == "error" and any(db.iterdir())
    again = attnspec.verify(str(FAULTY / "raises.py"), only="width", max_examples=50,
                            database=str(db)).result("width")
    assert again.verdict == "error" and again.counterexample == first.counterexample
    # The saved, already minimal example ran first: a fresh draw would need shrinking steps.
    assert again.examples <= 2, again


def test_time_spent_waiting_for_a_cpu_does_not_count_towards_the_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from attnspec.runner import worker as _worker
    from attnspec.runner.wire import Channel

    starved = iter(range(0, 1000))
    # The worker is runnable but starved: its run-queue delay grows 0.2 s per look.
    monkeypatch.setattr(_worker, "_run_delay", lambda pid: next(starved) * 0.2)
    ours, theirs = socket.socketpair()
    quiet = Channel(ours)
    start = time.monotonic()
    with pytest.raises(_worker._Silent):
        _worker.receive(quiet, _worker.Budget([0], timeout=0.3), 1000)
    waited = time.monotonic() - start
    assert 0.5 < waited <= 3.0 + 0.5, waited  # extended, but never past 10 x the timeout
    monkeypatch.setattr(_worker, "_run_delay", lambda pid: 1.0)  # a sleeping hang: no delay
    start = time.monotonic()
    with pytest.raises(_worker._Silent):
        _worker.receive(quiet, _worker.Budget([0], timeout=0.3), 1000)
    assert time.monotonic() - start < 1.5
    quiet.close()
    theirs.close()


def test_worker_whose_parent_is_gone_exits_quietly(capfd: pytest.CaptureFixture[str]) -> None:
    import socket

    from attnspec.runner import worker as _worker

    ours, theirs = socket.socketpair()
    ours.close()  # the runner was killed: its end of the socket is gone
    _worker._serve(theirs)
    theirs.close()
    assert capfd.readouterr().err == ""  # no BrokenPipeError traceback on the user's terminal


def test_an_answer_left_uncollected_is_never_taken_for_the_next_one() -> None:
    # A check interrupted between submit and collect (Ctrl-C) must not shift every later answer.
    from attnspec.properties.base import Context, Example, _inputs
    from attnspec.runner.worker import Worker

    ex = Example(B=1, T=3, C=4, H=2, seed=1)
    first, second = _inputs(ex), _inputs(ex, salt=7)
    worker = Worker("attnspec.subjects.reference")
    try:
        ctx = Context(worker)
        (want,) = ctx.forwards_of(ex, [second])
        ctx.submit(ex, [{"op": "forward", "x": first}])  # never collected
        (got,) = ctx.forwards_of(ex, [second])
        assert torch.equal(got, want)
    finally:
        worker.close()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_vjp_gives_autograd_grads_values_exactly(dtype: torch.dtype) -> None:
    from attnspec import CausalSelfAttention
    from attnspec.common.grad import vjp

    gen = torch.Generator().manual_seed(3)
    attn = CausalSelfAttention(12, 3).to(dtype)
    x = torch.randn(2, 5, 12, generator=gen).to(dtype).requires_grad_(True)
    cotangent = torch.randn(2, 5, 12, generator=gen).to(dtype)
    inputs = [x, *attn.parameters()]
    want = torch.autograd.grad(attn(x), inputs, cotangent)
    got = vjp([attn(x)], inputs, [cotangent])
    for name, w, g in zip(["x", *(n for n, _ in attn.named_parameters())], want, got,
                          strict=True):
        assert g is not None and torch.equal(w, g), f"d/d{name} differs from autograd.grad's"
    unused = torch.zeros(3, requires_grad=True)
    assert vjp([attn(x)], [x, unused], [cotangent])[1] is None, "an unused input gets None"



@pytest.mark.skipif(not Path("/proc/self/environ").exists(),
                    reason="reads the worker's environment from /proc (Linux)")
@pytest.mark.parametrize("user_policy", [None, "ACTIVE"])
def test_the_workers_idle_openmp_threads_sleep_unless_the_user_says_otherwise(
        monkeypatch: pytest.MonkeyPatch, user_policy: str | None) -> None:
    from attnspec.runner import spawn as _spawn

    if user_policy is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", user_policy)
    process, conn = _spawn.spawn()
    try:
        # Popen returns once exec has begun; the new image's environment is set up a moment
        # later, and until then /proc/PID/environ reads empty (seen once in CI's fresh clone).
        deadline = time.monotonic() + 10
        while not (environ := Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0")
                   )[0] and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        conn.close()
    assert f"OMP_WAIT_POLICY={user_policy or 'PASSIVE'}".encode() in environ
    assert b"PATH=" + os.environ["PATH"].encode() in environ  # the rest is the runner's


def test_hypothesis_never_mines_attnspecs_own_source_for_constants() -> None:
    # From a source checkout Hypothesis would parse every attnspec module on each run (0.3 s)
    # and try their numbers in the draws; installed in site-packages it never looks at them.
    from hypothesis.internal.conjecture import providers

    from attnspec.session.environment import _hide_own_source_from_hypothesis

    if not hasattr(providers, "_seen_modules"):  # hypothesis is unpinned; verify falls back
        pytest.skip("this Hypothesis has no providers._seen_modules (private API)")
    _hide_own_source_from_hypothesis()
    own = [m for name, m in sys.modules.items() if name.split(".")[0] == "attnspec"]
    assert len(own) > 10
    assert all(id(m) in providers._seen_modules for m in own)


def test_the_header_names_versions_from_package_metadata() -> None:
    # Metadata, not an import: importing beartype only for its version cost the runner 0.1 s.
    import beartype
    import jaxtyping

    from attnspec.session.environment import _installed

    assert (_installed("beartype"), _installed("jaxtyping")) == (
        beartype.__version__, jaxtyping.__version__)
    assert _installed("attnspec-no-such-distribution") == "not installed"
