"""`attnspec verify T1 T2 DIR ...`: many targets, a JSONL report, progress and a summary."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Any

from .._errors import UsageError
from ..common.report import coloured, printable, wants_colour
from .verify_cli import (
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    _SafeStream,
    _signals_interrupt,
    _world_sizes,
)

# The options of one target's run that have no meaning for many.
_ONE_TARGET = (("replay", "--replay"), ("html", "--html"), ("hf_backend", "--hf-backend"))
_ORDER = ("conforms", "fails", "incomplete", "error")


def is_many(args: argparse.Namespace) -> bool:
    """Whether the command asks for many targets: several, a folder, or an option of many."""
    targets = args.target if isinstance(args.target, list) else [args.target]
    report = args.report or ""
    # A package's folder alone stays one TARGET, imported as the package (as before folders).
    return (len(targets) > 1 or any(os.path.isdir(t) and not os.path.isfile(
                os.path.join(t, "__init__.py")) for t in targets)
            or args.jobs is not None or args.resume or args.engine is not None
            or report.endswith(".jsonl"))


def _options(args: argparse.Namespace) -> dict[str, Any]:
    from .many_api import _verify_options

    dtypes = [d.strip() for value in args.dtype or () for d in value.split(",") if d.strip()]
    return _verify_options({
        "only": args.only, "skip": args.skip, "device": args.device,
        "dtypes": dtypes or None, "profile": args.profile, "max_examples": args.max_examples,
        "seed": args.seed, "timeout": args.timeout, "max_seq": args.max_seq,
        "max_heads": args.max_heads, "max_head_dim": args.max_head_dim,
        "max_width": args.max_width, "world_sizes": _world_sizes(args.world_sizes),
        "worker_user": args.worker_user, "exitfirst": args.exitfirst,
        "database": not args.no_database, "black_box": args.black_box,
        "require": args.require})


def run_many(args: argparse.Namespace) -> int:
    """Judge every target; the exit status: 0 all conform, 1 one fails or errs, 3 none fails
    but one is incomplete, 2 misuse, 130 (128 + N) interrupted."""
    for name, flag in _ONE_TARGET:
        if getattr(args, name, None) is not None:
            raise UsageError(f"{flag}: an option of one target's run; with several targets, "
                             "run the one it is for alone (each failure's line in the JSONL "
                             "report gives its replay command).")
    if args.ray_address is not None and args.engine != "ray":
        raise UsageError(f"--ray-address {args.ray_address}: for --engine ray.")
    to_stdout = args.report == "-"
    table = _SafeStream(sys.stderr if to_stdout else sys.stdout)  # the closing line's
    err = _SafeStream(sys.stderr)
    out = _SafeStream(None) if args.quiet else table
    from ..runner import spawn
    from ..runner.isolation import make_undumpable

    if "torch" not in sys.modules:  # the judges fork from here: their workers' OpenMP reads it
        os.environ.update(spawn.worker_env(dict(os.environ)))
    make_undumpable()  # no same-user process may read this one's memory
    from .many import Lines, collect, options_digest
    from .many_api import _judged, check_options, default_jobs

    options = _options(args)
    check_options(options)
    targets, skipped = collect(args.target)
    jobs = args.jobs or default_jobs()
    digest = options_digest(options)
    lines = Lines(None if to_stdout else args.report, digest, args.resume,
                  _SafeStream(sys.stdout) if to_stdout else None)  # type: ignore[arg-type]
    before = sum(1 for t in targets if t.sha256 in lines.judged)
    engine = args.engine or "local"
    print(f"attnspec verify: {len(targets)} target{'s' * (len(targets) != 1)}, {jobs} "
          f"job{'s' * (jobs != 1)}, {engine} engine"
          + (f", report {args.report}" if args.report and not to_stdout else "")
          + (f"; {before} already judged (--resume, options {digest})" if args.resume else ""),
          file=out, flush=True)
    for skip in skipped:
        print(f"  skipped {printable(skip.path)}: {skip.reason}", file=out)
    if lines.unreadable:
        print(f"  {lines.unreadable} line(s) of {args.report} were not verdicts (cut short or "
              "not JSON): their targets are judged again", file=err)
    if not targets:
        print("attnspec verify: nothing to judge.", file=err)
        return EXIT_OK
    import torch  # noqa: F401 - imported once here, so that every forked judge starts with it

    started = time.perf_counter()
    counts = dict.fromkeys(_ORDER, 0)
    done: list[dict[str, Any]] = [lines.judged[t.sha256] for t in targets
                                  if t.sha256 in lines.judged]
    for line in done:
        counts[line["status"]] = counts.get(line["status"], 0) + 1
    total = len(targets) - before
    with _signals_interrupt() as stop:
        try:
            for k, line in enumerate(_judged(targets, options, jobs=jobs, report=None,
                                             resume=args.resume, engine=engine,
                                             ray_address=args.ray_address,
                                             workers=args.workers or 1, lines=lines), 1):
                done.append(line)
                counts[line["status"]] = counts.get(line["status"], 0) + 1
                if not args.no_progress:
                    _progress(out, k, total, started, line)
        except KeyboardInterrupt:
            stop.stopping = True
            name = signal.Signals(stop.signum).name if stop.signum else "Ctrl-C"
            lost = total - (len(done) - before)
            print(f"\nattnspec verify: interrupted by {name}: {len(done) - before} judged"
                  + (f" and in {args.report}" if args.report and not to_stdout else "")
                  + f", {lost} not (those under way lost)"
                  + ("; --resume continues" if args.report and not to_stdout else ""),
                  file=err, flush=True)
            _summary(out, table, done, counts, time.perf_counter() - started, jobs, args.quiet)
            return 128 + stop.signum if stop.signum else EXIT_INTERRUPTED
    _summary(out, table, done, counts, time.perf_counter() - started, jobs, args.quiet)
    if counts.get("fails") or counts.get("error"):
        return EXIT_FAILED
    return EXIT_INCOMPLETE if counts.get("incomplete") else EXIT_OK


def _progress(out: _SafeStream, k: int, total: int, started: float,
              line: dict[str, Any]) -> None:
    wall = time.perf_counter() - started
    left = wall / k * (total - k)
    conclusion = "" if line["status"] == "conforms" else "  " + line["conclusion"].split("\n")[0]
    status = f"{line['status']:<10}"
    if wants_colour(out):
        status = coloured(status, line["status"])
    print(f"[{k:>{len(str(total))}}/{total}] {status} {printable(line['target'])}  "
          f"{line['seconds']:.1f} s  (about {left:.0f} s left){printable(conclusion[:200])}",
          file=out, flush=True)


def _summary(out: _SafeStream, table: _SafeStream, done: list[dict[str, Any]],
             counts: dict[str, int], wall: float, jobs: int, quiet: bool) -> None:
    if done and not quiet:
        slowest = sorted(done, key=lambda line: -float(line.get("seconds") or 0))[:5]
        print("\nslowest: " + ", ".join(f"{printable(s['target'])} {s['seconds']:.1f} s"
                                        for s in slowest), file=out)
        bad = [line for line in done if line["status"] != "conforms"]
        for line in bad[:50]:
            print(f"  {line['status']:<10} {printable(line['target'])}: "
                  f"{printable(line['conclusion'].split(chr(10))[0][:300])}", file=out)
        if len(bad) > 50:
            print(f"  ... and {len(bad) - 50} more (the JSONL report has them all)", file=out)
    parts = [f"{counts[s]} {s}" for s in _ORDER if counts.get(s)]
    print(("" if quiet else "\n") + f"{', '.join(parts) or 'nothing judged'} in {wall:.1f} s "
          f"({len(done)} target{'s' * (len(done) != 1)}, {jobs} job{'s' * (jobs != 1)})",
          file=table, flush=True)
