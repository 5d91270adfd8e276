"""`attnspec.verify_many`: many targets judged, each line yielded as it ends (frontends/many.py
has the judges and the JSONL report, frontends/ray_engine.py the Ray engine)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO

from .._errors import UsageError
from .many import Lines, Target, collect, judge_locally, options_digest

__all__ = ["default_jobs", "verify_many"]


def default_jobs() -> int:
    """One judge per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def verify_many(targets: Sequence[str] | str, *, jobs: int | None = None,
                report: str | os.PathLike[str] | None = None, resume: bool = False,
                engine: str = "local", ray_address: str | None = None,
                workers: int | None = 1, **options: Any) -> Iterator[dict[str, Any]]:
    """Judge many targets, each in a fresh runner of its own; yield one line (a dict, as the
    JSONL report holds it) per target as each finishes.

    ```python
    for line in attnspec.verify_many(["candidates/"], jobs=2, report="out.jsonl",
                                     profile="smoke"):
        print(line["target"], line["status"])        # conforms, fails, incomplete, error
    ```

    **Arguments:** `targets`: TARGETs and folders (each folder's `*.py` files that define a
    subject); `jobs`: targets judged at once (None: one per core); `report`: a JSONL file,
    one line per target, appended and flushed as each ends (it must not exist unless
    `resume`); `resume`: skip the targets whose key (their file's sha256) already has a line
    made with the same options; `engine`: `"local"` (judges forked on this machine) or
    `"ray"` (one Ray task per target, on the cluster at `ray_address`, or a local one);
    `workers`: runners per judge (1); the other keywords are `verify()`'s (`profile`, `seed`,
    `only`, ...), the same for every target.

    Lines of targets already judged (`resume`) are not yielded again. The skipped files of a
    folder are in `attnspec.frontends.many.collect`.
    """
    if isinstance(targets, str):
        targets = [targets]
    kwargs = _verify_options(options)
    check_options(kwargs)
    found, _ = collect(list(targets))
    yield from _judged(found, kwargs, jobs=jobs or default_jobs(), report=report,
                       resume=resume, engine=engine, ray_address=ray_address, workers=workers)


_VERIFY_DEFAULTS: dict[str, Any] = {
    "only": None, "skip": None, "device": "all", "dtypes": None, "profile": "default",
    "max_examples": None, "seed": None, "timeout": 30.0, "exitfirst": False,
    "database": True, "max_seq": None, "max_heads": None, "max_head_dim": None,
    "max_width": None, "world_sizes": None, "worker_user": None, "black_box": False,
    "require": None}


def check_options(options: Mapping[str, Any]) -> None:
    """Raise UsageError now for an option no target could run with (before any judge starts)."""
    from ..session.selection import select_properties
    from .api import run_options

    select_properties(options["only"], options["skip"], kernel=None)
    run_options(**{k: v for k, v in options.items() if k not in ("only", "skip", "exitfirst")})


def _verify_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """verify()'s keywords, JSON-ready (a judge may be another process, on another node)."""
    from ..common.options import MAX_HEAD_DIM, MAX_HEADS, MAX_WIDTH

    unknown = sorted(set(options) - set(_VERIFY_DEFAULTS))
    if unknown:
        raise UsageError(f"verify_many(): {', '.join(unknown)}: not an option of verify() that "
                         "applies to many targets (report, replay, progress, on_start and "
                         "isolate are the run's own).")
    given = {**_VERIFY_DEFAULTS, **options}
    for name, value in (("max_heads", MAX_HEADS), ("max_head_dim", MAX_HEAD_DIM),
                        ("max_width", MAX_WIDTH)):
        if given[name] is None:
            given[name] = value
    for name in ("only", "skip", "require"):
        if isinstance(given[name], str):
            given[name] = [given[name]]
    for name in ("only", "skip", "require", "dtypes", "world_sizes"):
        if given[name] is not None:
            given[name] = list(given[name])
    return given


def _judged(targets: Sequence[Target], options: Mapping[str, Any], *, jobs: int,
            report: str | os.PathLike[str] | None, resume: bool, engine: str,
            ray_address: str | None, workers: int | None,
            stream: TextIO | None = None, lines: Lines | None = None,
            ) -> Iterator[dict[str, Any]]:
    """Each target's line as it ends, written to the report first; `lines` already open."""
    if engine not in ("local", "ray"):
        raise UsageError(option="engine", value=engine, reason="give local or ray.")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise UsageError(option="jobs", value=jobs, reason="give a whole number >= 1.")
    digest = options_digest(options)
    if lines is None:
        lines = Lines(None if report is None else os.fspath(report), digest, resume, stream)
    try:
        todo, copies = _unjudged(targets, lines)
        if engine == "ray":
            from .ray_engine import judge_on_ray

            produced = judge_on_ray(todo, options, digest, jobs=jobs, address=ray_address,
                                    workers=workers)
        else:
            produced = judge_locally(todo, options, digest, jobs, workers)
        with contextlib.closing(produced):
            for line in produced:
                lines.write(line)
                yield line
                for copy in copies.pop(line["key"], []):  # same file, another name
                    again = {**line, "target": copy.name, "path": copy.path,
                             "same_as": line["target"]}
                    lines.write(again)
                    yield again
    finally:
        lines.close()


def _unjudged(targets: Sequence[Target], lines: Lines
              ) -> tuple[list[Target], dict[str, list[Target]]]:
    """The targets to judge (one per key, not in the report yet), and the others of each key."""
    todo: dict[str, Target] = {}
    copies: dict[str, list[Target]] = {}
    for target in targets:
        if target.sha256 in lines.judged:
            continue
        if target.sha256 in todo:
            copies.setdefault(target.sha256, []).append(target)
        else:
            todo[target.sha256] = target
    return list(todo.values()), copies
