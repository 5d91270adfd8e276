"""Nothing passes unchecked: declarations checked at load, examples that never reached the
subject are no pass, and the report's edges (a quick pass cut short, a run killed early)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import attnspec
from attnspec import RoPE, SpecAttention, TargetError
from attnspec.common.options import RunOptions
from attnspec.common.report import PropertyResult
from attnspec.session.engine import Session

HERE = Path(__file__).parent


def _v2(**attrs: object) -> Any:
    return SimpleNamespace(__name__="v2", PROTOCOL=2, build=SpecAttention,
                           export_weights=lambda m: m.export_weights(), **attrs)


def _forged_rope(**fields: object) -> RoPE:
    """A RoPE whose fields skipped its own checks, as a subject can make one."""
    rope = RoPE()
    for name, value in fields.items():
        object.__setattr__(rope, name, value)
    return rope


# ---- VARIANTS: every listed value is checked at load ----------------------------------------

BAD_VARIANTS = {
    "negative window": ({"window": [4, -1]}, "VARIANTS['window'] lists -1, which no attention "
                        "spec can have: window must be a whole number of keys >= 1"),
    "string window": ({"window": ["x"]}, "VARIANTS['window'] lists 'x'"),
    "no kv heads": ({"n_kv_head": [0]}, "VARIANTS['n_kv_head'] lists 0"),
    "infinite scale": ({"scale": [float("inf")]}, "VARIANTS['scale'] lists inf, which no "
                       "attention spec can have: scale must be a finite number > 0"),
    "bias None": ({"bias": [None]}, "VARIANTS['bias'] lists None, which no attention spec can "
                  "have: bias must be True or False"),
    "NaN theta": ({"positions": [_forged_rope(theta=float("nan"))]},
                  "VARIANTS['positions'] lists RoPE(theta=nan, fraction=1.0, interleaved=False)"
                  ", which no attention spec can have: Invalid RoPE: theta=nan"),
    "fraction rotating nothing": ({"positions": [RoPE(fraction=1e-4)]},
                                  "VARIANTS['positions'] lists RoPE(theta=10000.0, "
                                  "fraction=0.0001, interleaved=False), which no attention "
                                  "spec can have: RoPE rotates int(head_dim * fraction)"),
}


@pytest.mark.parametrize("case", list(BAD_VARIANTS))
def test_a_variants_value_no_spec_can_have_is_a_target_error_naming_it(case: str) -> None:
    variants, message = BAD_VARIANTS[case]
    with pytest.raises(TargetError, match="^TARGET v2: " + _escaped(message)):
        attnspec.verify(_v2(VARIANTS=variants), only="width", max_examples=2, database=False)


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


def test_listed_values_a_spec_can_have_load() -> None:
    from attnspec.reference.spec import parse_variants
    from attnspec.runner.subject import check_variants

    check_variants(parse_variants({"window": [None, 1, 4096], "scale": [None, 0.5],
                                   "n_kv_head": "any", "bias": [False],
                                   "positions": [None, RoPE(fraction=0.25)]}), "'ok.py'")


def test_the_runner_checks_the_variants_the_worker_reports(monkeypatch: pytest.MonkeyPatch,
                                                           ) -> None:
    # The worker's process is the subject's: what its ready message says is checked again.
    from attnspec.runner import worker as _worker

    real = _worker.SubjectInfo.of

    def forged(subject: Any, sizes: Any = None) -> Any:
        info = real(subject) if sizes is None else real(subject, sizes)
        return dataclasses.replace(info, variants={"window": [-3]})

    monkeypatch.setattr(_worker.SubjectInfo, "of", staticmethod(forged))
    with pytest.raises(TargetError, match=r"VARIANTS\['window'\] lists -3"):
        Session(_v2(), RunOptions(max_examples=2, database=False))


# ---- examples that never reached the subject ------------------------------------------------

def test_specs_all_declined_check_nothing_and_the_run_says_why(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    report = attnspec.verify(_v2(supports=lambda spec: False), only="causality",
                             max_examples=3, seed=0, database=False, report=path)
    causality = report.result("causality")
    # T = 1 ends causality before the subject is asked: such examples are not a pass.
    assert causality.verdict == "skip" and causality.reached == 0, causality
    assert "supports(spec) declined all" in causality.message, causality.message
    assert not report.ok
    assert report.error is not None and report.error.startswith(
        "TARGET 'v2': nothing was checked: every spec attnspec drew was declined by "
        "supports(spec) (causality: "), report.error
    saved = json.loads(path.read_text())
    assert (saved["status"], saved["error"]) == ("error", report.error)


def test_a_property_whose_every_example_short_circuits_is_skipped_not_passed() -> None:
    report = attnspec.verify("attnspec.subjects.reference", only="width,causality", max_seq=1,
                             max_examples=3, seed=0, database=False, isolate=False)
    causality = report.result("causality")
    assert (causality.verdict, causality.examples, causality.reached) == ("skip", 3, 0)
    assert causality.message == ("none of its 3 examples reached the subject: each ended before "
                                 "calling it (T=1: nothing after any position)")
    assert report.result("width").verdict == "pass" and report.result("width").reached == 3
    assert report.error is None and report.ok  # width checked something


def test_a_subjects_own_world_sizes_are_used_unless_the_run_narrows_them(tmp_path: Path,
                                                                        ) -> None:
    path = tmp_path / "three_ranks.py"
    path.write_text("from attnspec import SpecAttention\nPROTOCOL = 2\nWORLD_SIZES = (3,)\n"
                    "build = SpecAttention\ndef shard_heads(module, mesh):\n    return module\n")
    with Session(str(path), RunOptions(database=False), isolate=False) as session:
        assert session.worlds("tp_equivalence") == [3]
        assert session.header()["world_sizes"] == [3]
    with Session(str(path), RunOptions(world_sizes=(2, 4), database=False),
                 isolate=False) as session:
        assert session.skip_reason("tp_equivalence") == (
            "this run's world_sizes [2, 4] exclude every one of the subject's WORLD_SIZES [3]: "
            "give one of those, or leave world_sizes out to use them all")


def test_runner_messages_name_the_option_as_the_front_end_spells_it() -> None:
    from attnspec.frontends.pytest_plugin import _FLAGS

    said = "no answer within timeout=2 s; the worker was killed and restarted."
    for flags, want in ((_FLAGS, "--attnspec-timeout 2 s"), (None, "timeout=2 s"),
                        ({"timeout": "--timeout"}, "--timeout 2 s")):
        with Session(_v2(), RunOptions(database=False), flags=flags) as session:
            assert session.in_flags(said) == said.replace("timeout=2 s", want)


# ---- the report's edges ---------------------------------------------------------------------

def test_the_report_says_partial_unfinished_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    seen: list[tuple[str, bool, str]] = []

    def start(_: object) -> None:  # once the subject loaded, before any property: a kill here
        data = json.loads(path.read_text())
        seen.append((data["status"], data["finished"], data["conclusion"]))

    report = attnspec.verify("attnspec.subjects.reference", only="width", max_examples=2,
                             database=False, isolate=False, report=path, on_start=start)
    assert seen == [("partial", False, "did not finish (the run was killed or broke): the "
                     "properties with a verdict are what it finished")]
    final = json.loads(path.read_text())
    assert (final["status"], final["finished"]) == ("pass", True) and report.ok


def test_an_interrupted_run_keeps_what_the_quick_pass_found(tmp_path: Path) -> None:
    path = tmp_path / "report.json"

    def progress(prop: str, done: int, total: int, result: PropertyResult | None) -> None:
        if prop == "width":  # the first full pass: Ctrl-C, after both quick passes passed
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        attnspec.verify("attnspec.subjects.reference", only="width,dtype", max_examples=11,
                        seed=0, database=False, isolate=False, report=path, progress=progress)
    saved = {p["id"]: p for p in json.loads(path.read_text())["properties"]}
    dtype = saved["dtype"]
    assert (dtype["verdict"], dtype["examples"]) == ("interrupted", 5), dtype
    assert dtype["message"] == ("Ctrl-C came before its full pass; its quick pass of 5 narrow "
                                "examples passed")
    assert saved["width"]["verdict"] == "interrupted"


# ---- the pytest plugin ----------------------------------------------------------------------

def _pytest_in(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ATTNSPEC_SUBJECT"}
    # The attnspec under test, also where PYTHONPATH named it relative to another directory.
    source = str(Path(attnspec.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, timeout=600, cwd=project, env=env)


BREAKS_SDPA = '''
import attnspec.session.engine

real = attnspec.session.engine.Session.__init__


def broken(self, target, *args, **kwargs):
    if target == "attnspec.subjects.sdpa":
        raise RuntimeError("Numpy is not available")
    real(self, target, *args, **kwargs)


attnspec.session.engine.Session.__init__ = broken
'''


@pytest.mark.slow
def test_the_plugin_names_its_own_timeout_and_says_an_internal_error_briefly(
        tmp_path: Path) -> None:
    for name in ("hangs.py", "_base.py"):
        (tmp_path / name).write_text((HERE / "faulty" / name).read_text())
    (tmp_path / "conftest.py").write_text(BREAKS_SDPA)
    done = _pytest_in(tmp_path, "--attnspec-subject", "hangs.py", "--attnspec-subject",
                      "attnspec.subjects.sdpa", "--attnspec-timeout", "1",
                      "--attnspec-max-examples", "3", "-k", "width")
    out = done.stdout
    assert done.returncode == 1, out[-3000:]
    assert "no answer within --attnspec-timeout 1 s" in out, out[-3000:]
    assert ("attnspec: internal error while loading TARGET 'attnspec.subjects.sdpa' in its "
            "worker: RuntimeError: Numpy is not available (at conftest.py:") in out, out[-3000:]
    assert "Traceback" not in out and "_pytest" not in out, out[-3000:]
    # Hypothesis mined only the project's own conftest, never attnspec's or torch's source.
    mined = {p.name for p in (tmp_path / ".hypothesis" / "constants").glob("*")}
    assert mined <= {hashlib.sha1(BREAKS_SDPA.encode()).hexdigest()[:16]}, mined


@pytest.mark.slow
def test_a_plugin_run_that_checked_nothing_is_a_usage_error(tmp_path: Path) -> None:
    done = _pytest_in(tmp_path, "--attnspec-subject", "attnspec.subjects.reference",
                      "-k", "window or gqa_grouping")
    assert done.returncode == 4, done.stdout[-3000:]  # pytest's usage error
    assert ("attnspec: TARGET 'attnspec.subjects.reference': nothing was checked: no "
            "property's examples reached the subject (window: the subject speaks protocol 1"
            ) in done.stdout, done.stdout[-3000:]


@pytest.mark.slow
def test_the_command_line_exits_2_when_nothing_was_checked(tmp_path: Path) -> None:
    from attnspec.frontends.cli import main

    path = tmp_path / "declines.py"
    path.write_text("from attnspec import SpecAttention\nPROTOCOL = 2\nbuild = SpecAttention\n"
                    "def supports(spec):\n    return False\n")
    code = main(["verify", str(path), "--only", "width", "--max-examples", "2",
                 "--no-database", "--no-progress", "--report", str(tmp_path / "r.json")])
    assert code == 2
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["status"] == "error" and "nothing was checked" in saved["error"]
