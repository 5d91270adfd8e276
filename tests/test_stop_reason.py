"""Why one property's search ended is recorded (verdicts.StopReason), and each reason makes
the result it should: every example run, a failure shrunk, a skip with no search, a full pass
that its quick pass had finished."""

from __future__ import annotations

from pathlib import Path

from attnspec.common.options import RunOptions
from attnspec.session.engine import _QUICK_EXAMPLES, Session
from attnspec.session.verdicts import StopReason

BROKEN = Path(__file__).parent / "broken" / "first_key_dropped.py"


def _options(examples: int) -> RunOptions:
    return RunOptions(max_examples=examples, seed=0, database=False)


def test_a_pass_ran_every_example_and_a_failure_was_shrunk() -> None:
    with Session("attnspec.subjects.reference", _options(6), isolate=False) as session:
        result, state = session._search("width", None, None, "full")
        assert result.verdict == "pass" and result.examples == 6
        assert state is not None and state.stop is StopReason.FINISHED
    with Session(str(BROKEN), _options(20), isolate=False) as session:
        result, state = session._search("oracle", None, None, "full")
        assert result.verdict == "fail", result.message
        assert state is not None and state.stop in (StopReason.FAILED, StopReason.SHRINK_BUDGET)
        assert state.failures and state.last is not None


def test_a_skip_searches_nothing_and_a_finished_quick_pass_is_continued() -> None:
    with Session("attnspec.subjects.reference", _options(_QUICK_EXAMPLES),
                 isolate=False) as session:
        skipped, none = session._search("window", None, None, "full")
        assert skipped.verdict == "skip" and none is None  # protocol 1: no window to draw
        quick, _ = session._search("width", None, None, "quick")
        full, state = session._search("width", None, None, "full")
        assert quick.verdict == full.verdict == "pass"
        assert state is not None and state.stop is StopReason.CONTINUED
        assert full.examples == _QUICK_EXAMPLES  # not run again
