"""The run loop of one verify: the runners (lanes), the quick pass and the full pass, and the
report written after every verdict (`attnspec.verify` calls `run`)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .._errors import TargetError, UsageError
from ..common.options import (
    RunOptions,
)
from ..common.report import Progress, PropertyResult, Report, check_report_path, progress_printer
from ..properties import TWINNED
from ..properties.base import Example
from ..properties.kernel import (
    KERNEL_TWINNED,
)
from .engine import (
    _MAX_WORKERS,
    _QUICK_EXAMPLES,
    Session,
)
from .environment import _target_name
from .lanes import Lane, Passes, fork_unsafe_reason
from .selection import select_properties


def run(target: Any, options: RunOptions, props: list[str], *,
        only: Iterable[str] | str | None, skip: Iterable[str] | str | None,
        report: str | os.PathLike[str] | None, isolate: bool | None,
        progress: bool | Progress, exitfirst: bool, replay: Mapping[str, Any] | Example | None,
        on_start: Callable[[Report], None] | None, workers: int | None) -> Report:
    """One verify of `target` with `options` over `props` (`attnspec.verify`,
    frontends/api.py, says what each argument means): the runners, the quick pass and the
    full pass, the report written after every verdict."""
    if replay is not None and len(props) != 1:
        raise UsageError(option="only", value=",".join(props),
                         reason="a replay runs one example of one property: give exactly one.")
    if report is not None:
        check_report_path(report)
    show = progress_printer(sys.stderr) if progress is True else (progress or None)
    lane_count, lane_note = _lane_count(workers, target, isolate, replay, props, exitfirst)
    result = Report(target=_target_name(target), header={},
                    properties=[PropertyResult(id=p) for p in props], running=True)
    _save(result, report)  # now: a run killed before its first verdict leaves one that says so
    # Without a quick pass to load the twin beside, its process starts with the worker's.
    ahead = (replay is not None or options.examples <= 2 * _QUICK_EXAMPLES) and any(
        p in TWINNED or p in KERNEL_TWINNED for p in props)
    lanes: list[Lane] = []
    try:
        # Forked first, before this process has a worker: each lane's starts (its torch
        # import) beside this one's, and loads the subject once this Session has (Lane.go).
        for k in range(1, lane_count):
            try:
                lanes.append(Lane(lambda: Session(target, options, isolate=True),
                                  _QUICK_EXAMPLES, str(k), others=lanes,
                                  prestart=options.worker_user is None,  # else as that user
                                  silence=lane_silence(options.timeout),
                                  stopped=options.timeout))
            except OSError as error:  # no fork or pipe to be had: the runners there are
                lane_note = f"{len(lanes) + 1} runners, not {lane_count}: a fork failed ({error})"
                lane_count = len(lanes) + 1
                break
        session = Session(target, options, isolate=isolate, twin_ahead=ahead)
    except KeyboardInterrupt:  # Ctrl-C while the subject loads: the report says so
        _close_lanes(lanes)
        result.interrupted = True
        _save(result, report)
        raise
    except TargetError as error:  # the report says why nothing ran
        _close_lanes(lanes)
        result.error, result.partial, result.running = str(error), False, False
        _save(result, report)
        raise
    except BaseException:
        _close_lanes(lanes)
        raise
    with session, _closing(lanes):
        for lane in lanes:
            lane.go()
        props = select_properties(only, skip, kernel=session.kernel)
        left_out = [p for p in options.require or () if p not in props]
        if left_out:
            raise UsageError(option="require", value=",".join(options.require or ()),
                             reason=f"requires {', '.join(left_out)}, which only/skip leave out "
                                    "of this run.")
        if [p.id for p in result.properties] != props:
            result.properties = [PropertyResult(id=p) for p in props]
        if replay is not None and len(props) != 1:
            raise UsageError(option="only", value=",".join(props),
                             reason="a replay runs one example of one property: give exactly "
                                    "one.")
        result.header = {**session.header(), "workers": lane_count,
                         **({"workers_note": lane_note} if lane_note else {})}
        example = replay if isinstance(replay, Example) or replay is None else \
            session.replay_example(props[0], replay)
        if on_start is not None:
            on_start(result)
        _save(result, report)
        quick = replay is None and session.max_examples > 2 * _QUICK_EXAMPLES
        passes = Passes(session, props, result, lambda: _save(result, report), show, exitfirst,
                        _QUICK_EXAMPLES if quick else 0, lanes, example)
        try:
            passes.run()
            result.partial = any(p.verdict == "not_run" for p in result.properties)
            result.error = session.nothing_checked(result.properties)
            result.running = False
        except KeyboardInterrupt:  # each pass under way kept its partial verdict (Passes.run)
            result.interrupted = True
            raise
        finally:  # an internal error leaves status running: the run did not finish
            _close_lanes(lanes)  # before the session: a lane's worker dies with its runner
            session.close()  # first: nothing the subject started is left to rewrite the report
            for i, passed in passes.quick_passed.items():
                if result.properties[i].verdict == "not_run" and not result.properties[i].examples:
                    result.properties[i] = _quick_pass_only(passed, result.interrupted)
            if session.lane_notes:
                result.header["workers_note"] = "; ".join(
                    filter(None, [result.header.get("workers_note"), *session.lane_notes]))
            _save(result, report)
    return result


def _lane_count(workers: int | None, target: Any, isolate: bool | None,
                replay: Any, props: list[str], exitfirst: bool) -> tuple[int, str | None]:
    """How many runners this verify uses, and why fewer than asked (None: as asked)."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or not 1 <= workers <= _MAX_WORKERS):
        raise UsageError(option="workers", value=workers,
                         reason=f"must be a whole number from 1 to {_MAX_WORKERS} (how many "
                                "runners check properties at once).")
    in_process = not isinstance(target, str) or isolate is False
    if workers is not None and workers > 1 and in_process:
        raise UsageError(option="workers", value=workers,
                         reason="the subject runs in this process (a Python object as TARGET, "
                                "or isolate=False), and each further runner loads it by name "
                                "in a worker of its own; give a TARGET string, or workers=1.")
    if workers is None:  # -x stops at a quick pass, mostly before a second runner has loaded
        workers = 1 if exitfirst else min(2, len(os.sched_getaffinity(0)) if hasattr(
            os, "sched_getaffinity") else os.cpu_count() or 1)
    if workers == 1 or in_process or replay is not None or len(props) < 2:
        return 1, None
    unsafe = fork_unsafe_reason()
    if unsafe is not None:
        return 1, f"one runner, not {workers}: {unsafe}"
    return workers, None


