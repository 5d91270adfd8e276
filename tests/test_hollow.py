"""A pass means attention: subjects that are not causal self-attention, or that decline their
way to a pass, get the verdict each file's EXPECTED_STATUS and EXPECTED say (tests/hollow/), and
none of them conforms unless black-box is asked for."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

import attnspec

HERE = Path(__file__).parent
HOLLOW = sorted(p for p in (HERE / "hollow").glob("*.py") if not p.name.startswith("_"))

pytestmark = pytest.mark.slow


def _declared(path: Path) -> Any:
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"hollow_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


@pytest.mark.parametrize("path", HOLLOW, ids=[p.stem for p in HOLLOW])
def test_a_hollow_subject_gets_its_expected_verdict(path: Path) -> None:
    declared = _declared(path)
    report = attnspec.verify(str(path), profile="ci", database=False, isolate=False)
    assert not report.ok, report.summary()
    assert report.status == declared.EXPECTED_STATUS, report.summary()
    for prop, verdict in declared.EXPECTED.items():
        assert report.result(prop).verdict == verdict, report.summary()
    for prop, text in getattr(declared, "MESSAGE", {}).items():
        assert text in report.result(prop).message, report.summary()
    assert report.conclusion.startswith(
        "incomplete" if report.status == "incomplete" else "fails"), report.conclusion
    black_box = getattr(declared, "BLACK_BOX_STATUS", None)
    if black_box is not None:
        again = attnspec.verify(str(path), profile="ci", database=False, isolate=False,
                                black_box=True)
        assert again.status == black_box and again.ok, again.summary()
        assert again.conclusion == "conforms (black-box: oracle not run)"
        assert again.to_json()["conclusion"] == again.conclusion


def test_a_dtype_the_draws_missed_is_not_blamed_on_supports_spec() -> None:
    """A module's supports(spec) never sees the dtype (AttentionSpec has none), so a run whose
    accepted draws happened to be all float32 is not incomplete for dtypes (hf_qwen3_v2 at 8
    examples in a checkout at another path was); a kernel's supports(case) does see it."""
    from attnspec.common.options import RunOptions
    from attnspec.common.report import PropertyResult
    from attnspec.session.engine import Session
    from attnspec.session.verdicts import State

    here = Path(__file__).parent
    for target, kernel_says in ((here / "good" / "hf_qwen3_v2.py", False),
                                (here / "kernels" / "good" / "sdpa_minimal.py", True)):
        with Session(str(target), RunOptions(database=False, dtypes=("float32", "bfloat16")),
                     isolate=False) as session:
            prop = "dtype"
            state = State(examples=8, declined=4)
            ex = session.replay_example(prop, {**({"B": 1, "H": 2, "G": 2, "Tq": 4, "Tk": 4,
                                                    "D": 8} if session.kernel else
                                                   {"B": 1, "T": 4, "C": 16, "H": 2}),
                                               "dtype": "float32"})
            for _ in range(8):
                state.drawn.add(prop, ex)
            result = PropertyResult(id=prop, verdict="pass")
            session.judge_coverage(prop, result, state, 8)
            assert (result.verdict == "incomplete") is kernel_says, (target.name, result)
