"""`attnspec verify TARGET`: options, header, verdict table, exit status."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from types import FrameType
from typing import Any, TextIO

from .._errors import TargetError, UsageError
from ..common.options import (
    DEVICES,
    HEAD_DIM_LIMIT,
    HEADS_LIMIT,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_SEQ_LIMIT,
    MAX_WIDTH,
    PROFILES,
    WIDTH_LIMIT,
)
from ..common.report import (
    PropertyResult,
    Report,
    check_report_path,
    coloured,
    is_stream,
    printable,
    wants_colour,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
# A replay example is one short object (a few hundred characters); far more is something else.
REPLAY_MAX_CHARS = 100_000
# What `timeout`, CI cancellation and `docker stop` send: they end a run as Ctrl-C does.
STOP_SIGNALS = ("SIGTERM", "SIGHUP")


class _SafeStream:
    """A text stream for the CLI's messages whose writes never raise: when the stream is None
    (`2>&-`), closed, or a broken pipe (`| head`), output is dropped and the run goes on."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream
        self.broken = stream is None

    def write(self, text: str) -> int:
        if not self.broken and self._stream is not None:
            try:
                self._stream.write(text)
            except (OSError, ValueError):
                self._break()
        return len(text)

    def flush(self) -> None:
        if not self.broken and self._stream is not None:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._break()

    def isatty(self) -> bool:
        try:
            return not self.broken and self._stream is not None and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def _break(self) -> None:
        self.broken = True
        quiet(self._stream)


def quiet(stream: TextIO | None) -> None:
    """Point a broken stream's descriptor at /dev/null, so that what it still buffers is
    flushed there at exit instead of as Python's "Exception ignored ... BrokenPipeError"."""
    if stream is None:
        return
    try:
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):  # no descriptor (a test's capture), or none to spare
        return
    try:
        os.dup2(devnull, fd)
    except OSError:
        pass
    finally:
        os.close(devnull)


def flush_quietly(*streams: TextIO | None) -> None:
    """Flush stdout and stderr before exit; a broken one is quieted (see `quiet`)."""
    for stream in streams:
        if stream is None:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):
            quiet(stream)


class _Stop:
    """Which stop signal ended the run (None: none, or Ctrl-C)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.stopping = False


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[_Stop]:
    """While verify runs, SIGTERM and SIGHUP raise KeyboardInterrupt as Ctrl-C does, so the
    report is written marked interrupted; the previous handlers come back afterwards."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop  # only the main thread may set handlers (and receives signals)
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.stopping:
            return  # a second stop signal while the report is written would only lose it
        stop.stopping, stop.signum = True, signum
        raise KeyboardInterrupt

    previous: dict[int, Any] = {}
    for name in STOP_SIGNALS:
        number = getattr(signal, name, None)
        if number is None:
            continue  # no SIGHUP on Windows
        old = signal.getsignal(number)
        if old == signal.SIG_IGN:
            continue  # nohup, or a parent that asked this process to ignore it
        previous[number] = signal.SIG_DFL if old is None else old
        signal.signal(number, handler)
    try:
        yield stop
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def _replay_object(value: str) -> dict[str, Any]:
    """The --replay JSON object, from the option's text or from the file it names."""
    shown = repr(value[:200]) + ("..." if len(value) > 200 else "")
    if len(value) > REPLAY_MAX_CHARS:
        raise UsageError(f"--replay {shown}: {len(value):,} characters, more than the "
                         f"{REPLAY_MAX_CHARS:,} a replay example can take; give the object a "
                         "failure's replay command prints, or a file holding it.")
    text = value
    if os.path.isfile(value):  # the JSON saved to a file works as well as pasted
        try:
            with open(value, encoding="utf-8") as handle:
                text = handle.read(REPLAY_MAX_CHARS + 1)
        except (OSError, UnicodeDecodeError) as error:
            raise UsageError(f"--replay {shown}: cannot read this file as text ({error}).") \
                from None
        if len(text) > REPLAY_MAX_CHARS:
            raise UsageError(f"--replay {shown}: the file holds more than {REPLAY_MAX_CHARS:,} "
                             "characters; a replay example is one short JSON object.")
    try:
        replay = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"--replay {shown}: not JSON ({error}); give the object a failure's "
                         "replay command prints, or a file holding it.") from None
    except RecursionError:  # json recurses once per level: "[" * 100000 exhausts the stack
        raise UsageError(f"--replay {shown}: JSON nested too deeply to read; a replay example "
                         "is one flat object such as a failure's replay command prints."
                         ) from None
    if not isinstance(replay, dict):
        raise UsageError(f"--replay {shown}: expected a JSON object.")
    return replay


