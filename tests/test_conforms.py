"""What a pass means, at every front end: "conforms" only where the oracle ran (or black-box
was asked for, and said); incomplete (exit 3, `Report.status == "incomplete"`, a failed pytest
item) where a required check could not run; every skip with its reason in one line; the
coverage reached; and the hints for a subject written against the protocol the wrong way."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from torch import nn

import attnspec
from attnspec.common.options import RunOptions

HERE = Path(__file__).parent
UNNAMED = HERE / "hollow" / "unnamed_projections.py"

pytestmark = pytest.mark.slow


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "attnspec", *args], capture_output=True,
                          text=True, timeout=300, env=env, cwd=cwd or HERE.parent)


def test_incomplete_exits_3_says_why_last_and_black_box_exits_0_saying_so(tmp_path: Path,
                                                                        ) -> None:
    report = tmp_path / "r.json"
    done = cli("verify", str(UNNAMED), "--max-examples", "4", "--seed", "0", "--no-progress",
               "--report", str(report))
    assert done.returncode == 3, done.stdout + done.stderr
    *_, last, closing, _ = [line for line in done.stdout.splitlines() if line.strip()]
    why = ("incomplete (no failure, but not every check the run needs ran): oracle: required, "
           "but it did not run: the subject has no export_weights, and no projections were "
           "found by name")
    assert last.startswith(why), last  # the conclusion, then the closing line, then report:
    assert re.match(r"\d+ passed, 1 incomplete, \d+ skipped in [\d.]+ s: ", closing), closing
    assert closing.split(" s: ", 1)[1].startswith(why), closing
    assert "weights: none: no export_weights" in done.stdout  # in the header too
    data = json.loads(report.read_text())
    assert data["status"] == "incomplete" and data["conclusion"].startswith("incomplete")
    assert data["required"] == ["oracle"] and data["black_box"] is False

    done = cli("verify", str(UNNAMED), "--max-examples", "4", "--seed", "0", "--no-progress",
               "--black-box", "--report", str(report), "--html", str(tmp_path / "r.html"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "\nconforms (black-box: oracle not run)\n" in done.stdout, done.stdout
    data = json.loads(report.read_text())
    assert data["status"] == "pass" and data["conclusion"] == "conforms (black-box: oracle not run)"
    assert data["black_box"] is True and data["required"] == []
    page = (tmp_path / "r.html").read_text()
    assert "conforms (black-box: oracle not run)" in page
    assert "the subject has no export_weights" in page  # the skip's reason, on the table


def test_require_names_checks_that_must_run() -> None:
    subject = SimpleNamespace(__name__="ref", build=attnspec.CausalSelfAttention,
                              export_weights=lambda m: m.export_weights())
    report = attnspec.verify(subject, only=["width", "window"], require="window",
                             max_examples=2, database=False)
    assert report.status == "incomplete" and not report.ok
    assert report.result("window").verdict == "incomplete"
    assert report.result("window").message.startswith("required, but it did not run: the "
                                                      "subject speaks protocol 1")
    with pytest.raises(attnspec.UsageError, match="requires window, which only/skip leave out"):
        attnspec.verify(subject, only="width", require="window", max_examples=2,
                        database=False)
    with pytest.raises(attnspec.UsageError, match="nope"):
        attnspec.verify(subject, require="nope", max_examples=2, database=False)
    with pytest.raises(attnspec.UsageError, match="give one or the other"):
        RunOptions(black_box=True, require=("oracle",))


def test_only_without_the_oracle_says_it_was_not_selected() -> None:
    report = attnspec.verify("attnspec.subjects.reference", only="width", max_examples=2,
                             database=False, isolate=False)
    assert report.ok and report.conclusion == ("conforms (oracle not selected: only width ran)")


def test_a_conforming_run_ends_with_conforms_and_lists_skips_and_coverage() -> None:
    report = attnspec.verify("attnspec.subjects.reference", only=["oracle", "window", "mixing"],
                             max_examples=3, seed=0, database=False, isolate=False)
    text = report.summary()
    assert text.rstrip().endswith("\nconforms"), text
    assert "skipped:\n  window: the subject speaks protocol 1 (plain attention): it has no " \
           "window" in text
    coverage = text.split("coverage (what the examples reached):\n", 1)[1]
    assert coverage.startswith("  oracle  B "), coverage
    assert "| cpu 3" in coverage.splitlines()[0]


def test_the_plugin_fails_an_incomplete_property_unless_black_box(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(UNNAMED.read_text())

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
             "--attnspec-subject", "mine.py", "--attnspec-max-examples", "3",
             "-k", "oracle or width", *extra],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})

    done = run()
    assert done.returncode == 1, done.stdout[-3000:]
    assert "oracle incomplete on mine.py: required, but it did not run" in done.stdout
    assert "1 failed, 1 passed, 1 skipped" in done.stdout, done.stdout[-2000:]  # oracle_grad
    done = run("--attnspec-black-box")
    assert done.returncode == 0 and "1 passed, 2 skipped" in done.stdout, done.stdout[-2000:]
    (tmp_path / "pytest.ini").write_text("[pytest]\nattnspec_black_box = true\n")
    done = run()
    assert done.returncode == 0 and "1 passed, 2 skipped" in done.stdout, done.stdout[-2000:]


def test_coverage_declined_to_degenerate_examples_is_incomplete() -> None:
    """A module protocol 2 subject whose supports(spec) takes only specs of one head: its
    examples of every other H were declined, and the properties say so."""
    from attnspec import SpecAttention

    subject = SimpleNamespace(__name__="few", PROTOCOL=2, build=SpecAttention,
                              export_weights=lambda m: m.export_weights(),
                              supports=lambda spec: spec.n_head == 1 and spec.n_embd == 1)
    report = attnspec.verify(subject, only="oracle", max_examples=20, seed=0, database=False)
    result = report.result("oracle")
    assert result.verdict == "incomplete", report.summary()
    assert result.message.startswith("supports(spec) declined "), result.message
    assert result.declined > 0 and "declined" in report.summary()


# ---- a subject written against the protocol the wrong way: one line, exit 2 ---------------


WRONG = {
    "mha.py": ("from torch import nn\n\ndef build(n_embd, n_head):\n"
               "    return nn.MultiheadAttention(n_embd, n_head, batch_first=True)\n",
               "build returns torch.nn.MultiheadAttention, whose forward takes (query, key, "
               "value) and returns (output, weights): wrap it"),
    "kernel_no_protocol.py": ("import torch.nn.functional as F\n\n"
                              "def attention(q, k, v, *, causal):\n"
                              "    return F.scaled_dot_product_attention(q, k, v, "
                              "is_causal=causal)\n",
                              "defines attention(q, k, v, ...) but no build: a kernel says "
                              "PROTOCOL = \"kernel\""),
    "kernel_bshd.py": ("import torch.nn.functional as F\nPROTOCOL = 'kernel'\n\n"
                       "def attention(q, k, v, *, causal):\n"
                       "    q, k, v = (t.transpose(1, 2) for t in (q, k, v))\n"
                       "    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)\n"
                       "    return o.transpose(1, 2)\n",
                       "the kernel reads q, k and v as (B, T, H, D), but LAYOUT is \"bhsd\""),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_protocol_is_one_line_and_exit_2(tmp_path: Path, name: str) -> None:
    source, said = WRONG[name]
    (tmp_path / name).write_text(source)
    done = cli("verify", str(tmp_path / name), "--max-examples", "2", "--no-progress")
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_the_subjects_exception_shows_its_frames_not_attnspecs(tmp_path: Path) -> None:
    (tmp_path / "raising.py").write_text(textwrap.dedent("""\
        from torch import nn

        def helper(x):
            return x.view(-1, 7)  # the subject's own bug

        class Raising(nn.Module):
            def forward(self, x):
                return helper(x)

        def build(n_embd, n_head):
            if n_embd % n_head:
                raise ValueError("C % H")
            return Raising()
        """))
    report = attnspec.verify(str(tmp_path / "raising.py"), only="width", max_examples=2,
                             database=False)
    message = report.result("width").message
    assert "RuntimeError" in message
    assert f"at {tmp_path / 'raising.py'}:8 in forward: return helper(x)" in message, message
    assert f"at {tmp_path / 'raising.py'}:4 in helper: return x.view(-1, 7)" in message
    assert "attnspec" + os.sep + "runner" not in message


def test_divisibility_says_the_lines_to_add() -> None:
    report = attnspec.verify(SimpleNamespace(__name__="lax", build=lambda C, H: nn.Identity()),
                             only="divisibility", max_examples=3, seed=0, database=False)
    message = report.result("divisibility").message
    assert "if n_embd < 1 or n_head < 1 or n_embd % n_head:\n        raise ValueError(" in \
        message, message


def test_a_mask_one_off_is_diagnosed_as_such() -> None:
    target = str(HERE / "broken" / "mask_off_by_one.py")
    report = attnspec.verify(target, only="oracle", profile="ci", database=False,
                             isolate=False)
    assert "the diagonal shifted by one: each query also sees the next key" in \
        report.result("oracle").message
    example = {"B": 2, "T": 5, "C": 8, "H": 2, "seed": 3, "cuts": [1, 3]}
    replayed = attnspec.verify(target, only="causality", replay=example, database=False,
                               isolate=False).result("causality")
    assert replayed.verdict == "fail"
    assert "only the output at t itself moved" in replayed.message, replayed.message
    shifted = attnspec.verify(str(HERE / "broken" / "global_mean_leak.py"), only="causality",
                              replay=example, database=False, isolate=False)
    assert "only the output at t itself moved" not in shifted.result("causality").message


def test_a_failure_carried_in_state_is_named_so() -> None:
    report = attnspec.verify(str(HERE / "faulty" / "stale_after_warmup.py"), only="oracle",
                             max_examples=50, seed=0, database=False)
    result = report.result("oracle")
    assert result.verdict == "fail", report.summary()
    assert "the same example replayed alone, in a fresh worker, passes" in result.message


def test_kernel_default_scale_is_left_to_the_kernel() -> None:
    from attnspec.reference.conventions import KernelConventions

    def takes(q: object, k: object, v: object, *, causal: bool, scale: float | None = None,
              ) -> object:
        return q

    def needs(q: object, k: object, v: object, *, causal: bool, scale: float) -> object:
        return q

    assert KernelConventions.of(SimpleNamespace(attention=takes)).scale_default
    assert not KernelConventions.of(SimpleNamespace(attention=needs)).scale_default
