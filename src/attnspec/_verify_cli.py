"""`attnspec verify TARGET`: options, header, verdict table, exit status."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ._errors import TargetError, UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def add_verify_parser(sub: Any) -> None:
    verify = sub.add_parser(
        "verify", help="check an implementation against every property",
        description="Check TARGET (path/to/impl.py, pkg.module, either with :NAME) against the "
                    "properties of causal self-attention. Exit 0 when all hold, 1 when one "
                    "fails, 2 when TARGET cannot be loaded or the command is misused.")
    verify.add_argument("target", metavar="TARGET")
    verify.add_argument("--only", action="append", metavar="IDS",
                        help="comma-separated property ids to run")
    verify.add_argument("--skip", action="append", metavar="IDS",
                        help="comma-separated property ids to leave out")
    verify.add_argument("--device", choices=("cpu", "cuda", "all"), default="all",
                        help="where to run the subject (all: CUDA too, where present)")
    verify.add_argument("--dtype", action="append", metavar="DTYPE",
                        help="float32, float64, bfloat16, float16 (repeatable or comma-separated)")
    tier = verify.add_mutually_exclusive_group()
    tier.add_argument("--profile", choices=("smoke", "default", "thorough", "ci"),
                      default="default", help="examples per property: 10, 50, 400 (ci: 50, "
                                              "derandomized, no database)")
    tier.add_argument("--max-examples", type=int, metavar="N", help="examples per property")
    verify.add_argument("--seed", type=int, metavar="N", help="the same seed replays the run")
    verify.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                        help="seconds one example may take before the worker is killed (30)")
    verify.add_argument("--max-seq", type=int, default=64, metavar="T",
                        help="the longest sequence length drawn (64, at most 4096); raise it "
                             "past a blocked kernel's block size")
    verify.add_argument("--report", metavar="FILE.json", help="write a JSON report (atomically)")
    verify.add_argument("-x", "--exitfirst", action="store_true",
                        help="stop at the first property that does not pass")
    verify.add_argument("--replay", metavar="JSON",
                        help="run one example (the JSON object from a failure's replay command, "
                             "or a file holding it) with one --only")
    verify.add_argument("--no-database", action="store_true",
                        help="do not read or write Hypothesis's example database")
    verify.add_argument("--no-progress", action="store_true", help="no progress lines")


def _header(session_header: dict[str, Any], target: str) -> str:
    v = session_header["versions"]
    dtypes = "; ".join(f"{dev}: {', '.join(ds)}" for dev, ds in session_header["dtypes"].items())
    return (f"attnspec {v['attnspec']} verify {target}\n"
            f"subject: {session_header['subject']} ({session_header['origin']})\n"
            f"torch {v['torch']}, hypothesis {v['hypothesis']}, python {v['python']}\n"
            f"devices: {', '.join(session_header['devices'])}  dtypes: {dtypes}\n"
            f"profile: {session_header['profile']} ({session_header['max_examples']} examples "
            f"per property, T up to {session_header['max_seq']}), seed: "
            f"{session_header['seed']}, timeout: {session_header['timeout']:g}s\n")


def run_verify(args: argparse.Namespace) -> int:
    from ._engine import verify

    dtypes = [d.strip() for value in args.dtype or () for d in value.split(",") if d.strip()]
    replay = None
    if args.replay is not None:
        text = args.replay
        if os.path.isfile(text):  # the JSON saved to a file works as well as pasted
            with open(text) as handle:
                text = handle.read()
        try:
            replay = json.loads(text)
        except json.JSONDecodeError as error:
            raise UsageError(f"--replay {args.replay[:200]!r}: not JSON ({error}); give the "
                             "object a failure's replay command prints, or a file holding it."
                             ) from None
        if not isinstance(replay, dict):
            raise UsageError(f"--replay {args.replay[:200]!r}: expected a JSON object.")
    def progress(prop: str, done: int, total: int, result: Any) -> None:
        printer(prop, done, total, result)

    from ._engine import _progress_printer

    printer = (lambda *a: None) if args.no_progress else _progress_printer(sys.stderr)
    if args.max_seq == 1:
        print("attnspec verify: note: --max-seq 1 draws only T = 1, where causality, prefix "
              "and grad_causality have no later position to check.", file=sys.stderr)
    started: list[Any] = []

    def on_start(report: Any) -> None:
        started.append(report)  # the same object fills in as properties finish
        print(_header(report.header, args.target), flush=True)

    try:
        report = verify(
            args.target, only=args.only, skip=args.skip, device=args.device,
            dtypes=dtypes or None, profile=args.profile, max_examples=args.max_examples,
            seed=args.seed, timeout=args.timeout, max_seq=args.max_seq, report=args.report,
            progress=progress,
            exitfirst=args.exitfirst, replay=replay, database=not args.no_database,
            on_start=on_start,
        )
    except TargetError as error:
        print(f"attnspec verify: {error}", file=sys.stderr)  # verify() wrote the report
        return EXIT_USAGE
    except KeyboardInterrupt:
        if started:
            print("\n" + started[0].summary(), flush=True)
        kept = (f"; the report so far is in {args.report}, marked interrupted" if args.report
                else "")
        print(f"\nattnspec verify: interrupted{kept}.", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(report.summary())
    if report.write_error is not None:
        print(f"\nattnspec verify: the JSON report could not be written to "
              f"{report.write_error}", file=sys.stderr)
        return EXIT_FAILED if report.failures else EXIT_USAGE
    if args.report:
        print(f"\nreport: {args.report}")
    return EXIT_OK if report.ok else EXIT_FAILED