def _write_report(report: Report, path: str) -> None:
    """Write the report where the engine did not (a device or pipe: once, at the end, one JSON
    document for its reader) or again; a failure is kept on it, as the engine keeps it."""
    try:
        report.write(path)
    except (OSError, ValueError, UsageError) as error:
        report.write_error = f"{path!r}: {error}"


def _json_to_stdout(args: argparse.Namespace, report: Report) -> None:
    """`--report -`: the JSON report, once, to stdout (the table went to stderr)."""
    stream = getattr(args, "json_out", None)
    if stream is not None:
        print(json.dumps(report.to_json(), indent=2, allow_nan=False), file=stream, flush=True)
        args.json_out = None  # one document, even where an interruption follows the end


_TALLY = (("pass", "passed"), ("fail", "failed"), ("error", "errors"), ("crash", "crashed"),
          ("timeout", "timed out"), ("flaky", "flaky"), ("incomplete", "incomplete"),
          ("skip", "skipped"), ("interrupted", "interrupted"))


def tally(report: Report, seconds: float, colour: bool = False) -> str:
    """The closing line, as pytest ends: `14 passed, 1 failed, 5 skipped in 62.3 s: fails`."""
    counts: dict[str, int] = {}
    for p in report.properties:
        counts[p.verdict] = counts.get(p.verdict, 0) + 1
    named = dict(_TALLY)
    parts = [f"{counts.pop(v)} {word}" for v, word in _TALLY if v in counts]
    parts += [f"{n} {v}" for v, n in counts.items() if v not in named]
    verdict = printable(report.error and "error" or report.conclusion.split("\n", 1)[0])
    if colour:
        verdict = coloured(verdict, "error" if report.error else report.status)
    return f"{', '.join(parts) or 'nothing run'} in {seconds:.1f} s: {verdict}"


def _blank_report(args: argparse.Namespace, **state: Any) -> Report:
    """The report of a run that stopped before its report existed (while the TARGET loaded)."""
    from ..session.selection import select_properties

    return Report(target=args.target, header={},
                  properties=[PropertyResult(id=p) for p in select_properties(args.only,
                                                                              args.skip)],
                  **state)


def _name_the_signal(report: Report, name: str) -> bool:
    """Interrupted verdicts say which signal stopped them, not Ctrl-C; True if one changed."""
    changed = False
    for p in report.properties:
        if p.verdict == "interrupted" and p.message.startswith("Ctrl-C"):
            p.message = name + p.message[len("Ctrl-C"):]
            changed = True
    return changed


FLAGS = {"only": "--only", "skip": "--skip", "device": "--device", "dtypes": "--dtype",
         "profile": "--profile", "max_examples": "--max-examples", "seed": "--seed",
         "timeout": "--timeout", "max_seq": "--max-seq", "report": "--report",
         "max_heads": "--max-heads", "max_head_dim": "--max-head-dim", "max_width": "--max-width",
         "replay": "--replay", "world_sizes": "--world-sizes", "worker_user": "--worker-user",
         "workers": "--workers", "black_box": "--black-box", "require": "--require",
         "html": "--html", "jobs": "--jobs", "engine": "--engine"}
"""verify()'s parameters, as the command line spells them."""


def _up_to(limit: int) -> Any:
    return _number(int, f"give a whole number from 1 to {limit}")


def _number(kind: type, valid: str) -> Any:
    """An argparse type: a value that is not a `kind` says what would be valid."""
    def parse(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            noun = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}: {valid}.") from None
    parse.__name__ = kind.__name__
    return parse


def in_flags(error: BaseException, flags: dict[str, str]) -> str:
    """An error's message, a UsageError's parameter named by its flag (`--max-seq 0: ...`)."""
    option = getattr(error, "option", None)
    if option not in flags:
        return str(error)
    value = getattr(error, "value", None)
    shown = (f"{value:g}" if isinstance(value, float) else repr(value)
             if option in ("report", "html") or value == "" else str(value))
    return f"{flags[option]} {shown}: {getattr(error, 'reason', '')}"