def lane_silence(timeout: float) -> float:
    """How long a lane may send nothing: its passes send progress after each example, which
    the worker's supervision bounds (10 x --timeout of wall time), but a quick pass, or
    shrinking after a failure, sends none until its verdict, so a generous multiple."""
    return 100 * timeout + 60


def _close_lanes(lanes: list[Lane]) -> None:
    for lane in lanes:
        lane.close(wait=2.0)


@contextlib.contextmanager
def _closing(lanes: list[Lane]) -> Iterator[None]:
    """Every lane closed however the run ends (each closes once: Passes may have already)."""
    try:
        yield
    finally:
        _close_lanes(lanes)


def _quick_pass_only(passed: PropertyResult, interrupted: bool) -> PropertyResult:
    """A property whose full pass never ran: what its quick pass found, and no verdict."""
    why = "Ctrl-C came" if interrupted else "the run stopped at the first failure"
    return dataclasses.replace(
        passed, verdict="interrupted" if interrupted else "not_run",
        message=f"{why} before its full pass; its quick pass of {passed.examples} narrow "
                "examples passed")


def _save(result: Report, path: str | os.PathLike[str] | None) -> None:
    """Write the report; a failure (a full disk) is kept on it, not raised: no verdict is lost."""
    if path is None:
        return
    try:
        result.write(path)
        result.write_error = None
    except (OSError, ValueError, UsageError) as error:
        result.write_error = f"{os.fspath(path)!r}: {error}"
