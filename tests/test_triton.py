"""Triton kernels as subjects (docs/triton.md): with no GPU the worker runs them in Triton's
interpreter, which the runner sets before triton is imported; the run then draws fewer and
smaller examples, refuses bfloat16 (the interpreter computes it wrongly) and never calls the
kernel from two threads at once (the interpreter is not thread-safe). The CI subset: one
correct and two broken kernels of tests/kernels/triton/, interpreted; `nox -s triton` sweeps
them all."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnspec._errors import TargetError
from attnspec.runner import spawn
from attnspec.runner.worker import SubjectInfo

TRITON = Path(__file__).parent / "kernels" / "triton"
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="triton is not installed (pip install -e '.[triton]')")


def test_workers_interpret_triton_where_no_gpu_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spawn, "gpu_present", lambda: False)
    assert spawn.worker_env({})["TRITON_INTERPRET"] == "1"
    assert spawn.worker_env({"TRITON_INTERPRET": "0"})["TRITON_INTERPRET"] == "0"  # the user's
    monkeypatch.setattr(spawn, "gpu_present", lambda: True)
    assert "TRITON_INTERPRET" not in spawn.worker_env({})


def test_the_worker_says_how_triton_ran_and_a_forged_mode_is_refused() -> None:
    from attnspec.reference.conventions import KernelConventions

    base = {"name": "k", "origin": "k.py", "has_export": False, "cuda": False,
            "protocol": "kernel", "kernel": KernelConventions().to_json()}
    assert SubjectInfo.from_json(base).triton is None
    assert SubjectInfo.from_json({**base, "triton": "interpreter"}).triton == "interpreter"
    with pytest.raises(TargetError, match="triton"):
        SubjectInfo.from_json({**base, "triton": "gpu, trust me"})


def test_a_kernel_that_declares_triton_is_taken_at_its_word(tmp_path: Path) -> None:
    from attnspec.runner.subject import load_subject

    kernel = ("PROTOCOL = 'kernel'\nTRITON = {}\n"
              "def attention(q, k, v, *, causal):\n    return q\n")
    (tmp_path / "said_yes.py").write_text(kernel.format("True"))
    (tmp_path / "said_maybe.py").write_text(kernel.format("'maybe'"))
    assert load_subject(str(tmp_path / "said_yes.py")).triton
    assert not load_subject("attnspec.subjects.kernel_sdpa").triton  # torch only
    with pytest.raises(TargetError, match="TRITON is 'maybe'"):
        load_subject(str(tmp_path / "said_maybe.py"))


@needs_triton
def test_a_triton_kernel_is_found_through_the_module_it_imports() -> None:
    from attnspec.runner.subject import load_subject

    sys.path.insert(0, str(TRITON))
    try:
        assert load_subject(str(TRITON / "good" / "flash_fwd.py")).triton
    finally:
        sys.path.remove(str(TRITON))


def _verify(target: Path, tmp_path: Path, *extra: str) -> tuple[int, dict, str]:
    report = tmp_path / f"{target.stem}.json"
    done = subprocess.run([sys.executable, "-m", "attnspec", "verify", str(target), "--seed",
                           "0", "--no-database", "--no-progress", "--report", str(report),
                           *extra], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    data = json.loads(report.read_text()) if report.exists() else {}
    return done.returncode, data, done.stdout + done.stderr


@needs_triton
@pytest.mark.process
@pytest.mark.skipif(spawn.gpu_present(), reason="a GPU is seen: Triton runs natively here")
def test_a_correct_triton_kernel_conforms_in_the_interpreter(tmp_path: Path) -> None:
    status, report, said = _verify(TRITON / "good" / "flash_fwd.py", tmp_path)
    assert status == 0, said
    triton = report["triton"]  # the header's fields are the report's own
    assert triton["mode"] == "interpreter" and triton["scaled"]["max_examples"] == 20
    assert report["max_seq"] == 40 and report["timeout"] == 300
    assert "triton: interpreter (CPU" in said
    fresh = next(p for p in report["properties"] if p["id"] == "fresh_results")
    assert fresh["verdict"] == "pass"
    assert any("two threads at once not made" in n for n in fresh["notes"])


@needs_triton
@pytest.mark.process
@pytest.mark.skipif(spawn.gpu_present(), reason="a GPU is seen: Triton runs natively here")
@pytest.mark.parametrize(("name", "prop"), [("no_rescale", "oracle"),
                                            ("last_block_unmasked", "causality")])
def test_a_broken_triton_kernel_fails_the_property_it_breaks(tmp_path: Path, name: str,
                                                              prop: str) -> None:
    status, report, said = _verify(TRITON / "broken" / f"{name}.py", tmp_path,
                                   "--only", f"width,{prop},oracle")
    assert status == 1, said
    verdicts = {p["id"]: p["verdict"] for p in report["properties"]}
    assert verdicts[prop] == "fail", said
    assert verdicts["width"] == "pass"


@needs_triton
@pytest.mark.process
@pytest.mark.skipif(spawn.gpu_present(), reason="a GPU is seen: Triton runs natively here")
def test_bfloat16_is_refused_in_the_interpreter_with_the_reason(tmp_path: Path) -> None:
    status, _, said = _verify(TRITON / "good" / "flash_fwd.py", tmp_path, "--dtype", "bfloat16")
    assert status == 2, said
    assert "interpreter computes bfloat16 wrongly" in said and "11584" in said


def test_an_error_raised_from_another_shows_both_places() -> None:
    """Triton's interpreter raises InterpreterError from what failed in the kernel's body: the
    fault names the launch and the kernel's own line."""
    from attnspec.runner.subject import fault_frames

    def body() -> None:
        raise ValueError("incompatible dimensions")  # the kernel's line

    def launch() -> None:
        try:
            body()
        except ValueError as error:
            raise RuntimeError(repr(error)) from error

    try:
        launch()
    except RuntimeError as error:
        shown = fault_frames(error)
    assert "in launch: raise RuntimeError" in shown
    assert "raised from ValueError: incompatible dimensions" in shown
    assert "in body: raise ValueError" in shown
    assert shown.index("in launch") < shown.index("in body")


@needs_triton
@pytest.mark.process
@pytest.mark.skipif(spawn.gpu_present(), reason="a GPU is seen: Triton runs natively here")
def test_a_kernel_that_cannot_be_built_is_its_error_at_its_line(tmp_path: Path) -> None:
    kernel = TRITON / "does_not_compile.py"
    line = next(n for n, text in enumerate(kernel.read_text().splitlines(), 1)
                if "THE LINE" in text)
    status, report, said = _verify(kernel, tmp_path, "--only", "width")
    assert status == 1, said
    width = next(p for p in report["properties"] if p["id"] == "width")
    assert width["verdict"] == "error", said
    assert f"{kernel}:{line} in _mismatched" in said, said
    block = said.split("width: error:")[1].split("replay:")[0]
    assert "InterpreterError" in block and "site-packages" not in block, block
    assert not any(f"{sep}attnspec{sep}" in line for line in block.splitlines()[1:]
                   for sep in "/\\"), block  # the kernel's frames, not attnspec's