def _world_sizes(text: str | None) -> tuple[Any, ...] | None:
    """--world-sizes 2,4 as whole numbers where they are (None: not given, the subject's own);
    RunOptions says what is wrong."""
    if text is None:
        return None
    return tuple(int(w) if w.strip().isdigit() else w.strip() for w in text.split(","))


def add_verify_parser(sub: Any) -> None:
    verify = sub.add_parser(
        "verify", help="check an implementation against every property",
        description="Check TARGET (path/to/impl.py, pkg.module, either with :NAME) against the "
                    "properties of causal self-attention. Exit 0 when all hold (conforms), 1 "
                    "when one fails, 2 when TARGET cannot be loaded or the command is misused, "
                    "3 when nothing failed but a required check (the oracle, unless "
                    "--black-box) could not run (incomplete).")
    verify.add_argument("target", metavar="TARGET", nargs="+",
                        help="one or more: several, or a folder (its *.py files that define a "
                             "subject), are judged each in a runner of its own (--jobs at "
                             "once), one line each in a JSONL --report")
    verify.add_argument("--only", action="append", metavar="IDS",
                        help="comma-separated property ids to run")
    verify.add_argument("--skip", action="append", metavar="IDS",
                        help="comma-separated property ids to leave out")
    verify.add_argument("--device", choices=DEVICES, default="all",
                        help="where to run the subject (all: CUDA too, where present)")
    verify.add_argument("--dtype", action="append", metavar="DTYPE",
                        help="float32, float64, bfloat16, float16 (repeatable or comma-separated)")
    tier = verify.add_mutually_exclusive_group()
    tier.add_argument("--profile", choices=list(PROFILES),
                      default="default", help="examples per property: 10, 50, 400 (ci: 50, "
                                              "derandomized, no database)")
    tier.add_argument("--max-examples", type=_number(int, "give a whole number >= 1"),
                      metavar="N", help="examples per property")
    verify.add_argument("--seed", type=_number(int, "give any whole number"),
                        metavar="N", help="the same seed replays the run")
    verify.add_argument("--timeout", type=_number(float, "give a finite number of seconds > 0"),
                        default=30.0, metavar="SECONDS",
                        help="seconds one example may take before the worker is killed (30)")
    verify.add_argument("--max-seq", type=_up_to(MAX_SEQ_LIMIT),
                        default=None, metavar="T",
                        help="the longest sequence length drawn (64 for modules, 256 for "
                             "kernels; at most 4096); raise it past a blocked kernel's block "
                             "size")
    verify.add_argument("--max-heads", type=_up_to(HEADS_LIMIT),
                        default=MAX_HEADS, metavar="H",
                        help=f"the most query heads drawn ({MAX_HEADS}, at most {HEADS_LIMIT})")
    verify.add_argument("--max-head-dim", type=_up_to(HEAD_DIM_LIMIT),
                        default=MAX_HEAD_DIM, metavar="D",
                        help=f"the largest head size drawn ({MAX_HEAD_DIM}, at most "
                             f"{HEAD_DIM_LIMIT}); 32, 64, 80, 96, 128, 256 and their neighbours "
                             "are favoured where allowed")
    verify.add_argument("--max-width", type=_up_to(WIDTH_LIMIT),
                        default=MAX_WIDTH, metavar="C",
                        help=f"the widest C = H x D drawn ({MAX_WIDTH}, at most {WIDTH_LIMIT}); "
                             "3 examples in 4 are narrow (H <= 8, D <= 16), the others have "
                             "B = 1 and T up to max(9, max_seq / 8)")
    verify.add_argument("--world-sizes", default=None, metavar="W,...",
                        help="the ranks tp_equivalence and cp_equivalence shard over, among the "
                             "subject's WORLD_SIZES (default: all of them, (2, 4) unless it "
                             "says); each rank is a process")
    verify.add_argument("--worker-user", metavar="USER",
                        help="run the subject's worker and ranks as USER (the runner must be "
                             "root): the subject then cannot reach the runner's memory, files "
                             "or signals")
    verify.add_argument("--report", metavar="FILE.json",
                        help="write a JSON report (atomically; once, plainly, to a device or "
                             "pipe); '-': the JSON to stdout, and the table to stderr")
    verify.add_argument("-q", "--quiet", action="store_true",
                        help="print only the closing line (counts, time, verdict); the exit "
                             "status and any --report are as without it")
    verify.add_argument("--html", metavar="FILE.html",
                        help="write an HTML report (one self-contained file) with a picture of "
                             "each failure, replayed against the subject")
    verify.add_argument("--workers", type=_number(int, "give a whole number from 1 to 16"),
                        default=None, metavar="N",
                        help="runners checking properties at once, each with its own worker "
                             "(default: 2 where this process may run on 2 cores, else 1; 1 "
                             "with -x)")
    verify.add_argument("--black-box", action="store_true",
                        help="accept a pass without the oracle (no export_weights, and no "
                             "weights found by name): \"conforms (black-box: oracle not run)\"; "
                             "without it such a run is incomplete (exit 3)")
    verify.add_argument("--require", action="append", metavar="IDS",
                        help="comma-separated property ids that must run (besides the oracle); "
                             "a run where one is skipped is incomplete (exit 3)")
    verify.add_argument("-x", "--exitfirst", action="store_true",
                        help="stop at the first property that does not pass")
    verify.add_argument("--replay", metavar="JSON",
                        help="run one example (the JSON object from a failure's replay command, "
                             "or a file holding it) with one --only")
    verify.add_argument("--no-database", action="store_true",
                        help="do not read or write Hypothesis's example database")
    verify.add_argument("--no-progress", action="store_true", help="no progress lines")
    _add_many_options(verify)
    verify.add_argument("--hf-backend", metavar="BACKEND",
                        help="for an hf:TYPE TARGET: eager, sdpa, flex_attention, or all "
                             "(each backend the model type runs here, one verify each, then "
                             "which properties' verdicts differ between them)")


