"""The conformance suite as pytest items: one test per (subject, property).

`attnspec_pytest`, the torch-free `pytest11` entry point, adds the `--attnspec-*` options and
registers this module only when a run names a subject (`--attnspec-subject TARGET`,
`$ATTNSPEC_SUBJECT` or `--attnspec-builtins`). Tests are named `test_<property>[<subject>]`; a
failure prints the engine's message, the counterexample, the replay command and the largest
violation seen.
"""

from __future__ import annotations

import importlib.util
import json
import os
import traceback
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .._errors import AttnspecError
from ..common.options import RunOptions

if TYPE_CHECKING:
    from ..session.engine import Session

__all__ = ["subject_targets"]

_HERE = Path(__file__).resolve()
_SESSIONS = pytest.StashKey[dict[str, "Session | str"]]()
_OPTIONS = pytest.StashKey[RunOptions]()
_FLAGS = {"max_examples": "--attnspec-max-examples", "max_seq": "--attnspec-max-seq",
          "device": "--attnspec-device", "profile": "--attnspec-profile",
          "seed": "--attnspec-seed", "max_heads": "--attnspec-max-heads",
          "max_head_dim": "--attnspec-max-head-dim", "max_width": "--attnspec-max-width",
          "world_sizes": "--attnspec-world-sizes", "timeout": "--attnspec-timeout",
          "worker_user": "--attnspec-worker-user", "black_box": "--attnspec-black-box",
          "require": "--attnspec-require", "html": "--attnspec-html"}


def subject_targets(config: pytest.Config) -> list[str]:
    """The TARGETs this run checks: the options, else $ATTNSPEC_SUBJECT (comma-separated)."""
    chosen: list[str] = list(config.getoption("--attnspec-subject") or ())
    if not chosen and os.environ.get("ATTNSPEC_SUBJECT"):
        chosen = [t.strip() for t in os.environ["ATTNSPEC_SUBJECT"].split(",") if t.strip()]
    if config.getoption("--attnspec-builtins"):
        from ..subjects import BUILTIN, EXTRAS, KERNEL_BUILTIN

        chosen += [f"attnspec.subjects.{name}" for name in (*BUILTIN, *KERNEL_BUILTIN)
                   if name not in EXTRAS or importlib.util.find_spec(EXTRAS[name]) is not None]
    return chosen


def pytest_configure(config: pytest.Config) -> None:
    targets = subject_targets(config)
    if targets or not config.pluginmanager.has_plugin("attnspec-declared"):
        _configure(config, targets)
    if not targets:  # registered for a test file's ATTNSPEC_SUBJECT: `declared` configures
        return
    # The suite is this file's items: collected beside the paths given, or alone.
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        config.args.append(str(_HERE))
    else:
        config.args[:] = [str(_HERE)]


def _configure(config: pytest.Config, targets: list[str]) -> None:
    """The run's options (and the --attnspec-html path, checked against `targets`), once."""
    from .._errors import UsageError
    from ..common.options import RunOptions
    from .verify_cli import _world_sizes

    try:
        config.stash[_OPTIONS] = RunOptions(
            device=config.getoption("--attnspec-device"),
            profile=config.getoption("--attnspec-profile"),
            max_examples=config.getoption("--attnspec-max-examples"),
            seed=config.getoption("--attnspec-seed"),
            max_seq=config.getoption("--attnspec-max-seq"),
            max_heads=config.getoption("--attnspec-max-heads"),
            max_head_dim=config.getoption("--attnspec-max-head-dim"),
            max_width=config.getoption("--attnspec-max-width"),
            timeout=config.getoption("--attnspec-timeout"),
            world_sizes=_world_sizes(config.getoption("--attnspec-world-sizes")),
            worker_user=config.getoption("--attnspec-worker-user"),
            black_box=_black_box(config),
            require=tuple(config.getoption("--attnspec-require") or ()) or None)
        html = config.getoption("--attnspec-html", None)
        if html is not None:  # before the run, as the command line does
            from .html_report import check_html_path

            for target in targets:
                check_html_path(html, target=target)
    except UsageError as error:
        from .verify_cli import in_flags

        raise pytest.UsageError(in_flags(error, _FLAGS)) from None
    if _SESSIONS not in config.stash:  # once: a second declaring file keeps the first's
        config.stash[_SESSIONS] = {}
        _VERDICTS.clear()


