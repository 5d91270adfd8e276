"""The conformance suite as a pytest plugin (entry point `pytest11: attnspec`).

    pytest --attnspec-subject my_pkg.attention        # your implementation (repeatable)
    ATTNSPEC_SUBJECT=path/to/impl.py pytest            # the same, from the environment
    pytest --attnspec-builtins                         # the reference and every built-in subject

One test per (subject, property), named `test_<property>[<subject>]`; a failure prints the
engine's message, the counterexample and a replay command. Without a subject the plugin adds
nothing to a test run. It imports Hypothesis only when a subject is checked.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ._engine import Session

__all__ = ["subject_targets"]

_HERE = Path(__file__).resolve()
_SESSIONS = pytest.StashKey[dict[str, "Session | str"]]()
_PROFILES = ("smoke", "default", "thorough", "ci")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attnspec", "attnspec conformance")
    group.addoption("--attnspec-subject", action="append", default=None, metavar="TARGET",
                    help="check TARGET (path/to/impl.py or pkg.module, either with :NAME); "
                         "repeatable; default: $ATTNSPEC_SUBJECT")
    group.addoption("--attnspec-builtins", action="store_true",
                    help="check the reference and every built-in subject")
    group.addoption("--attnspec-profile", default=None, choices=_PROFILES,
                    help="examples per property (default; ci where CI is set)")
    group.addoption("--attnspec-max-examples", type=int, default=None, metavar="N",
                    help="examples per property")
    group.addoption("--attnspec-device", default="all", choices=("cpu", "cuda", "all"))
    group.addoption("--attnspec-max-seq", type=int, default=64, metavar="T",
                    help="the longest sequence length drawn (64, at most 4096)")
    group.addoption("--attnspec-seed", type=int, default=None, metavar="N",
                    help="the same seed draws the same examples")


def subject_targets(config: pytest.Config) -> list[str]:
    """The TARGETs this run checks: the options, else $ATTNSPEC_SUBJECT (comma-separated)."""
    chosen: list[str] = list(config.getoption("--attnspec-subject") or ())
    if not chosen and os.environ.get("ATTNSPEC_SUBJECT"):
        chosen = [t.strip() for t in os.environ["ATTNSPEC_SUBJECT"].split(",") if t.strip()]
    if config.getoption("--attnspec-builtins"):
        from .subjects import BUILTIN, EXTRAS

        chosen += [f"attnspec.subjects.{name}" for name in BUILTIN
                   if name not in EXTRAS or importlib.util.find_spec(EXTRAS[name]) is not None]
    return chosen


def pytest_configure(config: pytest.Config) -> None:
    if not subject_targets(config):
        return
    from ._engine import check_limits
    from ._errors import UsageError

    try:
        check_limits(max_examples=config.getoption("--attnspec-max-examples"),
                     max_seq=config.getoption("--attnspec-max-seq"))
    except UsageError as error:
        raise pytest.UsageError(str(error)) from None
    config.stash[_SESSIONS] = {}
    # The suite is this file's items: collected beside the paths given, or alone.
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        config.args.append(str(_HERE))
    else:
        config.args[:] = [str(_HERE)]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.resolve() == _HERE and _SESSIONS in parent.config.stash:
        return _Suite.from_parent(parent, path=file_path)
    return None


def pytest_report_header(config: pytest.Config) -> list[str]:
    targets = subject_targets(config)
    if not targets:
        return []
    return [f"attnspec subjects: {', '.join(targets)}",
            f"attnspec profile: {_profile(config)}, device: "
            f"{config.getoption('--attnspec-device')}"]


def pytest_unconfigure(config: pytest.Config) -> None:
    for session in config.stash.get(_SESSIONS, {}).values():
        if not isinstance(session, str):
            session.close()


def _profile(config: pytest.Config) -> str:
    chosen: str | None = config.getoption("--attnspec-profile")
    return chosen or ("ci" if os.environ.get("CI") else "default")


def _short(target: str) -> str:
    return target.removeprefix("attnspec.subjects.")


class _Suite(pytest.File):
    """Every (subject, property) pair of this run, as test items."""

    def collect(self) -> Iterator[pytest.Item]:
        from ._properties import PROPERTY_IDS

        for target in subject_targets(self.config):
            for prop in PROPERTY_IDS:
                yield _PropertyItem.from_parent(self, name=f"test_{prop}[{_short(target)}]",
                                                target=target, prop=prop)


class _PropertyFailed(Exception):
    pass


class _PropertyItem(pytest.Item):
    def __init__(self, *, target: str, prop: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target, self.prop = target, prop

    def _session(self) -> Session:
        from ._engine import Session
        from ._errors import TargetError, UsageError

        sessions = self.config.stash[_SESSIONS]
        if self.target not in sessions:
            config = self.config
            try:
                sessions[self.target] = Session(
                    self.target, device=config.getoption("--attnspec-device"),
                    profile=_profile(config),
                    max_examples=config.getoption("--attnspec-max-examples"),
                    seed=config.getoption("--attnspec-seed"),
                    max_seq=config.getoption("--attnspec-max-seq"))
            except (TargetError, UsageError) as error:
                # Remembered, so every property of this TARGET fails with the same one line.
                sessions[self.target] = f"attnspec: {error}"
        session = sessions[self.target]
        if isinstance(session, str):
            raise _PropertyFailed(session)
        return session

    def runtest(self) -> None:
        result = self._session().run(self.prop)
        if result.verdict == "skip":
            pytest.skip(f"{self.prop}: {result.message}")
        if not result.ok:
            lines = [f"{self.prop} {result.verdict} on {self.target}: {result.message}",
                     f"counterexample: {result.counterexample}", f"replay: {result.replay}"]
            if result.largest is not None:
                lines.append(f"largest violation seen: {result.largest['measured']:.3g} "
                             f"(allowed {result.largest['allowed']:.3g}), replay: "
                             f"{result.largest['replay']}")
            raise _PropertyFailed("\n".join(lines))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, _PropertyFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.target}: {self.prop}"