def _add_many_options(verify: argparse.ArgumentParser) -> None:
    many = verify.add_argument_group(
        "many targets", "several TARGETs or a folder; each target's verdict is one line of the "
        "JSONL report, written as it ends")
    many.add_argument("--jobs", type=_up_to(256), default=None, metavar="N",
                      help="targets judged at once (default: one per core)")
    many.add_argument("--resume", action="store_true",
                      help="continue a JSONL --report: targets whose file (sha256) has a line "
                           "made with the same options are not judged again")
    many.add_argument("--engine", choices=("local", "ray"), default=None,
                      help="local: judges forked on this machine (default); ray: one Ray task "
                           "per target (pip install 'attnspec[ray]')")
    many.add_argument("--ray-address", metavar="ADDR",
                      help="the Ray cluster to use (default: start a local one)")


def _picture_options(args: argparse.Namespace) -> Any:
    """The run's bounds for the pictures' session, so its replays are checked as the run's."""
    from ..common.options import RunOptions

    dtypes = tuple(d.strip() for value in args.dtype or () for d in value.split(",")
                   if d.strip())
    return RunOptions(device=args.device, dtypes=dtypes or None, timeout=args.timeout,
                      max_seq=args.max_seq, max_heads=args.max_heads,
                      max_head_dim=args.max_head_dim, max_width=args.max_width,
                      database=False, worker_user=args.worker_user)


def _header(session_header: dict[str, Any], target: str) -> str:
    v = session_header["versions"]
    dtypes = "; ".join(f"{dev}: {', '.join(ds)}" for dev, ds in session_header["dtypes"].items())
    return (f"attnspec {v['attnspec']} verify {target}\n"
            f"subject: {session_header['subject']} ({session_header['origin']})\n"
            f"torch {v['torch']}, hypothesis {v['hypothesis']}, python {v['python']}\n"
            f"devices: {', '.join(session_header['devices'])}  dtypes: {dtypes}\n"
            f"profile: {session_header['profile']} ({session_header['max_examples']} examples "
            f"per property asked, T up to {session_header['max_seq']}, H up to "
            f"{session_header.get('max_heads', MAX_HEADS)}, D up to "
            f"{session_header.get('max_head_dim', MAX_HEAD_DIM)}, C up to "
            f"{session_header.get('max_width', MAX_WIDTH)}; what was reached: the coverage "
            "lines), seed: "
            f"{session_header['seed']}, timeout: {session_header['timeout']:g}s\n"
            + _weights_line(session_header.get("weights"))
            + _triton_line(session_header.get("triton")))