def declared(collector: pytest.Module, value: Any) -> list[pytest.Item]:
    """The property tests of a test file's `ATTNSPEC_SUBJECT` (a TARGET, or a list of them),
    as that file's items: `pytest path/test_x.py::test_oracle[name]` runs one."""
    targets = [value] if isinstance(value, str) else value
    if not (isinstance(targets, list | tuple) and targets
            and all(isinstance(t, str) and t.strip() for t in targets)):
        raise collector.CollectError(
            f"attnspec: {collector.path.name}: ATTNSPEC_SUBJECT is {value!r:.80}, not a TARGET "
            "(\"pkg.module\" or \"path/to/impl.py\", either with :NAME) or a list of them.")
    try:
        _configure(collector.config, list(targets))
    except pytest.UsageError as error:
        raise collector.CollectError(f"attnspec: {error}") from None
    return [item for target in targets for item in _items(collector, target.strip())]


def _items(parent: pytest.Collector, target: str) -> Iterator[pytest.Item]:
    from ..properties import PROPERTY_IDS
    from ..properties.kernel import KERNEL_PROPERTY_IDS

    ids = KERNEL_PROPERTY_IDS if declares_kernel(target) else PROPERTY_IDS
    for prop in ids:
        yield _PropertyItem.from_parent(parent, name=f"test_{prop}[{_short(target)}]",
                                        target=target, prop=prop)


def _black_box(config: pytest.Config) -> bool:
    """--attnspec-black-box, else the ini's attnspec_black_box."""
    given = config.getoption("--attnspec-black-box")
    return bool(config.getini("attnspec_black_box") if given is None else given)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.resolve() == _HERE and _SESSIONS in parent.config.stash:
        return _Suite.from_parent(parent, path=file_path)
    return None


def pytest_report_header(config: pytest.Config) -> list[str]:
    targets = subject_targets(config)
    if not targets:
        return []
    options = config.stash[_OPTIONS]
    profile = f"{options.profile}{', derandomized (CI)' if options.ci else ''}"
    return [f"attnspec subjects: {', '.join(targets)}",
            f"attnspec profile: {profile}, {options.examples} examples per property, "
            f"device: {options.device}"]


# Each property item's verdict, by TARGET, as the process that reports the run sees them (the
# xdist controller too: user_properties travel with the reports), with its whole result and
# its session's header, for --attnspec-html.
_VERDICTS: dict[str, list[dict[str, Any]]] = {}
_VERDICT_KEY = "attnspec_verdict"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for key, value in report.user_properties:
        if key == _VERDICT_KEY and isinstance(value, dict):
            _VERDICTS.setdefault(str(value.get("target")), []).append(value)


def _unchecked() -> list[str]:
    """One line per TARGET whose properties all ran and none reached the subject."""
    lines = []
    for target, verdicts in _VERDICTS.items():
        if verdicts and all(v.get("verdict") == "skip" for v in verdicts):
            reasons = "; ".join(f"{v.get('property')}: {v.get('message')}" for v in verdicts)
            lines.append(f"attnspec: TARGET {target!r}: nothing was checked: no property's "
                         f"examples reached the subject ({reasons}).")
    return lines


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _unchecked():
        terminalreporter.write_line(line, red=True)


def _write_html(config: pytest.Config, path: str) -> None:
    """The HTML report of every TARGET checked: from this process's results and sessions, or,
    as xdist's controller, from the results the workers sent with their test reports (each
    failure's picture then replayed in a fresh session here)."""
    from ..common.report import PropertyResult, Report
    from ..properties import PROPERTY_IDS
    from ..properties.kernel import KERNEL_PROPERTY_IDS
    from .html_report import attach_pictures, write_pages

    order = {p: i for i, p in enumerate(dict.fromkeys([*PROPERTY_IDS, *KERNEL_PROPERTY_IDS]))}
    reports = []
    for target, verdicts in _VERDICTS.items():
        results = [PropertyResult(**v["result"]) for v in verdicts
                   if isinstance(v.get("result"), dict)]
        results.sort(key=lambda r: order.get(r.id, len(order)))  # xdist: in finishing order
        session = config.stash[_SESSIONS].get(target)
        live = None if isinstance(session, str) else session
        header = live.header() if live is not None else next(
            (v["header"] for v in verdicts if isinstance(v.get("header"), dict)), {})
        report = Report(target=target, header=header, properties=results, partial=False)
        attach_pictures(report, config.stash[_OPTIONS], session=live)
        reports.append(report.to_json())
    write_pages(reports, path)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    html = session.config.getoption("--attnspec-html", None)
    if html and _SESSIONS in session.config.stash and not hasattr(session.config,
                                                                  "workerinput"):
        _write_html(session.config, html)
    if hasattr(session.config, "workerinput"):  # an xdist worker: its controller decides
        return
    # A run that checked nothing is not a pass: the TARGET's or the options' error.
    if _unchecked() and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


