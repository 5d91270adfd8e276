"""A subject written against any published protocol keeps its verdict: each file in
tests/compat/ (copied once from the repository's history, never edited) gets what it got then,
tests/compat/expected.json: a subject that conformed conforms (nothing fails, nothing is
incomplete), and one that failed still fails every property it failed then. New properties may
fail a broken subject too (more power), never a correct one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import attnspec

HERE = Path(__file__).parent / "compat"
EXPECTED = {k: v for k, v in json.loads((HERE / "expected.json").read_text()).items()
            if not k.startswith("_")}
FILES = sorted(p.name for p in HERE.glob("v*.py"))
FULL = os.environ.get("ATTNSPEC_CATALOGUE", "") == "full"

pytestmark = pytest.mark.slow


def test_every_compat_subject_has_its_verdict_recorded() -> None:
    assert sorted(EXPECTED) == FILES


@pytest.mark.parametrize("name", FILES)
def test_a_subject_keeps_the_verdict_it_got_then(name: str) -> None:
    if "hf_" in name:
        pytest.importorskip("transformers")
    then = EXPECTED[name]
    # As its era's CI ran it: ci profile, seed 0; here in process, ranks over 2 processes.
    # CI's share (as the catalogue's): a correct one 8 examples a property, a broken one the
    # properties it failed then; ATTNSPEC_CATALOGUE=full (nox -s catalogue) runs them whole.
    share: dict[str, object] = {} if FULL else (
        {"max_examples": 8} if then["then"] == "pass" else {"only": then["failed"]})
    report = attnspec.verify(str(HERE / name), profile="ci", seed=0, database=False,
                             isolate=False, world_sizes=(2,), **share)  # type: ignore[arg-type]
    if then["then"] == "pass":
        assert report.ok and report.status == "pass", report.summary()
        return
    failed = {p.id for p in report.failures}
    assert set(then["failed"]) <= failed, (f"{name} failed {sorted(then['failed'])} then, "
                                           f"now {sorted(failed)}:\n{report.summary()}")