def _triton_line(triton: Any) -> str:
    """How a Triton kernel ran: natively, or in Triton's interpreter on the CPU."""
    if not isinstance(triton, dict):
        return ""
    if triton.get("mode") != "interpreter":
        return "triton: native\n"
    scaled = triton.get("scaled") or {}
    sizes = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                      for k, v in scaled.items())
    line = "triton: interpreter (CPU, no GPU seen; TRITON_INTERPRET=1)"
    if sizes:
        line += f"; at the interpreter's pace: {sizes}"
    if triton.get("bfloat16"):
        line += f"; {triton['bfloat16']}"
    return line + "\n"


def _weights_line(weights: Any) -> str:
    """Where the oracle's weights come from: export_weights, found by name, or none."""
    if not isinstance(weights, dict) or weights.get("source") == "export_weights":
        return ""
    if weights.get("found"):
        return (f"weights: found by name: {weights['found']} (confirmed on a probe; "
                "export_weights would say the same)\n")
    return f"weights: none: no export_weights, and {weights.get('why', 'none found by name')}\n"


def _hf_targets(args: argparse.Namespace) -> list[str] | None:
    """The TARGETs `--hf-backend` asks for, or None without it; a misuse is a ValueError."""
    backend = getattr(args, "hf_backend", None)
    if backend is None:
        return None
    from ..runner.subject import HF_PREFIX

    if not args.target.startswith(HF_PREFIX) or "@" in args.target:
        raise ValueError(f"--hf-backend {backend}: TARGET {args.target!r} must be hf:TYPE "
                         "without @BACKEND (the option chooses the backend).")
    if backend != "all":
        return [f"{args.target}@{backend}"]
    from ..subjects import hf

    model_type = args.target[len(HF_PREFIX):]
    try:
        backends, left_out = hf.runnable_backends(model_type)
    except (ValueError, ImportError):  # AdapterError: the load explains what is wrong
        return [args.target]
    for backend, why in left_out.items():
        print(f"attnspec verify: --hf-backend all: {backend} left out ({why}).")
    return [f"{args.target}@{b}" for b in backends]


def run_verify(args: argparse.Namespace) -> int:
    if isinstance(args.target, list):  # one TARGET (several are many_cli's)
        args.target = args.target[0]
    try:
        targets = _hf_targets(args)
    except ValueError as error:
        print(f"attnspec verify: {error}", file=sys.stderr)
        return EXIT_USAGE
    if targets is None:
        return _run_one(args)
    if len(targets) > 1 and args.report == "-":
        print(f"attnspec verify: --report - with --hf-backend {args.hf_backend}: one JSON "
              "document per backend cannot share stdout; give --report FILE.json (each "
              "backend's is FILE@BACKEND.json).", file=sys.stderr)
        return EXIT_USAGE
    codes: dict[str, int] = {}
    verdicts: dict[str, dict[str, str]] = {}
    scratch = None if args.report else tempfile.mkdtemp(prefix="attnspec-backends-")
    for target in targets:
        one = argparse.Namespace(**vars(args))
        one.target = target
        if len(targets) > 1:  # each backend's own report: FILE@BACKEND.json
            # kept, so the report lines printed stay true: one JSON per backend
            stem, ext = os.path.splitext(args.report or os.path.join(str(scratch), "r.json"))
            one.report = f"{stem}@{target.rpartition('@')[2]}{ext or '.json'}"
            if getattr(args, "html", None):  # and one page each: FILE@BACKEND.html
                stem, ext = os.path.splitext(args.html)
                one.html = f"{stem}@{target.rpartition('@')[2]}{ext or '.html'}"
        report_path = one.report
        codes[target] = _run_one(one)
        if report_path and os.path.isfile(report_path):
            with open(report_path) as file:
                verdicts[target] = {r["id"]: r["verdict"]
                                    for r in json.load(file).get("properties", [])}
        if codes[target] >= 128:  # interrupted: the rest is not run
            break
    if len(targets) > 1:
        said = {EXIT_OK: "pass", EXIT_FAILED: "fail", EXIT_INCOMPLETE: "incomplete"}
        print("\nbackends: " + ", ".join(f"{t.rpartition('@')[2]} {said.get(c, f'exit {c}')}"
                                         for t, c in codes.items()))
        differ = [pid for pid in sorted(set().union(*verdicts.values())) if len(
            {v.get(pid, "-") for v in verdicts.values()} - {"skip"}) > 1] if verdicts else []
        if differ:
            print("backends disagree on: " + "; ".join(
                f"{pid} (" + ", ".join(f"{t.rpartition('@')[2]}: {v.get(pid, '-')}"
                                       for t, v in verdicts.items()) + ")" for pid in differ))
        else:
            print("backends agree on every property")
    return worst_exit(codes.values())