def pytest_unconfigure(config: pytest.Config) -> None:
    for session in config.stash.get(_SESSIONS, {}).values():
        if not isinstance(session, str):
            session.close()


def _short(target: str) -> str:
    return target.removeprefix("attnspec.subjects.")


def _internal_error(error: BaseException, doing: str) -> str:
    """A bug in attnspec (or its environment) in a few lines, not as a pytest traceback."""
    from ..runner.subject import fault_text

    frames = traceback.extract_tb(error.__traceback__)
    where = (f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno} in "
             f"{frames[-1].name})" if frames else "")
    return (f"attnspec: internal error while {doing}: {fault_text(error)}{where}.\n"
            "This is attnspec's failure, or its environment's, not a verdict on the subject; "
            "pytest --full-trace shows the traceback.")


def _full_trace(config: pytest.Config) -> bool:
    return bool(config.getoption("fulltrace", False))


def declares_kernel(target: str) -> bool:
    """Whether TARGET's source says PROTOCOL = "kernel" (read, not run: the subject loads in
    its worker), so that its items are the kernel properties. A kernel that says so some other
    way is collected with the module ids and fails with a message that names the mismatch."""
    import ast
    import importlib.util

    from ..runner.subject import is_path, split_target

    spec, _ = split_target(target)
    path: str | None = spec if is_path(spec) else None
    if path is None:
        try:
            found = importlib.util.find_spec(spec)
        except (ImportError, ValueError):
            return False
        path = found.origin if found is not None else None
    if path is None or not path.endswith(".py"):
        return False
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return False
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "PROTOCOL" for t in node.targets):
            return isinstance(node.value, ast.Constant) and node.value.value == "kernel"
    return False


class _Suite(pytest.File):
    """Every (subject, property) pair of this run, as test items."""

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if _full_trace(self.config):
            return str(super().repr_failure(excinfo))
        return _internal_error(excinfo.value, "collecting the property tests")

    def collect(self) -> Iterator[pytest.Item]:
        for target in subject_targets(self.config):
            yield from _items(self, target)


class _PropertyFailed(Exception):
    pass


class _PropertyItem(pytest.Item):
    def __init__(self, *, target: str, prop: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target, self.prop = target, prop

    def _session(self) -> Session:
        from .._errors import TargetError, UsageError
        from ..session.engine import Session

        sessions = self.config.stash[_SESSIONS]
        if self.target not in sessions:
            try:
                sessions[self.target] = Session(self.target, self.config.stash[_OPTIONS],
                                                flags=_FLAGS)
            except (TargetError, UsageError) as error:
                from .verify_cli import in_flags

                # Remembered, so every property of this TARGET fails with the same one line.
                sessions[self.target] = f"attnspec: {in_flags(error, _FLAGS)}"
            except Exception as error:  # noqa: BLE001 - attnspec's own, said once per TARGET
                if _full_trace(self.config):
                    raise
                sessions[self.target] = _internal_error(
                    error, f"loading TARGET {self.target!r} in its worker")
        session = sessions[self.target]
        if isinstance(session, str):
            raise _PropertyFailed(session)
        return session

    def runtest(self) -> None:
        session = self._session()
        if self.prop not in session.ids:
            kind = "a kernel" if session.kernel else "a module"
            raise _PropertyFailed(f"attnspec: {self.target} loaded as {kind}, but was collected "
                                  "as the other kind: say PROTOCOL = \"kernel\" at the top "
                                  "level of its file, as a constant, for the plugin to see it")
        result = session.run(self.prop)
        # Plain JSON values (a header's TorchVersion is a str to JSON, not to xdist's wire).
        self.user_properties.append((_VERDICT_KEY, json.loads(json.dumps({
            "target": self.target, "property": self.prop, "verdict": result.verdict,
            "message": result.message, "result": asdict(result), "header": session.header()},
            default=str))))
        if result.verdict == "skip":
            pytest.skip(f"{self.prop}: {result.message}")
        if result.verdict == "incomplete":  # no pass: what a pass would say was not checked
            raise _PropertyFailed(f"{self.prop} incomplete on {self.target}: {result.message}")
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
        if _full_trace(self.config) or not isinstance(excinfo.value, Exception):
            return str(super().repr_failure(excinfo))
        if isinstance(excinfo.value, AttnspecError):
            from .verify_cli import in_flags

            return f"attnspec: {in_flags(excinfo.value, _FLAGS)}"
        return _internal_error(excinfo.value, f"checking {self.prop} on {self.target}")

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.target}: {self.prop}"
