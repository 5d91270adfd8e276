"""The conformance suite: pytest front end over attnspec's engine.

    pytest conformance                                  # the reference and every built-in subject
    pytest conformance --subject path/to/impl.py        # your implementation (repeatable)
    ATTNSPEC_SUBJECT=pkg.mod:NAME pytest conformance    # the same, from the environment

One test per (subject, property); a failure prints the engine's message and a replay command.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from attnspec._engine import PROFILES, Session, check_limits
from attnspec._errors import TargetError, UsageError
from attnspec.subjects import BUILTIN


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attnspec")
    group.addoption("--subject", action="append", default=None, metavar="TARGET",
                    help="TARGET to check (repeatable); default: ATTNSPEC_SUBJECT or built-ins")
    group.addoption("--profile", default=None, choices=sorted(PROFILES),
                    help="examples per property (default; ci when CI is set)")
    group.addoption("--max-examples", type=int, default=None, help="examples per property")
    group.addoption("--device", default="all", choices=("cpu", "cuda", "all"))
    group.addoption("--max-seq", type=int, default=64, metavar="T",
                    help="the longest sequence length drawn (64, at most 4096)")
    group.addoption("--attnspec-seed", type=int, default=None, help="Hypothesis seed")


def pytest_configure(config: pytest.Config) -> None:
    try:
        check_limits(max_examples=config.getoption("--max-examples"),
                     max_seq=config.getoption("--max-seq"))
    except UsageError as error:
        raise pytest.UsageError(str(error)) from None


def _targets(config: pytest.Config) -> list[str]:
    chosen = config.getoption("--subject")
    if not chosen and os.environ.get("ATTNSPEC_SUBJECT"):
        chosen = [t for t in os.environ["ATTNSPEC_SUBJECT"].split(",") if t.strip()]
    if chosen:
        return chosen
    names = [n for n in BUILTIN
             if n != "hf_gpt2" or importlib.util.find_spec("transformers") is not None]
    return [f"attnspec.subjects.{name}" for name in names]


def pytest_report_header(config: pytest.Config) -> list[str]:
    profile = config.getoption("--profile") or ("ci" if os.environ.get("CI") else "default")
    return [f"attnspec subjects: {', '.join(_targets(config))}",
            f"attnspec profile: {profile}, device: {config.getoption('--device')}"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "subject" in metafunc.fixturenames:
        targets = _targets(metafunc.config)
        metafunc.parametrize("subject", targets, ids=[t.rsplit(".", 1)[-1] if t.startswith(
            "attnspec.subjects.") else t for t in targets], scope="session")


@pytest.fixture(scope="session")
def sessions(request: pytest.FixtureRequest) -> Iterator[dict[str, Session | str]]:
    """Open sessions by TARGET, or the one-line reason a TARGET could not be opened."""
    opened: dict[str, Session | str] = {}
    yield opened
    for session in opened.values():
        if isinstance(session, Session):
            session.close()


@pytest.fixture
def check(request: pytest.FixtureRequest, subject: str,
          sessions: dict[str, Session | str]) -> Callable[[str], Any]:
    """check(property_id): run the property on the subject; fail with the engine's message."""
    config = request.config

    def run(prop: str) -> Any:
        if subject not in sessions:
            try:
                sessions[subject] = Session(
                    subject, device=config.getoption("--device"),
                    profile=config.getoption("--profile") or ("ci" if os.environ.get("CI")
                                                              else "default"),
                    max_examples=config.getoption("--max-examples"),
                    seed=config.getoption("--attnspec-seed"),
                    max_seq=config.getoption("--max-seq"))
            except (TargetError, UsageError) as error:
                # Remembered, so every property of this TARGET fails with the same one line.
                sessions[subject] = f"attnspec: {error}"
        session = sessions[subject]
        if isinstance(session, str):
            pytest.fail(session, pytrace=False)
        result = session.run(prop)
        if result.verdict == "skip":
            pytest.skip(f"{prop}: {result.message}")
        if not result.ok:
            counterexample = result.counterexample or {}
            pytest.fail(f"{prop} {result.verdict} on {subject}: {result.message}\n"
                        f"counterexample: {counterexample}\nreplay: {result.replay}",
                        pytrace=False)
        return result

    return run