def worst_exit(codes: Iterable[int]) -> int:
    """The exit status of several runs: a signal, then misuse, a failure, an incomplete run."""
    rank = {EXIT_OK: 0, EXIT_INCOMPLETE: 1, EXIT_FAILED: 2, EXIT_USAGE: 3}
    return max(codes, key=lambda c: rank.get(c, 4 + c))


def _run_one(args: argparse.Namespace) -> int:
    from ..runner.isolation import harden_runner, restore_runner

    out, err = _SafeStream(sys.stdout), _SafeStream(sys.stderr)
    args.started = time.perf_counter()  # the closing line's time: the wall, as pytest's
    if args.report == "-":  # stdout holds the JSON alone, for `| jq`; people read stderr
        args.report, args.json_out, out = None, out, err
    if getattr(args, "quiet", False):
        args.no_progress, args.table_out, out = True, out, _SafeStream(None)
    # Before any subject code runs: no same-user process (unless root) may ptrace this one or
    # open its /proc/PID/{mem,fd,environ}, and whatever the subject detaches is adopted here.
    before = harden_runner()
    try:
        with _signals_interrupt() as stop:
            try:
                return _run_verify(args, out, err, stop)
            except KeyboardInterrupt:  # a stop signal before or after verify() itself
                stop.stopping = True
                name = signal.Signals(stop.signum).name if stop.signum else "Ctrl-C"
                print(f"\nattnspec verify: interrupted by {name}.", file=err)
                return 128 + stop.signum if stop.signum else EXIT_INTERRUPTED
    finally:
        out.flush()
        err.flush()
        restore_runner(before)


def _run_verify(args: argparse.Namespace, out: _SafeStream, err: _SafeStream,
                stop: _Stop) -> int:
    _start_workers(args)
    from ..common.report import progress_printer
    from ..session.engine import FRONT_END_FLAGS
    from .api import verify

    dtypes = [d.strip() for value in args.dtype or () for d in value.split(",") if d.strip()]
    replay = None if args.replay is None else _replay_object(args.replay)
    if args.html is not None:  # before the run: a path it would refuse at the end costs it all
        from .html_report import check_html_path

        check_html_path(args.html, target=args.target, report=args.report)
    plain = args.report is not None and is_stream(args.report)
    if plain:  # the engine writes after every property; a pipe's reader wants one document
        check_report_path(args.report)

    # The printer writes to the stream it is given: a safe one survives `2>&-`.
    printer = (lambda *a: None) if args.no_progress else progress_printer(err)

    def progress(prop: str, done: int, total: int, result: Any) -> None:
        printer(prop, done, total, result)

    if args.max_seq == 1:
        print("attnspec verify: note: --max-seq 1 draws only T = 1, where causality, prefix "
              "and grad_causality have no later position to check.", file=err)
    started: list[Report] = []

    def on_start(report: Report) -> None:
        started.append(report)  # the same object fills in as properties finish
        print(printable(_header(report.header, args.target)), file=out, flush=True)

    named = FRONT_END_FLAGS.set(FLAGS)  # the runner's messages say --timeout, not timeout=
    try:
        report = verify(
            args.target, only=args.only, skip=args.skip, device=args.device,
            dtypes=dtypes or None, profile=args.profile, max_examples=args.max_examples,
            seed=args.seed, timeout=args.timeout, max_seq=args.max_seq,
            max_heads=args.max_heads, max_head_dim=args.max_head_dim, max_width=args.max_width,
            world_sizes=_world_sizes(args.world_sizes), report=None if plain else args.report,
            worker_user=args.worker_user, workers=args.workers,
            progress=progress,
            exitfirst=args.exitfirst, replay=replay, database=not args.no_database,
            on_start=on_start, black_box=args.black_box, require=args.require,
        )
    except TargetError as error:
        if plain:
            _write_report(_blank_report(args, error=str(error), partial=False), args.report)
        _json_to_stdout(args, _blank_report(args, error=str(error), partial=False))
        print(f"attnspec verify: {printable(str(error))}", file=err)  # the report says it too
        return EXIT_USAGE
    except KeyboardInterrupt:
        stop.stopping = True  # from here on a stop signal waits for the report
        return _interrupted(args, stop, started[0] if started else None, plain, out, err)
    finally:
        FRONT_END_FLAGS.reset(named)
    return _finish(args, report, plain, out, err)


def _start_workers(args: argparse.Namespace) -> None:
    """Workers forked from a zygote start with torch imported; where this process cannot fork
    one, the first worker imports torch while this process does (two cores, half the wait)."""
    from ..runner import spawn
    from ..runner.isolation import is_subreaper

    forking = (spawn.fork_unsafe_reason() is None and is_subreaper() and "torch" not in sys.modules
               and os.environ.get("ATTNSPEC_EXEC_WORKERS", "") in ("", "0"))
    if forking:  # OpenMP reads it once, as torch loads: the zygote's copies keep it
        os.environ.update(spawn.worker_env(dict(os.environ)))
    elif args.worker_user is None:  # another user's starts with the session
        spawn.prestart()
    from ..runner.worker import main as worker_main

    if forking and spawn.start_zygote(worker_main) and args.worker_user is None:
        spawn.prestart()


def _interrupted(args: argparse.Namespace, stop: _Stop, started: Report | None, plain: bool,
                 out: _SafeStream, err: _SafeStream) -> int:
    """Ctrl-C or a stop signal: the report so far kept, saying which, and the exit status."""
    so_far = started if started is not None else _blank_report(args, interrupted=True)
    name = signal.Signals(stop.signum).name if stop.signum else None
    renamed = name is not None and _name_the_signal(so_far, name)
    if plain or (renamed and args.report):
        _write_report(so_far, args.report)  # again, saying which signal it was
    _json_to_stdout(args, so_far)
    if started is not None:
        print("\n" + so_far.summary(), file=out, flush=True)
    kept = (f"; the report so far is in {args.report}, marked interrupted" if args.report
            else "")
    if so_far.write_error is not None:
        kept = f"; the report could not be written to {printable(so_far.write_error)}"
    how = f" by {name}" if name else ""
    print(f"\nattnspec verify: interrupted{how}{kept}.", file=err)
    return 128 + stop.signum if stop.signum else EXIT_INTERRUPTED


def _finish(args: argparse.Namespace, report: Report, plain: bool, out: _SafeStream,
            err: _SafeStream) -> int:
    """After the run: the HTML and JSON reports written, the summary, the exit status."""
    if args.html:
        from .html_report import attach_pictures, write_html

        try:
            attach_pictures(report, _picture_options(args))
            if args.report and not plain:
                _write_report(report, args.report)  # again, holding the pictures' data
            write_html(report, args.html)
        except (OSError, UsageError, TargetError) as error:
            print(f"attnspec verify: the HTML report could not be written to {args.html!r}: "
                  f"{printable(str(error))}", file=err)
    if plain:
        _write_report(report, args.report)
    _json_to_stdout(args, report)
    # The verdicts decide the exit status, whatever became of stdout (`| head` closes it).
    print(report.summary(colour=wants_colour(out)), file=out)
    wall = time.perf_counter() - getattr(args, "started", time.perf_counter())
    closing = getattr(args, "table_out", out)
    print(("\n" if not getattr(args, "quiet", False) else "") + tally(
        report, wall, colour=wants_colour(closing)), file=closing)
    if report.write_error is not None:
        print(f"\nattnspec verify: the JSON report could not be written to "
              f"{printable(report.write_error)}", file=err)
        return EXIT_FAILED if report.failures else EXIT_USAGE
    if args.report:
        # Printed where only attnspec writes: a report changed after the run no longer matches.
        digest = None if plain else report.digest
        print(f"\nreport: {args.report}" + (f" (sha256 {digest})" if digest else ""), file=out)
    if report.error is not None:  # it ran, and checked nothing: the TARGET's or the options'
        print(f"attnspec verify: {printable(report.error)}", file=err)
        return EXIT_USAGE
    if report.status == "incomplete":
        return EXIT_INCOMPLETE
    return EXIT_OK if report.ok else EXIT_FAILED
